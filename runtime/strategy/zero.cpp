// ZeRO stages 1-3: see zero.h for the layout.
#include "runtime/strategy/zero.h"

#include "comm/tensors.h"
#include "runtime/optim/update.h"

#include <cmath>

namespace accel {

namespace {

// Stage 3 frees a unit's gathered weights by emptying the storage they live in, not by
// replacing the tensors: autograd saved views of them in forward (linear saves weight.t()),
// and those views must see the weights again once backward gathers them back into the
// same storage. The bytes go back to the allocator (and the simulator's budget).
void free_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void alloc_storage(const torch::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  ACCEL_CHECK(s->allocator() != nullptr, Status::Internal, "a sharded unit's storage has no allocator");
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

int64_t ceil_to(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Gradient reductions in flight at once under stages 2-3 while the next unit's gradient is
// being filled (DeepSpeed's double buffer): bounds the unsharded gradient memory to two units.
constexpr size_t kMaxInflight = 1;

}  // namespace

ZeroEngine::ZeroEngine(int stage, comm::Communicator& comm, comm::ComputeClock* clock, Model& model, c10::ScalarType work,
                       int64_t bucket_bytes)
    : stage_(stage),
      comm_(comm),
      clock_(clock),
      model_(model),
      work_(work),
      n_(comm.size()),
      r_(comm.rank()),
      model_gates_(model.gates_units()),
      device_(model.parameters().empty() ? torch::Device(torch::kCPU) : model.parameters().front().device()) {
  ACCEL_CHECK(stage >= 1 && stage <= 3, Status::InvalidArgument, "ZeRO stage ", stage, " does not exist (1, 2 or 3)");
  const auto& params = model.parameters();
  broadcast_from_rank0(comm_, model);  // rank 0's weights and buffers everywhere
  torch::NoGradGuard ng;
  for (const auto& p : params)
    ACCEL_CHECK(p.scalar_type() == torch::kFloat, Status::Unsupported, "ZeRO shards fp32 parameters; the model has a ",
                c10::toString(p.scalar_type()), " parameter");

  // units
  std::vector<std::vector<size_t>> groups;
  if (model_gates_) {
    groups = model.units();
  } else if (stage_ == 3) {
    groups = Model::units_of_all(params.size());
  } else {  // buckets in reverse order, as DDP: backward completes the last layers first
    groups = reverse_buckets(params, bucket_bytes);
  }
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

  total_ = total_chunks;
  const bool separate_master = !(work_ == torch::kFloat && stage_ <= 2);
  if (separate_master) master_ = torch::zeros({total_chunks}, on(torch::kFloat));
  if (stage_ == 3 && work_ != torch::kFloat) work_shard_ = torch::zeros({total_chunks}, on(work_));
  if (stage_ >= 2) grad_ = torch::zeros({total_chunks}, on(work_));
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    Unit& u = units_[ui];
    torch::Tensor flat = torch::zeros({u.padded}, on(torch::kFloat));
    for (size_t i = 0; i < u.params.size(); ++i)
      flat.narrow(0, u.offsets[i], params[u.params[i]].numel()).copy_(params[u.params[i]].detach().reshape({-1}));
    torch::Tensor mine = flat.narrow(0, r_ * u.chunk, u.chunk);
    if (separate_master) master_.narrow(0, u.shard_offset, u.chunk).copy_(mine);
    if (work_shard_.defined()) work_shard_.narrow(0, u.shard_offset, u.chunk).copy_(mine);
    u.full = work_ == torch::kFloat ? flat : flat.to(work_);
    flat = torch::Tensor();
    u.gathered = true;
    if (stage_ == 1) u.gbuf = torch::zeros({u.padded}, on(work_));
    for (size_t i = 0; i < u.params.size(); ++i) {
      torch::Tensor p = params[u.params[i]];
      p.set_data(u.full.narrow(0, u.offsets[i], p.numel()).view(p.sizes()));
    }
    if (stage_ == 3) release(ui);
  }
  for (size_t k = 0; k < params.size(); ++k)
    accumulators_.push_back(on_grad_accumulated(params[k], [owner = owner_, k] {
      if (ZeroEngine* e = *owner) e->accumulated(k);
    }));
}

ZeroEngine::~ZeroEngine() { *owner_ = nullptr; }

torch::Tensor ZeroEngine::master_chunk(size_t u) {
  const Unit& x = units_[u];
  if (master_.defined()) return master_.narrow(0, x.shard_offset, x.chunk);
  return x.full.narrow(0, r_ * x.chunk, x.chunk);  // fp32 working weights, stages 1-2
}

torch::Tensor ZeroEngine::source_chunk(size_t u) {
  const Unit& x = units_[u];
  if (work_shard_.defined()) return work_shard_.narrow(0, x.shard_offset, x.chunk);
  return master_chunk(u);
}

void ZeroEngine::gather(size_t u) {
  Unit& x = units_[u];
  if (x.gathered) return;
  alloc_storage(x.full, static_cast<size_t>(x.padded) * x.full.element_size());
  torch::Tensor src = source_chunk(u);
  comm::all_gather(comm_, src, x.full)->wait();
  x.gathered = true;
}

void ZeroEngine::release(size_t u) {
  Unit& x = units_[u];
  if (!x.gathered || stage_ != 3) return;
  free_storage(x.full);
  x.gathered = false;
}

void ZeroEngine::before(size_t unit) {
  if (stage_ != 3) return;
  ACCEL_CHECK(unit < units_.size(), Status::Internal, "unit ", unit, " out of range");
  gather(unit);
}

void ZeroEngine::after(size_t unit, const torch::Tensor& out) {
  if (stage_ != 3) return;
  if (out.defined() && out.requires_grad()) {
    // backward reaches this unit when the gradient of its output is known: gather again
    const_cast<torch::Tensor&>(out).register_hook([owner = owner_, unit](const torch::Tensor& g) -> torch::Tensor {
      if (ZeroEngine* e = *owner) e->gather(unit);
      return g;
    });
  }
  release(unit);
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
  if (stage_ == 1) {
    // the gradient lives in the unit's buffer: later micro-batches accumulate in place
    grad_into_slot(p, u.gbuf, u.offsets[slot]);
    if (!sync_) return;  // stage 1 reduces on the micro-batch that completes the gradients
  } else {
    if (u.launched) return;  // a parameter reached again after its unit was reduced
    if (!u.gbuf.defined()) u.gbuf = torch::zeros({u.padded}, on(work_));
    u.gbuf.narrow(0, u.offsets[slot], p.numel()).copy_(p.grad().reshape({-1}));
    const_cast<torch::Tensor&>(p).mutable_grad().reset();  // the unsharded gradient goes at once
  }
  if (!u.launched && ++u.ready == u.params.size()) launch(ui);
}

void ZeroEngine::launch(size_t ui) {
  Unit& u = units_[ui];
  charge_backward(ui);
  if (stage_ == 1) {  // in place: chunk r of the buffer receives the rank's average
    u.work = comm::reduce_scatter(comm_, u.gbuf, u.gbuf.narrow(0, r_ * u.chunk, u.chunk), comm::RedOp::Avg);
  } else {
    u.rs_out = torch::empty({u.chunk}, on(work_));
    u.work = comm::reduce_scatter(comm_, u.gbuf, u.rs_out, comm::RedOp::Avg);
  }
  u.launched = true;
  inflight_.push_back(ui);
  release(ui);  // stage 3: the unit's backward is done with its weights
  if (stage_ >= 2)
    while (inflight_.size() > kMaxInflight) complete(inflight_.front());
}

void ZeroEngine::complete(size_t ui) {
  Unit& u = units_[ui];
  if (inflight_.empty() || inflight_.front() != ui) return;
  inflight_.pop_front();
  u.work->wait();
  u.work.reset();
  if (stage_ >= 2) {
    if (grad_valid_)  // an earlier micro-batch of this step: accumulate
      grad_chunk(ui).add_(u.rs_out);
    else
      grad_chunk(ui).copy_(u.rs_out);
    u.gbuf = torch::Tensor();
    u.rs_out = torch::Tensor();
  }
}

void ZeroEngine::clear_grads() {
  for (const auto& p : model_.parameters())
    if (p.grad().defined()) const_cast<torch::Tensor&>(p).mutable_grad().reset();
}

void ZeroEngine::end_backward() {
  in_backward_ = false;
  if (stage_ == 1 && !sync_) {
    for (size_t u = 0; u < units_.size(); ++u) charge_backward(u);
    return;
  }
  const auto& params = model_.parameters();
  torch::NoGradGuard ng;
  // units whose parameters got no gradient (unused in this forward): zeros for them, so
  // every rank launches the same collectives in the same order
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    Unit& u = units_[ui];
    if (u.launched) continue;
    if (!u.gbuf.defined()) u.gbuf = torch::zeros({u.padded}, on(work_));
    if (stage_ == 1)
      for (size_t i = 0; i < u.params.size(); ++i) grad_into_slot(params[u.params[i]], u.gbuf, u.offsets[i]);
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
  while (!inflight_.empty()) {
    const size_t ui = inflight_.front();
    inflight_.pop_front();
    try {
      units_[ui].work->wait();
    } catch (const std::exception&) {  // the failure that stopped backward, most likely
    }
    units_[ui].work.reset();
  }
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    Unit& u = units_[ui];
    if (stage_ >= 2) u.gbuf = torch::Tensor();
    u.rs_out = torch::Tensor();
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

void ZeroEngine::step(const Optimizer& opt) {
  torch::NoGradGuard ng;
  const double lr = opt.lr();
  const auto& sgd = opt.sgd_config();
  const auto& adamw = opt.adamw_config();
  const int64_t total = total_;
  ++steps_;
  if (adamw && !exp_avg_.defined()) {
    exp_avg_ = torch::zeros({total}, on(torch::kFloat));
    exp_avg_sq_ = torch::zeros({total}, on(torch::kFloat));
  }
  const auto& adafactor = opt.adafactor_config();
  if (adafactor) adafactor_step(*adafactor, lr);
  std::vector<std::shared_ptr<comm::Work>> gathers;
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& x = units_[u];
    torch::Tensor p = master_chunk(u);
    if (!adafactor) {  // (Adafactor stepped every chunk above)
      torch::Tensor g = grad_chunk(u).to(torch::kFloat);  // a copy only for 16-bit gradients
      if (grad_factor_ != 1.0) g = g * grad_factor_;
      if (adamw) {
        adamw_update(*adamw, lr, steps_, p, g, exp_avg_.narrow(0, x.shard_offset, x.chunk),
                     exp_avg_sq_.narrow(0, x.shard_offset, x.chunk));
      } else {
        const bool momentum = sgd->momentum != 0;
        if (momentum && !momentum_.defined()) momentum_ = torch::zeros({total}, on(torch::kFloat));
        sgd_update(*sgd, lr, p, g, momentum ? momentum_.narrow(0, x.shard_offset, x.chunk) : torch::Tensor(),
                   steps_ == 1);
      }
    }
    if (stage_ <= 2) {
      torch::Tensor slot = x.full.narrow(0, r_ * x.chunk, x.chunk);
      if (master_.defined()) slot.copy_(p);
      gathers.push_back(
          comm::all_gather(comm_, slot, x.full));  // in place: slot is this rank's part of full
    } else if (work_shard_.defined()) {
      work_shard_.narrow(0, x.shard_offset, x.chunk).copy_(p);
    }
  }
  for (auto& w : gathers) w->wait();
}

// Adafactor on the rank's chunks (transformers' update, as Optimizer::adafactor_step): the
// sums it needs over a whole tensor (each matrix's row and column sums of g^2 + eps1, each
// parameter's sum of squares before the step and its update's) are this rank's partial
// sums, all-reduced in fp64 (two all-reduces a step); each rank then updates its elements.
void ZeroEngine::adafactor_step(const AdafactorConfig& c, double base_lr) {
  const auto& params = model_.parameters();
  const size_t np = params.size();
  const std::vector<StatePiece> mine = pieces();
  const auto f32 = on(torch::kFloat), f64 = on(torch::kDouble);
  if (af_row_.size() != np) {
    af_row_.resize(np);
    af_col_.resize(np);
    af_sq_.resize(np);
  }
  for (size_t i = 0; i < np; ++i)
    if (params[i].dim() == 2 && !af_row_[i].defined()) {
      af_row_[i] = torch::zeros({params[i].size(0)}, f32);
      af_col_[i] = torch::zeros({params[i].size(1)}, f32);
    }
  for (const auto& pc : mine)
    if (params[pc.param].dim() < 2 && !af_sq_[pc.param].defined()) af_sq_[pc.param] = torch::zeros({pc.len}, f32);
  if (c.beta1 > 0 && !exp_avg_.defined()) exp_avg_ = torch::zeros({total_}, f32);

  // 1. partial sums: rows and columns of g^2 + eps1 per matrix, then each parameter's sum of squares
  std::vector<int64_t> row_at(np, -1), col_at(np, -1);
  int64_t n = 0;
  for (size_t i = 0; i < np; ++i)
    if (params[i].dim() == 2) {
      row_at[i] = n;
      n += params[i].size(0);
      col_at[i] = n;
      n += params[i].size(1);
    }
  const int64_t wsq_at = n;
  n += static_cast<int64_t>(np);
  torch::Tensor sums = torch::zeros({n}, f64);
  // a piece's gradient (fp32, unscaled; a view when it already is)
  auto grad_of = [&](const StatePiece& pc) {
    torch::Tensor g = grad_chunk(pc.unit).narrow(0, pc.in_chunk, pc.len).to(torch::kFloat);
    return grad_factor_ != 1.0 ? g * grad_factor_ : g;
  };
  // a matrix piece (a range of its row-major elements) as at most three rectangles: the end
  // of a first row, whole rows, the start of a last row
  struct Rect {
    int64_t at, row, rows, col, cols;  // at: the offset in the piece
  };
  auto rects = [&](const StatePiece& pc) {
    const int64_t C = params[pc.param].size(1);
    std::vector<Rect> out;
    int64_t at = 0, e = pc.start;
    while (at < pc.len) {
      const int64_t row = e / C, col = e % C, left = pc.len - at;
      Rect r{at, row, 1, col, std::min(C - col, left)};
      if (col == 0 && left >= C) r = Rect{at, row, left / C, 0, C};
      out.push_back(r);
      at += r.rows * r.cols;
      e += r.rows * r.cols;
    }
    return out;
  };
  for (const StatePiece& pc : mine) {
    const torch::Tensor w = master_chunk(pc.unit).narrow(0, pc.in_chunk, pc.len);
    sums.narrow(0, wsq_at + static_cast<int64_t>(pc.param), 1).add_(w.pow(2).sum(torch::kDouble));
    if (row_at[pc.param] >= 0) {
      const torch::Tensor g = grad_of(pc);
      for (const Rect& r : rects(pc)) {
        auto sq = g.narrow(0, r.at, r.rows * r.cols).view({r.rows, r.cols}).pow(2).add_(c.eps1);
        sums.narrow(0, row_at[pc.param] + r.row, r.rows).add_(sq.sum(1, false, torch::kDouble));
        sums.narrow(0, col_at[pc.param] + r.col, r.cols).add_(sq.sum(0, false, torch::kDouble));
      }
    }
  }
  comm::all_reduce(comm_, sums, comm::RedOp::Sum)->wait();
  const torch::Tensor sums_host = sums.narrow(0, wsq_at, static_cast<int64_t>(np)).cpu();
  const double* wsq = sums_host.data_ptr<double>();

  // 2. the step sizes and the factors (the same on every rank)
  const double step = static_cast<double>(steps_);
  double rel = base_lr;
  if (c.relative_step) rel = std::min(c.warmup_init ? 1e-6 * step : 1e-2, 1.0 / std::sqrt(step));
  const double beta2t = 1.0 - std::pow(step, c.decay_rate);
  std::vector<double> lr(np);
  for (size_t i = 0; i < np; ++i) {
    const double numel = static_cast<double>(params[i].numel());
    const double rms_w = std::sqrt(wsq[i] / numel);
    lr[i] = (c.scale_parameter ? std::max(c.eps2, rms_w) : 1.0) * rel;
    if (row_at[i] < 0) continue;
    const int64_t R = params[i].size(0), C = params[i].size(1);
    af_row_[i].mul_(beta2t).add_((sums.narrow(0, row_at[i], R) / static_cast<double>(C)).to(torch::kFloat), 1.0 - beta2t);
    af_col_[i].mul_(beta2t).add_((sums.narrow(0, col_at[i], C) / static_cast<double>(R)).to(torch::kFloat), 1.0 - beta2t);
  }

  // 3. this rank's elements of each update, and their sums of squares for its RMS
  std::vector<torch::Tensor> upd(mine.size());
  torch::Tensor usq = torch::zeros({static_cast<int64_t>(np)}, f64);
  std::vector<torch::Tensor> rfac(np), cfac(np);
  for (size_t k = 0; k < mine.size(); ++k) {
    const size_t i = mine[k].param;
    const torch::Tensor g = grad_of(mine[k]);
    if (row_at[i] >= 0) {
      if (!rfac[i].defined()) {
        rfac[i] = (af_row_[i] / af_row_[i].mean(-1, /*keepdim=*/true)).rsqrt_();
        cfac[i] = af_col_[i].rsqrt();
      }
      upd[k] = torch::empty({mine[k].len}, f32);
      for (const Rect& r : rects(mine[k]))
        upd[k]
            .narrow(0, r.at, r.rows * r.cols)
            .view({r.rows, r.cols})
            .copy_(rfac[i].narrow(0, r.row, r.rows).unsqueeze(1) * cfac[i].narrow(0, r.col, r.cols).unsqueeze(0))
            .mul_(g.narrow(0, r.at, r.rows * r.cols).view({r.rows, r.cols}));
    } else {
      af_sq_[i].mul_(beta2t).add_(g * g + c.eps1, 1.0 - beta2t);
      upd[k] = af_sq_[i].rsqrt().mul_(g);
    }
    usq.narrow(0, static_cast<int64_t>(i), 1).add_(upd[k].pow(2).sum(torch::kDouble));
  }
  comm::all_reduce(comm_, usq, comm::RedOp::Sum)->wait();
  const torch::Tensor usq_host = usq.cpu();
  const double* usq_of = usq_host.data_ptr<double>();

  // 4. clip by the update's RMS, the step size, beta1, weight decay, the update
  for (size_t k = 0; k < mine.size(); ++k) {
    const StatePiece& pc = mine[k];
    const size_t i = pc.param;
    const double rms_u = std::sqrt(usq_of[i] / static_cast<double>(params[i].numel()));
    torch::Tensor u = upd[k];
    u.div_(std::max(rms_u / c.clip_threshold, 1.0));
    u.mul_(lr[i]);
    if (c.beta1 > 0) {
      torch::Tensor ea = exp_avg_.narrow(0, units_[pc.unit].shard_offset + pc.in_chunk, pc.len);
      ea.mul_(c.beta1).add_(u, 1.0 - c.beta1);
      u = ea;
    }
    torch::Tensor w = master_chunk(pc.unit).narrow(0, pc.in_chunk, pc.len);
    if (c.weight_decay != 0) w.add_(w, -c.weight_decay * lr[i]);
    w.add_(-u);
    upd[k] = torch::Tensor();
  }
}

void ZeroEngine::zero_grad() {
  grad_valid_ = false;  // the next micro-batch overwrites the sharded gradient
  grad_factor_ = 1.0;
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
  } else if (kind == "exp_avg_sq_row" || kind == "exp_avg_sq_col") {
    return {};  // whole on every rank: replicated_state
  } else if (kind == "exp_avg_sq" && !af_sq_.empty()) {  // Adafactor: a vector's piece
    const torch::Tensor& t = af_sq_.at(p.param);
    return t.defined() ? t : torch::Tensor();
  } else {
    const torch::Tensor& all = kind == "exp_avg" ? exp_avg_ : kind == "exp_avg_sq" ? exp_avg_sq_ : momentum_;
    if (!all.defined()) return {};
    chunk = all.narrow(0, x.shard_offset, x.chunk);
  }
  return chunk.narrow(0, p.in_chunk, p.len);
}

torch::Tensor ZeroEngine::replicated_state(const std::string& kind, size_t param) const {
  const std::vector<torch::Tensor>* v = kind == "exp_avg_sq_row" ? &af_row_ : kind == "exp_avg_sq_col" ? &af_col_ : nullptr;
  if (!v || param >= v->size()) return {};
  return (*v)[param];
}

void ZeroEngine::restore(const std::map<std::string, std::vector<torch::Tensor>>& full, int64_t steps, bool adafactor) {
  torch::NoGradGuard ng;
  const auto& params = model_.parameters();
  const size_t np = params.size();
  if (adafactor) {  // Adafactor's per-parameter state: the factors whole, a vector's second moment as this rank's piece
    af_row_.assign(np, torch::Tensor());
    af_col_.assign(np, torch::Tensor());
    af_sq_.assign(np, torch::Tensor());
  }
  for (const auto& [kind, tensors] : full) {
    ACCEL_CHECK(tensors.size() == params.size(), Status::Internal, "restore: ", tensors.size(), " tensors for ",
                params.size(), " parameters");
    bool any = false;
    for (const auto& t : tensors) any = any || t.defined();
    if (!any) continue;
    if (adafactor && (kind == "exp_avg_sq_row" || kind == "exp_avg_sq_col" || kind == "exp_avg_sq")) {
      auto& dst = kind == "exp_avg_sq_row" ? af_row_ : kind == "exp_avg_sq_col" ? af_col_ : af_sq_;
      if (kind != "exp_avg_sq") {
        for (size_t i = 0; i < np; ++i)
          if (tensors[i].defined()) dst[i] = tensors[i].to(device_, torch::kFloat).clone();
      } else {
        for (const auto& pc : pieces())
          if (tensors[pc.param].defined())
            dst[pc.param] = tensors[pc.param].reshape({-1}).narrow(0, pc.start, pc.len).to(device_, torch::kFloat).clone();
      }
      continue;
    }
    torch::Tensor* opt_state = kind == "exp_avg" ? &exp_avg_ : kind == "exp_avg_sq" ? &exp_avg_sq_
                               : kind == "momentum_buffer" ? &momentum_ : nullptr;
    ACCEL_CHECK(kind == "weight" || opt_state != nullptr, Status::Internal, "restore: unknown state '", kind, "'");
    if (opt_state && !opt_state->defined()) *opt_state = torch::zeros({total_}, on(torch::kFloat));
    for (size_t u = 0; u < units_.size(); ++u) {
      Unit& x = units_[u];
      torch::Tensor flat = torch::zeros({x.padded}, on(torch::kFloat));
      for (size_t i = 0; i < x.params.size(); ++i) {
        const torch::Tensor& t = tensors[x.params[i]];
        if (t.defined()) flat.narrow(0, x.offsets[i], params[x.params[i]].numel()).copy_(t.reshape({-1}));
      }
      torch::Tensor mine = flat.narrow(0, r_ * x.chunk, x.chunk);
      if (opt_state) {
        opt_state->narrow(0, x.shard_offset, x.chunk).copy_(mine);
        continue;
      }
      if (master_.defined()) master_.narrow(0, x.shard_offset, x.chunk).copy_(mine);
      if (work_shard_.defined()) work_shard_.narrow(0, x.shard_offset, x.chunk).copy_(mine);
      if (stage_ <= 2) x.full.copy_(flat);  // the replicated working weights (fp32: also the master)
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
  ZeroStrategy(const StrategySetup& s, int stage) : ParallelStrategy(s), stage_(stage) {}

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
    if (opt && opt->adafactor_config() && model)
      for (size_t i = 0; i < model->parameters().size(); ++i)
        ACCEL_CHECK(model->parameters()[i].dim() <= 2, Status::Unsupported, "ZeRO shards Adafactor for parameters of 1 or 2 ",
                    "dimensions; '", model->parameter_names()[i], "' has ", model->parameters()[i].dim());
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
    engine_ = std::make_unique<ZeroEngine>(stage_, comm_, clock_, model, work, opts_.bucket_bytes);
  }
  bool shards_state() const override { return true; }

  Cadence cadence() const override {
    return stage_ == 1 ? Cadence::OnSync : stage_ == 2 ? Cadence::EveryMicroBatch : Cadence::EveryForward;
  }
  const char* collectives_noun() const override {
    return stage_ == 1 ? "gradient synchronisations"
           : stage_ == 2 ? "gradient reduce-scatters"
                         : "weight gathers and gradient reduce-scatters";
  }

  torch::Tensor forward(Model& model, const std::vector<torch::Tensor>& inputs, const ForwardMode& mode) override {
    if (stage_ != 3) return model.forward(inputs, mode);
    if (engine_->gates_units()) {  // the model gathers unit by unit
      ForwardMode gated = mode;
      gated.gate = engine_.get();
      return model.forward(inputs, gated);
    }
    engine_->before(0);
    torch::Tensor out = model.forward(inputs, mode);
    engine_->after(0, out);
    return out;
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
  void zero_grad(Optimizer& opt) override {
    (void)opt;
    engine_->zero_grad();
  }

  std::vector<torch::Tensor> full_parameters() override { return engine_->full_parameters(); }
  int zero_stage() const override { return engine_ ? stage_ : 0; }
  std::vector<StatePiece> pieces() const override { return engine_->pieces(); }
  torch::Tensor piece_state(const std::string& kind, const StatePiece& p) override { return engine_->piece_state(kind, p); }
  torch::Tensor replicated_state(const std::string& kind, size_t param) const override {
    return engine_->replicated_state(kind, param);
  }
  void restore(const std::map<std::string, std::vector<torch::Tensor>>& full, int64_t steps, Optimizer* opt) override {
    // ZeRO keeps the optimizer's state itself
    engine_->restore(full, steps, opt && opt->adafactor_config().has_value());
  }
  int64_t optimizer_state_steps(const Optimizer* opt) const override {
    (void)opt;
    return engine_ ? engine_->steps() : 0;
  }

 private:
  int stage_;
  std::unique_ptr<ZeroEngine> engine_;
};

}  // namespace

std::unique_ptr<ParallelStrategy> make_zero(const StrategySetup& setup, int stage) {
  return std::make_unique<ZeroStrategy>(setup, stage);
}

}  // namespace accel
