// ZeRO: the engine every stage shares and the strategy (see zero.h for the layout; the
// stages' own parts are zero_stage1_2.cpp and zero_stage3.cpp).
#include "runtime/strategy/zero.h"

#include <cmath>
#include <optional>

#include "comm/tensors.h"
#include "runtime/device_memory.h"

namespace accel {

namespace {

int64_t ceil_to(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

}  // namespace

ZeroEngine::ZeroEngine(comm::Communicator& comm, comm::ComputeClock* clock, Model& model, c10::ScalarType work)
    : comm_(comm),
      clock_(clock),
      model_(model),
      work_(work),
      n_(comm.size()),
      r_(comm.rank()),
      model_gates_(model.gates_units()),
      device_(model.parameters().empty() ? torch::Device(torch::kCPU) : model.parameters().front().device()) {
  broadcast_from_rank0(comm_, model);  // rank 0's weights and buffers everywhere
  for (const auto& p : model.parameters())
    ACCEL_CHECK(p.scalar_type() == torch::kFloat, Status::Unsupported, "ZeRO shards fp32 parameters; the model has a ",
                c10::toString(p.scalar_type()), " parameter");
}

void ZeroEngine::layout(int64_t bucket_bytes) {
  const auto& params = model_.parameters();
  torch::NoGradGuard ng;
  // units
  const std::vector<std::vector<size_t>> groups = model_gates_ ? model_.units() : ungated_units(bucket_bytes);
  unit_of_.assign(params.size(), {SIZE_MAX, 0});
  int64_t total_chunks = 0;
  for (auto& g : groups) {
    if (g.empty()) continue;
    Unit u;
    for (size_t k : g) {
      ACCEL_CHECK(k < params.size() && unit_of_[k].first == SIZE_MAX, Status::Internal, "bad parameter unit");
      unit_of_[k] = {units_.size(), u.params.size()};
      u.params.push_back(k);
      u.offsets.push_back(u.numel);
      u.numel += params[k].numel();
    }
    u.padded = ceil_to(std::max<int64_t>(u.numel, 1), n_);
    u.chunk = u.padded / n_;
    u.shard_offset = total_chunks;
    total_chunks += u.chunk;
    units_.push_back(std::move(u));
  }
  for (size_t k = 0; k < params.size(); ++k)
    ACCEL_CHECK(unit_of_[k].first != SIZE_MAX, Status::Internal, "parameter ", k, " is in no unit");
  // buckets of consecutive units, from the last (a layer unit's backward ends last-first), as
  // many as fit in `coalesce` bytes of working dtype; one unit each where nothing coalesces
  const int64_t coalesce = costly_collectives() ? coalesced_bytes(bucket_bytes) : 0;
  const int64_t esize = static_cast<int64_t>(c10::elementSize(work_));
  bucket_of_unit_.assign(units_.size(), 0);
  for (size_t hi = units_.size(); hi-- > 0;) {
    Bucket b;
    b.lo = b.hi = hi;
    int64_t bytes = units_[hi].padded * esize;
    while (b.lo > 0 && bytes + units_[b.lo - 1].padded * esize <= coalesce) bytes += units_[--b.lo].padded * esize;
    for (size_t u = b.lo; u <= b.hi; ++u) {
      units_[u].bucket_at = b.chunks;
      b.chunks += units_[u].chunk;
    }
    hi = b.lo;
    buckets_.insert(buckets_.begin(), std::move(b));
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t u = buckets_[b].lo; u <= buckets_[b].hi; ++u) bucket_of_unit_[u] = b;

  total_ = total_chunks;
  if (separate_master()) master_ = home_zeros({total_chunks});
  shard_buffers();
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    Unit& u = units_[ui];
    torch::Tensor flat = torch::zeros({u.padded}, on(torch::kFloat));
    for (size_t i = 0; i < u.params.size(); ++i)
      flat.narrow(0, u.offsets[i], params[u.params[i]].numel()).copy_(params[u.params[i]].detach().reshape({-1}));
    torch::Tensor mine = on_rank(flat, ui);
    if (master_.defined()) master_.narrow(0, u.shard_offset, u.chunk).copy_(mine);
    u.full = work_ == torch::kFloat ? flat : flat.to(work_);
    flat = torch::Tensor();
    u.gathered = true;
    for (size_t i = 0; i < u.params.size(); ++i) {
      torch::Tensor p = params[u.params[i]];
      p.set_data(u.full.narrow(0, u.offsets[i], p.numel()).view(p.sizes()));
    }
    laid_out(ui, mine);
  }
  for (size_t k = 0; k < params.size(); ++k)
    accumulators_.push_back(on_grad_accumulated(params[k], [owner = owner_, k] {
      if (ZeroEngine* e = *owner) e->accumulated(k);
    }));
}

ZeroEngine::~ZeroEngine() { *owner_ = nullptr; }

bool ZeroEngine::costly_collectives() const { return comm_.backend() == "gloo"; }

torch::Tensor ZeroEngine::master_chunk(size_t u) {
  const Unit& x = units_[u];
  if (master_.defined()) return master_.narrow(0, x.shard_offset, x.chunk);
  return on_rank(x.full, u);  // fp32 working weights, stages 1-2
}

void ZeroEngine::begin_backward(bool sync, int64_t rows) {
  in_backward_ = true;
  sync_ = sync;
  rows_ = rows;
}

void ZeroEngine::charge_backward(size_t u) {
  // a dense layer: 2 FLOPs per weight and row for each of dX and dW
  if (clock_ && rows_ > 0) clock_->charge_flops(4.0 * static_cast<double>(rows_) * static_cast<double>(units_[u].numel), "backward");
}

void ZeroEngine::accumulated(size_t k) {
  if (!in_backward_) return;
  auto [ui, slot] = unit_of_[k];
  Unit& u = units_[ui];
  const auto& p = model_.parameters()[k];
  torch::NoGradGuard ng;
  if (!take_grad(u, slot, p)) return;
  if (!u.launched && ++u.ready == u.params.size()) launch(ui);
}

bool ZeroEngine::take_grad(Unit& u, size_t slot, const torch::Tensor& p) {
  if (u.launched) return false;  // a parameter reached again after its unit was reduced
  const size_t ui = static_cast<size_t>(&u - units_.data());
  Bucket& b = buckets_[bucket_of_unit_[ui]];
  if (b.size() > 1) {  // straight into the bucket's packed buffer (zeros where no gradient lands)
    if (!b.send.defined()) b.send = torch::zeros({n_ * b.chunks}, on(work_));
    pack(b, ui, u.offsets[slot], p.grad().reshape({-1}));
  } else {
    if (!u.gbuf.defined()) u.gbuf = torch::zeros({u.padded}, on(work_));
    u.gbuf.narrow(0, u.offsets[slot], p.numel()).copy_(p.grad().reshape({-1}));
  }
  const_cast<torch::Tensor&>(p).mutable_grad().reset();  // the unsharded gradient goes at once
  return true;
}

std::shared_ptr<comm::Work> ZeroEngine::reduce(size_t ui) {
  Unit& u = units_[ui];
  u.rs_out = torch::empty({u.chunk}, on(work_));
  return comm::reduce_scatter(comm_, u.gbuf, u.rs_out, comm::RedOp::Avg);
}

void ZeroEngine::launch(size_t ui) {
  Unit& u = units_[ui];
  charge_backward(ui);
  const size_t bi = bucket_of_unit_[ui];
  Bucket& b = buckets_[bi];
  const bool full = ++b.launched == b.size();  // the bucket's last unit: its reduction goes now
  if (full) b.work = b.size() == 1 ? reduce(ui) : reduce_bucket(b);
  u.launched = true;
  if (full) inflight_.push_back(bi);
  release(ui);  // stage 3: the unit's backward is done with its weights
  while (inflight_.size() > max_inflight()) complete(inflight_.front());
}

// Elements [at, at + flat.numel()) of unit u's flat values into bucket b's packed buffer: rank
// q's part holds chunk q of each of its units in turn.
void ZeroEngine::pack(Bucket& b, size_t u, int64_t at, const torch::Tensor& flat) {
  const Unit& x = units_[u];
  for (int64_t i = 0, len = flat.numel(); i < len;) {
    const int64_t e = at + i, q = e / x.chunk, in = e % x.chunk, k = std::min(len - i, x.chunk - in);
    b.send.narrow(0, q * b.chunks + x.bucket_at + in, k).copy_(flat.narrow(0, i, k));
    i += k;
  }
}

// A bucket's units reduced as one, from its packed buffer (stage 2 filled it as the gradients
// came; stage 1's whole gradients are packed now), so that the reduce-scatter leaves the
// rank's chunk of every unit, in the order of the rank's shard, in `out`.
std::shared_ptr<comm::Work> ZeroEngine::reduce_bucket(Bucket& b) {
  if (!b.send.defined()) {
    b.send = torch::empty({n_ * b.chunks}, on(work_));
    torch::Tensor rows = b.send.view({n_, b.chunks});
    for (size_t u = b.lo; u <= b.hi; ++u) {
      const Unit& x = units_[u];
      rows.narrow(1, x.bucket_at, x.chunk).copy_(x.gbuf.view({n_, x.chunk}));
    }
  }
  b.out = torch::empty({b.chunks}, on(work_));
  return comm::reduce_scatter(comm_, b.send, b.out, comm::RedOp::Avg);
}

void ZeroEngine::complete(size_t bi) {
  Bucket& b = buckets_[bi];
  if (inflight_.empty() || inflight_.front() != bi) return;
  inflight_.pop_front();
  const std::shared_ptr<comm::Work> work = std::move(b.work);
  work->wait();
  b.launched = 0;
  if (b.size() == 1) {
    reduced(b.lo);
    grad_to_host(b.lo, work.get());
    return;
  }
  b.send = torch::Tensor();
  for (size_t u = b.lo; u <= b.hi; ++u) {
    units_[u].rs_out = b.out.narrow(0, units_[u].bucket_at, units_[u].chunk);
    reduced(u);
    grad_to_host(u, work.get());
  }
  b.out = torch::Tensor();
}

void ZeroEngine::grad_to_host(size_t u, const comm::Work* after) {
  if (!offload_ || !sync_) return;  // (an earlier micro-batch: the gradient is not complete)
  if (host_grad_.size() != units_.size()) host_grad_.resize(units_.size());
  host_grad_[u] = grad_to_host_posted(grad_chunk(u), clock_, after);
}

void ZeroEngine::reduced(size_t ui) {
  Unit& u = units_[ui];
  if (grad_valid_)  // an earlier micro-batch of this step: accumulate
    grad_chunk(ui).add_(u.rs_out);
  else
    grad_chunk(ui).copy_(u.rs_out);
  u.gbuf = torch::Tensor();
  u.rs_out = torch::Tensor();
}

void ZeroEngine::clear_grads() {
  for (const auto& p : model_.parameters())
    if (p.grad().defined()) const_cast<torch::Tensor&>(p).mutable_grad().reset();
}

void ZeroEngine::end_backward() {
  in_backward_ = false;
  if (!reduces(sync_)) {
    for (size_t u = 0; u < units_.size(); ++u) charge_backward(u);
    return;
  }
  torch::NoGradGuard ng;
  // units whose parameters got no gradient (unused in this forward): zeros for them, so
  // every rank launches the same collectives in the same order
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    Unit& u = units_[ui];
    if (u.launched) continue;
    unreduced(u);
    launch(ui);
  }
  while (!inflight_.empty()) complete(inflight_.front());
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    units_[ui].ready = 0;
    units_[ui].launched = false;
    release(ui);
  }
  grad_valid_ = true;
  clear_grads();  // the sharded gradient is the truth now
}

void ZeroEngine::end_backward_abandoned() {
  in_backward_ = false;
  host_grad_.clear();
  while (!inflight_.empty()) {
    Bucket& b = buckets_[inflight_.front()];
    inflight_.pop_front();
    try {
      b.work->wait();
    } catch (const std::exception&) {  // the failure that stopped backward, most likely
    }
    b.work.reset();
  }
  for (Bucket& b : buckets_) {  // those not launched too: their units' gradients are dropped
    b.launched = 0;
    b.send = b.out = torch::Tensor();
  }
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    Unit& u = units_[ui];
    drop_partial(u);
    u.ready = 0;
    u.launched = false;
    release(ui);
  }
  clear_grads();
}

bool ZeroEngine::unscale(double inv_scale) {
  grad_factor_ = inv_scale;
  int32_t bad = 0;
  if (grad_valid_)
    for (size_t u = 0; u < units_.size() && !bad; ++u) bad = torch::isfinite(grad_chunk(u)).all().item<bool>() ? 0 : 1;
  comm::host_all_reduce(comm_, &bad, 1, comm::DataType::Int32, comm::RedOp::Max);
  return bad != 0;
}

double ZeroEngine::clip(double max_norm) {
  double sumsq = 0.0;
  if (grad_valid_) {
    for (size_t u = 0; u < units_.size(); ++u) {
      torch::Tensor g = grad_chunk(u).to(torch::kFloat);
      if (grad_factor_ != 1.0) g.mul_(grad_factor_);
      sumsq += g.pow(2).sum(torch::kDouble).item<double>();
    }
  }
  comm::host_all_reduce(comm_, &sumsq, 1, comm::DataType::Float64, comm::RedOp::Sum);
  const double total = std::sqrt(sumsq);
  if (!std::isfinite(total)) return total;
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) grad_factor_ *= coef;
  return total;
}

// The rank's chunks as the optimizer's shard: a segment per unit, the gradient read with
// grad_factor_ applied, the state by the optimizer's scope, ZeRO's communicator as the
// reducer (fp64 sums), and each stepped unit sent on as the stage requires.
class ZeroEngine::RankShard final : public Shard, public Reducer {
 public:
  // Offloaded (the engine's offload_): the master chunks are in host memory (a separate
  // master) or copied there for the step (stages 1-2 in fp32, whose master is the working
  // weights), the gradient is read through a host copy, the state lives there.
  RankShard(ZeroEngine& e, const Optimizer& opt) : e_(e), opt_(opt), pieces_(e.pieces()) {
    for (size_t i = 0; i < e.model_.parameters().size(); ++i) params_.push_back(i);
    if (e_.offload_) host_w_.resize(e_.units_.size());
  }
  size_t segments() const override { return e_.units_.size(); }
  torch::Tensor weight(size_t s) override {
    if (!e_.offload_ || e_.master_.defined()) return e_.master_chunk(s);
    torch::Tensor& h = host_w_[s];
    if (!h.defined()) {
      h = offload::to_host(e_.master_chunk(s));
      opt_.count_host_bytes(static_cast<uint64_t>(h.numel()) * 4);
    }
    return h;
  }
  torch::Tensor grad(size_t s, int64_t at, int64_t len) override {
    torch::Tensor g = e_.grad_chunk(s).narrow(0, at, len);
    if (e_.offload_) {
      if (s < e_.host_grad_.size() && e_.host_grad_[s].defined()) {
        g = e_.host_grad_[s].narrow(0, at, len);  // copied as it was reduced (counted then)
      } else {
        opt_.count_host_bytes(static_cast<uint64_t>(g.numel()) * g.element_size());
      }
      g = offload::to_host(g);  // its own copy: scaled in place, in host memory
      return e_.grad_factor_ != 1.0 ? g.mul_(e_.grad_factor_) : g;
    }
    g = g.to(torch::kFloat);  // a copy only for 16-bit gradients
    return e_.grad_factor_ != 1.0 ? g * e_.grad_factor_ : g;
  }
  torch::Tensor state(const std::string& kind, size_t s) override {
    torch::Tensor& all = e_.flat_state_[kind];
    if (!all.defined()) all = e_.home_zeros({e_.total_});
    return all.narrow(0, e_.units_[s].shard_offset, e_.units_[s].chunk);
  }
  torch::Tensor param_state(const std::string& kind, size_t param) override {
    const bool whole = opt_.state_scope(kind) == StateScope::Parameter;
    std::vector<torch::Tensor>& v = whole ? e_.whole_state_[kind] : e_.piece_state_[kind];
    if (v.size() != params_.size()) v.resize(params_.size());
    if (!v[param].defined()) {
      std::vector<int64_t> shape = opt_.state_shape(kind, this->shape(param));
      if (!whole)
        for (const auto& pc : pieces_)
          if (pc.param == param) shape = {pc.len};
      v[param] = e_.home_zeros(shape);
    }
    return v[param];
  }
  void stepped(size_t s) override {
    device_memory::HostScope device(false);  // the copy back and the gathers are the device's
    if (e_.offload_) {  // the updated chunk back to the device: into the working weights
      if (host_w_[s].defined()) {
        e_.master_chunk(s).copy_(host_w_[s]);
        opt_.count_host_bytes(static_cast<uint64_t>(host_w_[s].numel()) * 4);
        host_w_[s] = torch::Tensor();
      } else if (!e_.weights_on_host()) {  // (stage 3 with its shard on the host: its gathers copy it)
        opt_.count_host_bytes(static_cast<uint64_t>(e_.units_[s].chunk) * c10::elementSize(e_.work_));
      }
    }
    e_.stepped(s, gathers);
  }
  const std::vector<StatePiece>& pieces() const override { return pieces_; }
  const std::vector<size_t>& params() const override { return params_; }
  std::vector<int64_t> shape(size_t param) const override { return e_.model_.parameters()[param].sizes().vec(); }
  int64_t step() const override { return e_.steps_; }
  Reducer& reducer() override { return *this; }
  void sum(const torch::Tensor& t) override { comm::all_reduce(e_.comm_, t, comm::RedOp::Sum)->wait(); }

  std::vector<std::shared_ptr<comm::Work>> gathers;

 private:
  ZeroEngine& e_;
  const Optimizer& opt_;
  std::vector<StatePiece> pieces_;
  std::vector<size_t> params_;
  std::vector<torch::Tensor> host_w_;  // offload without a separate master: the chunk being stepped
};

void ZeroEngine::step(const Optimizer& opt) {
  torch::NoGradGuard ng;
  ++steps_;
  if (!host_grad_.empty()) offload::wait_copies(device_);
  RankShard shard(*this, opt);
  // offloaded, the step runs on host tensors: its temporaries are host memory too
  std::optional<device_memory::HostScope> host;
  if (offload_) host.emplace();
  opt.step_shard(shard);
  for (auto& w : shard.gathers) w->wait();
}

void ZeroEngine::zero_grad() {
  grad_valid_ = false;  // the next micro-batch overwrites the sharded gradient
  grad_factor_ = 1.0;
  host_grad_.clear();
  clear_grads();
}

std::vector<torch::Tensor> ZeroEngine::full_parameters() {
  const auto& params = model_.parameters();
  std::vector<torch::Tensor> out(params.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& x = units_[u];
    torch::Tensor mine = master_chunk(u).contiguous();
    torch::Tensor flat = torch::empty({x.padded}, on(torch::kFloat));
    comm::all_gather(comm_, mine, flat)->wait();
    for (size_t i = 0; i < x.params.size(); ++i) {
      const auto& p = params[x.params[i]];
      out[x.params[i]] = flat.narrow(0, x.offsets[i], p.numel()).view(p.sizes()).to(torch::kCPU).clone();
    }
  }
  return out;
}

torch::Tensor ZeroEngine::full_gradient(size_t index) {
  const auto& params = model_.parameters();
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& x = units_[u];
    for (size_t i = 0; i < x.params.size(); ++i) {
      if (x.params[i] != index) continue;
      torch::Tensor mine = grad_chunk(u).to(torch::kFloat);
      if (grad_factor_ != 1.0) mine = mine * grad_factor_;
      mine = mine.contiguous();
      torch::Tensor flat = torch::empty({x.padded}, on(torch::kFloat));
      comm::all_gather(comm_, mine, flat)->wait();
      const torch::Tensor& p = params[index];
      return flat.narrow(0, x.offsets[i], p.numel()).view(p.sizes()).to(torch::kCPU).clone();
    }
  }
  fail(Status::Internal, "ZeRO: parameter ", index, " is in no unit");
}

std::vector<StatePiece> ZeroEngine::pieces() const {
  std::vector<StatePiece> out;
  const auto& params = model_.parameters();
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& x = units_[u];
    const int64_t lo = r_ * x.chunk, hi = lo + x.chunk;
    for (size_t i = 0; i < x.params.size(); ++i) {
      const int64_t a = std::max(lo, x.offsets[i]), b = std::min(hi, x.offsets[i] + params[x.params[i]].numel());
      if (a >= b) continue;
      out.push_back(StatePiece{x.params[i], a - x.offsets[i], b - a, u, a - lo});
    }
  }
  return out;
}

torch::Tensor ZeroEngine::piece_state(const std::string& kind, const StatePiece& p) {
  const Unit& x = units_[p.unit];
  torch::Tensor chunk;
  if (kind == "weight") {
    chunk = master_chunk(p.unit);
  } else if (whole_state_.count(kind)) {
    return {};  // whole on every rank: replicated_state
  } else if (auto it = piece_state_.find(kind); it != piece_state_.end()) {  // a parameter's piece
    const std::vector<torch::Tensor>& v = it->second;
    return p.param < v.size() && v[p.param].defined() ? v[p.param] : torch::Tensor();
  } else {
    auto f = flat_state_.find(kind);
    if (f == flat_state_.end() || !f->second.defined()) return {};
    chunk = f->second.narrow(0, x.shard_offset, x.chunk);
  }
  return chunk.narrow(0, p.in_chunk, p.len);
}

torch::Tensor ZeroEngine::replicated_state(const std::string& kind, size_t param) const {
  auto it = whole_state_.find(kind);
  if (it == whole_state_.end() || param >= it->second.size()) return {};
  return it->second[param];
}

void ZeroEngine::restore(const std::map<std::string, std::vector<torch::Tensor>>& full, int64_t steps,
                         const Optimizer* opt) {
  torch::NoGradGuard ng;
  const auto& params = model_.parameters();
  const size_t np = params.size();
  auto scope = [&](const std::string& kind) { return opt ? opt->state_scope(kind) : StateScope::Element; };
  if (opt)  // the per-parameter state (Adafactor's): the factors whole, a vector's second moment as this rank's piece
    for (const auto& k : opt->state_kinds()) {
      if (scope(k) == StateScope::Parameter) whole_state_[k].assign(np, torch::Tensor());
      if (scope(k) == StateScope::Piece) piece_state_[k].assign(np, torch::Tensor());
    }
  for (const auto& [kind, tensors] : full) {
    ACCEL_CHECK(tensors.size() == params.size(), Status::Internal, "restore: ", tensors.size(), " tensors for ",
                params.size(), " parameters");
    bool any = false;
    for (const auto& t : tensors) any = any || t.defined();
    if (!any) continue;
    if (kind != "weight" && scope(kind) == StateScope::Parameter) {
      auto& dst = whole_state_[kind];
      for (size_t i = 0; i < np; ++i)
        if (tensors[i].defined()) dst[i] = to_home(tensors[i]);
      continue;
    }
    if (kind != "weight" && scope(kind) == StateScope::Piece) {
      auto& dst = piece_state_[kind];
      for (const auto& pc : pieces())
        if (tensors[pc.param].defined())
          dst[pc.param] = to_home(tensors[pc.param].reshape({-1}).narrow(0, pc.start, pc.len));
      continue;
    }
    bool known = false;
    if (opt)
      for (const auto& k : opt->state_kinds()) known = known || k == kind;
    torch::Tensor* opt_state = kind != "weight" && known ? &flat_state_[kind] : nullptr;
    ACCEL_CHECK(kind == "weight" || opt_state != nullptr, Status::Internal, "restore: unknown state '", kind, "'");
    if (opt_state && !opt_state->defined()) *opt_state = home_zeros({total_});
    for (size_t u = 0; u < units_.size(); ++u) {
      Unit& x = units_[u];
      torch::Tensor flat = torch::zeros({x.padded}, on(torch::kFloat));
      for (size_t i = 0; i < x.params.size(); ++i) {
        const torch::Tensor& t = tensors[x.params[i]];
        if (t.defined()) flat.narrow(0, x.offsets[i], params[x.params[i]].numel()).copy_(t.reshape({-1}));
      }
      torch::Tensor mine = on_rank(flat, u);
      if (opt_state) {
        opt_state->narrow(0, x.shard_offset, x.chunk).copy_(mine);
        continue;
      }
      if (master_.defined()) master_.narrow(0, x.shard_offset, x.chunk).copy_(mine);
      restored_weights(u, flat);
    }
  }
  steps_ = steps;
  zero_grad();
}

// ---------------------------------------------------------------------------------------
// The strategy

namespace {

class ZeroStrategy final : public ParallelStrategy {
 public:
  ZeroStrategy(const StrategySetup& s, const ZeroStage& stage) : ParallelStrategy(s), stage_(stage) {}

  void check(const Model* model, const Optimizer* opt) const override {
    const comm::DataType w = comm::dtype_of(opts_.precision == Precision::BF16   ? torch::kBFloat16
                                        : opts_.precision == Precision::FP16 ? torch::kHalf
                                                                              : torch::kFloat);
    using comm::Collective;
    const std::pair<Collective, comm::DataType> needs[] = {
        {Collective::Broadcast, comm::DataType::Float32}, {Collective::ReduceScatter, w},
        {Collective::AllGather, w},                       {Collective::AllGather, comm::DataType::Float32},
        {Collective::AllReduce, comm::DataType::Float64}, {Collective::AllReduce, comm::DataType::Int32}};
    for (const auto& [c, t] : needs)
      ACCEL_CHECK(comm_.supports(c, t), Status::Unsupported, "strategy ", strategy_name(opts_.strategy), " needs ",
                  comm::collective_name(c), " of ", comm::dtype_name(t), ", which the '", comm_.backend(),
                  "' communication backend lacks");
    ACCEL_CHECK(!opt || opt->shardable(), Status::Unsupported, "ZeRO cannot shard the ", opt->name(),
                " optimizer: its update is not elementwise (it needs whole-tensor norms); use DDP, or SGD or AdamW");
    ACCEL_CHECK(!model || !model->parameters().empty(), Status::InvalidArgument, "ZeRO shards parameters; the model has none");
    if (opt && model) opt->check_shardable(*model);  // what the optimizer cannot shard of this model
  }

  void prepare(Model& model) override {
    model_ = &model;
    // the working copy: 16-bit under mixed precision where the model can compute with it
    c10::ScalarType work = torch::kFloat;
    const bool sixteen = model.casts_weights() || device_.is_cuda();
    if (opts_.precision == Precision::BF16 && sixteen) work = torch::kBFloat16;
    if (opts_.precision == Precision::FP16 && sixteen) work = torch::kHalf;
    // fp16 emulated on a CPU for a model that computes in fp32: round its gradients
    if (opts_.precision == Precision::FP16 && device_.is_cpu() && work == torch::kFloat) model.set_grad_rounding(true);
    engine_ = stage_.make(comm_, clock_, model, work, opts_.bucket_bytes, opts_.offload);
  }
  bool shards_state() const override { return true; }

  Cadence cadence() const override { return stage_.cadence; }
  const char* collectives_noun() const override { return stage_.collectives_noun; }

  torch::Tensor forward(Model& model, const std::vector<torch::Tensor>& inputs, const ForwardMode& mode) override {
    return engine_->forward(model, inputs, mode);  // stage 3 gathers each unit around its use
  }

  void backward(const torch::Tensor& scaled_loss, bool sync, int64_t rows) override {
    engine_->begin_backward(sync, rows);
    try {
      scaled_loss.backward();
    } catch (...) {
      engine_->end_backward_abandoned();
      throw;
    }
    engine_->end_backward();
  }

  // as torch.cuda.amp: the reciprocal in double, applied in fp32
  bool unscale(const LossScaler& scaler) override {
    return engine_->unscale(static_cast<double>(static_cast<float>(1.0 / scaler.scale())));
  }
  double clip(double max_norm) override { return engine_->clip(max_norm); }  // the norm over every rank's shard
  void scale_gradients(double f) override { engine_->scale_gradients(f); }
  void step(Optimizer& opt) override { engine_->step(opt); }
  void zero_grad(Optimizer& /*opt*/) override { engine_->zero_grad(); }

  std::vector<torch::Tensor> full_parameters() override { return engine_->full_parameters(); }
  torch::Tensor full_gradient(size_t index) override { return engine_->full_gradient(index); }
  int zero_stage() const override { return engine_ ? stage_.number : 0; }
  std::vector<StatePiece> pieces() const override { return engine_->pieces(); }
  torch::Tensor piece_state(const std::string& kind, const StatePiece& p) override { return engine_->piece_state(kind, p); }
  torch::Tensor replicated_state(const std::string& kind, size_t param) const override {
    return engine_->replicated_state(kind, param);
  }
  void restore(const std::map<std::string, std::vector<torch::Tensor>>& full, int64_t steps, Optimizer* opt) override {
    // ZeRO keeps the optimizer's state itself
    engine_->restore(full, steps, opt);
  }
  int64_t optimizer_state_steps(const Optimizer* /*opt*/) const override { return engine_ ? engine_->steps() : 0; }

 private:
  const ZeroStage& stage_;
  std::unique_ptr<ZeroEngine> engine_;
};

}  // namespace

std::unique_ptr<ParallelStrategy> make_zero(const StrategySetup& setup, int stage) {
  ACCEL_CHECK(stage >= 1 && stage <= 3, Status::InvalidArgument, "ZeRO stage ", stage, " does not exist (1, 2 or 3)");
  return std::make_unique<ZeroStrategy>(setup, stage == 1 ? zero_stage1() : stage == 2 ? zero_stage2() : zero_stage3());
}

}  // namespace accel
