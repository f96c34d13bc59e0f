// The Accelerator (placement, precision, accumulation, loss scaling), optimizers,
// schedulers and the data loader.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/blas.h"
#include "runtime/compat.h"
#include "runtime/domain.h"
#include "runtime/paths.h"
#include "runtime/runtime.h"
#include "runtime/zero.h"

namespace accel {

void validate(const Options& o) {
  ACCEL_CHECK(o.precision == Precision::No || o.precision == Precision::BF16 || o.precision == Precision::FP16,
              Status::InvalidArgument, "mixed_precision must be 0 (no), 1 (bf16) or 2 (fp16), got ",
              static_cast<int>(o.precision));
  domain::at_least("gradient_accumulation_steps", o.gradient_accumulation_steps, 1);
  ACCEL_CHECK(o.device == DeviceKind::Auto || o.device == DeviceKind::CPU || o.device == DeviceKind::CUDA,
              Status::InvalidArgument, "device must be 0 (auto), 1 (cpu) or 2 (cuda), got ", static_cast<int>(o.device));
  domain::at_least("device_index", o.device_index, 0);
  domain::positive("loss_scale_init", o.loss_scale_init);
  domain::above("loss_scale_growth_factor", o.loss_scale_growth_factor, 1);
  domain::open("loss_scale_backoff_factor", o.loss_scale_backoff_factor, 0, 1);
  domain::at_least("loss_scale_growth_interval", o.loss_scale_growth_interval, 1);
  domain::within("num_threads", o.num_threads, 0, 4096);
  ACCEL_CHECK(static_cast<int>(o.strategy) >= 0 && static_cast<int>(o.strategy) <= 4, Status::InvalidArgument,
              "strategy must be in [0, 4] (0 no, 1 DDP, 2-4 ZeRO stages 1-3), got ", static_cast<int>(o.strategy));
  domain::at_least("bucket_bytes", o.bucket_bytes, 1);
}

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::None: return "no";
    case Strategy::DDP: return "ddp";
    case Strategy::Zero1: return "zero1";
    case Strategy::Zero2: return "zero2";
    case Strategy::Zero3: return "zero3";
  }
  return "unknown";
}

std::optional<Strategy> parse_strategy(const std::string& name) {
  std::string v;
  for (char c : name) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "no" || v == "none" || v.empty()) return Strategy::None;
  if (v == "ddp" || v == "multi_gpu") return Strategy::DDP;
  if (v == "zero1" || v == "zero-1" || v == "zero_1") return Strategy::Zero1;
  if (v == "zero2" || v == "zero-2" || v == "zero_2" || v == "shard_grad_op") return Strategy::Zero2;
  if (v == "zero3" || v == "zero-3" || v == "zero_3" || v == "full_shard") return Strategy::Zero3;
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------
// Optimizers

void validate(const SGDConfig& c) {
  domain::positive("lr", c.lr);
  domain::non_negative("momentum", c.momentum);
  domain::closed("dampening", c.dampening, 0, 1);
  domain::non_negative("weight_decay", c.weight_decay);
  ACCEL_CHECK(!c.nesterov || (c.momentum > 0 && c.dampening == 0), Status::InvalidArgument,
              "nesterov needs momentum > 0 and dampening 0, got momentum ", c.momentum, " and dampening ", c.dampening);
}

// AdamW and LAMB share their hyper-parameters' domains.
template <class C>
void validate_adam_like(const C& c) {
  domain::positive("lr", c.lr);
  domain::half_open("beta1", c.beta1, 0, 1);
  domain::half_open("beta2", c.beta2, 0, 1);
  domain::positive("eps", c.eps);
  domain::non_negative("weight_decay", c.weight_decay);
}
void validate(const AdamWConfig& c) { validate_adam_like(c); }
void validate(const LAMBConfig& c) { validate_adam_like(c); }

Optimizer::Optimizer(std::shared_ptr<Model> model, LAMBConfig cfg)
    : model_(std::move(model)), lamb_(cfg), base_lr_(cfg.lr), lr_(cfg.lr) {
  validate(cfg);
}

Optimizer::Optimizer(std::shared_ptr<Model> model, SGDConfig cfg)
    : model_(std::move(model)), sgd_(cfg), base_lr_(cfg.lr), lr_(cfg.lr) {
  validate(cfg);
}

Optimizer::Optimizer(std::shared_ptr<Model> model, AdamWConfig cfg)
    : model_(std::move(model)), adamw_(cfg), base_lr_(cfg.lr), lr_(cfg.lr) {
  validate(cfg);
}

void Optimizer::set_lr(double lr) {
  lr_ = lr;
  if (!impl_) return;
  for (auto& group : impl_->param_groups()) group.options().set_lr(lr);
}

void Optimizer::bind() {
  const auto& params = model_->parameters();
  bound_ = true;
  if (lamb_) {
    lamb_state_.assign(params.size(), LambState{});
    return;
  }
  if (sgd_) {
    const auto& c = *sgd_;
    impl_ = std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(lr_).momentum(c.momentum).dampening(c.dampening).weight_decay(c.weight_decay).nesterov(
                    c.nesterov));
  } else {
    const auto& c = *adamw_;
    impl_ = std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(lr_).betas(std::make_tuple(c.beta1, c.beta2)).eps(c.eps).weight_decay(
                    c.weight_decay));
  }
}

void Optimizer::step() {
  ACCEL_CHECK(bound_, Status::InvalidState, "the optimizer is not prepared");
  if (lamb_)
    lamb_step();
  else
    impl_->step();
}

namespace {
// libtorch keys its optimizer state by the parameter's TensorImpl: as a string before 2.0,
// as the pointer since.
template <class Map>
auto state_key(const torch::Tensor& p) {
  using Key = typename std::decay_t<Map>::key_type;
  if constexpr (std::is_same_v<Key, std::string>)
    return compat::pointer_text(p.unsafeGetTensorImpl());
  else
    return static_cast<Key>(p.unsafeGetTensorImpl());
}
}  // namespace

std::vector<std::string> Optimizer::state_kinds() const {
  if (adamw_) return {"exp_avg", "exp_avg_sq"};
  if (lamb_) return {"m", "v"};
  if (sgd_->momentum != 0) return {"momentum_buffer"};
  return {};
}

std::vector<torch::Tensor> Optimizer::state(const std::string& kind) const {
  const auto& params = model_->parameters();
  std::vector<torch::Tensor> out(params.size());
  if (!bound_) return out;
  for (size_t i = 0; i < params.size(); ++i) {
    if (lamb_) {
      const LambState& st = lamb_state_[i];
      out[i] = kind == "m" ? st.m : st.v;
      continue;
    }
    auto& map = impl_->state();
    auto it = map.find(state_key<decltype(map)>(params[i]));
    if (it == map.end()) continue;
    if (adamw_) {
      auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
      out[i] = kind == "exp_avg" ? st.exp_avg() : st.exp_avg_sq();
    } else {
      out[i] = static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
    }
  }
  return out;
}

int64_t Optimizer::state_steps() const {
  if (lamb_) return lamb_steps_;
  if (!adamw_ || !bound_) return 0;
  for (const auto& p : model_->parameters()) {
    auto& map = impl_->state();
    auto it = map.find(state_key<decltype(map)>(p));
    if (it != map.end()) return static_cast<torch::optim::AdamWParamState&>(*it->second).step();
  }
  return 0;
}

void Optimizer::restore(const std::map<std::string, std::vector<torch::Tensor>>& state, int64_t steps) {
  ACCEL_CHECK(bound_, Status::InvalidState, "restore of an optimizer that is not prepared");
  const auto& params = model_->parameters();
  auto get = [&](const std::string& kind, size_t i) -> torch::Tensor {
    auto it = state.find(kind);
    if (it == state.end() || i >= it->second.size() || !it->second[i].defined()) return {};
    return it->second[i].to(params[i].device(), torch::kFloat).reshape(params[i].sizes()).clone();
  };
  if (lamb_) {
    lamb_steps_ = steps;
    for (size_t i = 0; i < params.size(); ++i) lamb_state_[i] = LambState{get("m", i), get("v", i)};
    return;
  }
  // into the existing state where there is one (no new memory), else fresh copies
  auto& map = impl_->state();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto key = state_key<decltype(map)>(params[i]);
    auto it = map.find(key);
    auto into = [&](torch::Tensor cur, const std::string& kind) {
      auto src = state.find(kind);
      torch::Tensor t = src == state.end() || i >= src->second.size() ? torch::Tensor() : src->second[i];
      if (!t.defined()) return torch::Tensor();
      if (cur.defined() && cur.sizes() == params[i].sizes()) {
        cur.copy_(t.reshape(params[i].sizes()));
        return cur;
      }
      return t.to(params[i].device(), torch::kFloat).reshape(params[i].sizes()).clone();
    };
    if (adamw_) {
      auto* cur = it == map.end() ? nullptr : static_cast<torch::optim::AdamWParamState*>(it->second.get());
      torch::Tensor m = into(cur ? cur->exp_avg() : torch::Tensor(), "exp_avg");
      torch::Tensor v = into(cur ? cur->exp_avg_sq() : torch::Tensor(), "exp_avg_sq");
      if (!m.defined() || !v.defined()) {
        if (it != map.end()) map.erase(it);
        continue;
      }
      auto st = std::make_unique<torch::optim::AdamWParamState>();
      st->step(steps);
      st->exp_avg(m);
      st->exp_avg_sq(v);
      map[key] = std::move(st);
    } else {
      auto* cur = it == map.end() ? nullptr : static_cast<torch::optim::SGDParamState*>(it->second.get());
      torch::Tensor b = into(cur ? cur->momentum_buffer() : torch::Tensor(), "momentum_buffer");
      if (!b.defined()) {
        if (it != map.end()) map.erase(it);
        continue;
      }
      auto st = std::make_unique<torch::optim::SGDParamState>();
      st->momentum_buffer(b);
      map[key] = std::move(st);
    }
  }
}

void Optimizer::lamb_step() {
  const LAMBConfig& c = *lamb_;
  torch::NoGradGuard ng;
  ++lamb_steps_;
  const double bc1 = 1 - std::pow(c.beta1, static_cast<double>(lamb_steps_));
  const double bc2 = 1 - std::pow(c.beta2, static_cast<double>(lamb_steps_));
  const auto& params = model_->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor& p = params[i];
    if (!p.grad().defined()) continue;
    torch::Tensor g = p.grad().to(torch::kFloat);
    LambState& st = lamb_state_[i];
    if (!st.m.defined()) {
      st.m = torch::zeros_like(p, torch::kFloat);
      st.v = torch::zeros_like(p, torch::kFloat);
    }
    st.m.mul_(c.beta1).add_(g, 1 - c.beta1);
    st.v.mul_(c.beta2).addcmul_(g, g, 1 - c.beta2);
    torch::Tensor update = (st.m / bc1) / ((st.v / bc2).sqrt() + c.eps);
    torch::Tensor w = p.detach().to(torch::kFloat);
    if (c.weight_decay != 0) update.add_(w, c.weight_decay);
    // the trust ratio needs the whole tensor's norms: why ZeRO cannot shard LAMB
    const double wn = w.norm().item<double>(), un = update.norm().item<double>();
    const double trust = wn > 0 && un > 0 ? wn / un : 1.0;
    p.detach().add_(update.to(p.scalar_type()), -lr_ * trust);
  }
}

void Optimizer::zero_grad() {
  for (const auto& p : model_->parameters()) {
    if (p.grad().defined()) p.mutable_grad().reset();
  }
}

// ---------------------------------------------------------------------------------------
// Schedulers

void validate(const SchedulerConfig& c) {
  ACCEL_CHECK(c.kind == Schedule::Constant || c.kind == Schedule::Linear || c.kind == Schedule::Cosine,
              Status::InvalidArgument, "kind must be 0 (constant), 1 (linear) or 2 (cosine), got ", static_cast<int>(c.kind));
  domain::at_least("warmup_steps", c.warmup_steps, 0);
  ACCEL_CHECK(c.kind == Schedule::Constant || c.total_steps > c.warmup_steps, Status::InvalidArgument,
              "total_steps (", c.total_steps, ") must exceed warmup_steps (", c.warmup_steps,
              ") for a decaying schedule");
  domain::closed("min_lr_ratio", c.min_lr_ratio, 0, 1);
}

double schedule_factor(const SchedulerConfig& c, int64_t step) {
  if (step < c.warmup_steps) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, c.warmup_steps));
  if (c.kind == Schedule::Constant) return 1.0;
  double progress = static_cast<double>(step - c.warmup_steps) / static_cast<double>(std::max<int64_t>(1, c.total_steps - c.warmup_steps));
  progress = std::min(progress, 1.0);
  double decay = c.kind == Schedule::Linear ? 1.0 - progress : 0.5 * (1.0 + std::cos(M_PI * progress));
  return c.min_lr_ratio + (1.0 - c.min_lr_ratio) * decay;
}

Scheduler::Scheduler(std::shared_ptr<Optimizer> opt, SchedulerConfig cfg) : opt_(std::move(opt)), cfg_(cfg) {
  validate(cfg_);
  opt_->set_lr(opt_->base_lr() * schedule_factor(cfg_, 0));
}

void Scheduler::restore(int64_t steps) {
  ACCEL_CHECK(steps >= 0, Status::InvalidArgument, "scheduler steps must be >= 0");
  steps_ = steps;
  opt_->set_lr(opt_->base_lr() * schedule_factor(cfg_, steps_));
}

void Scheduler::step() {
  ++steps_;
  opt_->set_lr(opt_->base_lr() * schedule_factor(cfg_, steps_));
}

// ---------------------------------------------------------------------------------------
// Data

std::vector<PlannedBatch> shard_batches(const std::vector<int64_t>& order, int64_t b, bool drop_last, int rank,
                                        int world, bool split_batches, bool even_batches) {
  using Idx = std::vector<int64_t>;
  std::vector<Idx> batches;
  const int64_t n = static_cast<int64_t>(order.size());
  for (int64_t s = 0; s < n; s += b) {
    if (drop_last && s + b > n) break;
    batches.emplace_back(order.begin() + s, order.begin() + std::min(n, s + b));
  }
  std::vector<PlannedBatch> plan;
  auto full = [](Idx v) {
    PlannedBatch p;
    p.valid = static_cast<int64_t>(v.size());
    p.indices = std::move(v);
    return p;
  };
  if (world <= 1) {
    for (auto& batch : batches) plan.push_back(full(std::move(batch)));
    return plan;
  }
  const int64_t P = world, nb = static_cast<int64_t>(batches.size());
  if (nb == 0) return plan;
  if (split_batches) {
    // every batch is cut into P slices of b/P; rank r takes slice r
    const int64_t bl = b / P;
    auto slice = [&](const Idx& v) {
      Idx out;
      for (int64_t i = bl * rank; i < std::min<int64_t>(bl * (rank + 1), static_cast<int64_t>(v.size())); ++i)
        out.push_back(v[static_cast<size_t>(i)]);
      return out;
    };
    for (const auto& batch : batches)
      if (static_cast<int64_t>(batch.size()) == b) plan.push_back(full(slice(batch)));
    const Idx& last = batches.back();
    if (!drop_last && static_cast<int64_t>(last.size()) < b) {
      if (!even_batches) {
        if (static_cast<int64_t>(last.size()) > bl * rank) plan.push_back(full(slice(last)));
      } else {
        Idx initial = batches.front();
        while (static_cast<int64_t>(initial.size()) < b) initial.insert(initial.end(), initial.begin(), initial.end());
        Idx padded = last;
        padded.insert(padded.end(), initial.begin(), initial.end());
        PlannedBatch p;
        p.indices = slice(padded);
        p.valid = std::clamp<int64_t>(static_cast<int64_t>(last.size()) - bl * rank, 0, bl);
        plan.push_back(std::move(p));
      }
    }
    return plan;
  }
  // batch i goes to process i % P, yielded only once the whole round is complete
  Idx initial, to_yield;
  for (int64_t idx = 0; idx < nb; ++idx) {
    const Idx& batch = batches[static_cast<size_t>(idx)];
    if (!drop_last && idx < P) initial.insert(initial.end(), batch.begin(), batch.end());
    if (idx % P == rank) to_yield = batch;
    if (idx % P == P - 1 && static_cast<int64_t>(batch.size()) == b) {
      plan.push_back(full(to_yield));
      to_yield.clear();
    }
  }
  if (drop_last || initial.empty()) return plan;
  if (!even_batches) {
    if (!to_yield.empty()) plan.push_back(full(to_yield));
    return plan;
  }
  if (static_cast<int64_t>(to_yield.size()) == b) plan.push_back(full(to_yield));
  while (static_cast<int64_t>(initial.size()) < P * b) initial.insert(initial.end(), initial.begin(), initial.end());
  int64_t idx = nb - 1;
  Idx batch = batches.back();
  if (static_cast<int64_t>(batch.size()) == b) {
    batch.clear();
    ++idx;
  }
  // complete the last round from the start of the data, so every process gets a full batch
  size_t cycle = 0;
  while (idx % P != 0 || !batch.empty()) {
    const int64_t valid = static_cast<int64_t>(batch.size());
    const size_t need = static_cast<size_t>(b) - batch.size();
    batch.insert(batch.end(), initial.begin() + static_cast<std::ptrdiff_t>(cycle),
                 initial.begin() + static_cast<std::ptrdiff_t>(cycle + need));
    if (idx % P == rank) {
      PlannedBatch p;
      p.indices = batch;
      p.valid = valid;
      plan.push_back(std::move(p));
    }
    cycle += need;
    batch.clear();
    ++idx;
  }
  return plan;
}

DataLoader::DataLoader(torch::Tensor inputs, torch::Tensor targets, DataLoaderConfig cfg) : cfg_(cfg) {
  ACCEL_CHECK(inputs.defined() && inputs.dim() >= 1 && inputs.size(0) >= 1, Status::InvalidArgument,
              "the loader's inputs need at least one sample along dimension 0, got ",
              inputs.defined() ? shape_str(inputs) : std::string("no tensor"));
  ACCEL_CHECK(!targets.defined() || (targets.dim() >= 1 && targets.size(0) == inputs.size(0)), Status::InvalidArgument,
              "inputs ", shape_str(inputs), " and targets ", targets.defined() ? shape_str(targets) : "", " differ in the number of samples");
  ACCEL_CHECK(cfg.batch_size >= 1, Status::InvalidArgument, "batch_size must be >= 1, got ", cfg.batch_size);
  inputs_ = inputs.to(torch::kCPU).contiguous();
  if (targets.defined()) targets_ = targets.to(torch::kCPU).contiguous();
  ACCEL_CHECK(!cfg.drop_last || inputs_.size(0) >= cfg.batch_size, Status::InvalidArgument, "with drop_last, ",
              inputs.size(0), " samples make no full batch of ", cfg.batch_size);
}

void DataLoader::shard(int rank, int world) {
  ACCEL_CHECK(world >= 1 && rank >= 0 && rank < world, Status::InvalidArgument, "bad shard ", rank, " of ", world);
  ACCEL_CHECK(!cfg_.split_batches || cfg_.batch_size % world == 0, Status::InvalidArgument, "split_batches needs a batch size (",
              cfg_.batch_size, ") divisible by the number of processes (", world, ")");
  rank_ = rank;
  world_ = world;
  plan_epoch_ = -1;
  per_process_.clear();
}

const std::vector<int64_t>& DataLoader::batches_per_process() {
  if (per_process_.empty()) {
    std::vector<int64_t> order(static_cast<size_t>(inputs_.size(0)));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    for (int r = 0; r < world_; ++r)
      per_process_.push_back(static_cast<int64_t>(
          shard_batches(order, cfg_.batch_size, cfg_.drop_last, r, world_, cfg_.split_batches, cfg_.even_batches).size()));
  }
  return per_process_;
}

const std::vector<PlannedBatch>& DataLoader::plan() {
  if (plan_epoch_ != epoch_) {
    const int64_t n = inputs_.size(0);
    std::vector<int64_t> order(static_cast<size_t>(n));
    if (cfg_.shuffle) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(cfg_.seed + static_cast<uint64_t>(epoch_));
      auto perm = torch::randperm(n, gen, torch::kLong);
      std::memcpy(order.data(), perm.data_ptr<int64_t>(), order.size() * sizeof(int64_t));
    } else {
      for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    }
    plan_ = shard_batches(order, cfg_.batch_size, cfg_.drop_last, rank_, world_, cfg_.split_batches, cfg_.even_batches);
    plan_epoch_ = epoch_;
  }
  return plan_;
}

int64_t DataLoader::num_batches() { return static_cast<int64_t>(plan().size()); }

void DataLoader::set_epoch(int64_t epoch) {
  ACCEL_CHECK(epoch >= 0, Status::InvalidArgument, "epoch must be >= 0, got ", epoch);
  epoch_ = epoch;
  position_ = 0;
}

void DataLoader::restore(int64_t epoch, int64_t position) {
  ACCEL_CHECK(epoch >= 0 && position >= 0, Status::InvalidArgument, "bad data position: epoch ", epoch, ", batch ", position);
  epoch_ = epoch;
  position_ = std::min<int64_t>(position, static_cast<int64_t>(plan().size()));
}

std::optional<Batch> DataLoader::next(const torch::Device& device) {
  const auto& p = plan();
  if (position_ >= static_cast<int64_t>(p.size())) {
    ++epoch_;
    position_ = 0;
    return std::nullopt;
  }
  const PlannedBatch& pb = p[static_cast<size_t>(position_)];
  const int64_t len = static_cast<int64_t>(pb.indices.size());
  Batch b;
  b.valid = pb.valid;
  const bool contiguous = len > 0 && pb.indices.back() - pb.indices.front() == len - 1 &&
                          std::is_sorted(pb.indices.begin(), pb.indices.end());
  if (contiguous) {
    b.inputs = inputs_.narrow(0, pb.indices.front(), len);
    if (targets_.defined()) b.targets = targets_.narrow(0, pb.indices.front(), len);
  } else {
    auto idx = torch::from_blob(const_cast<int64_t*>(pb.indices.data()), {len}, torch::kLong);
    b.inputs = inputs_.index_select(0, idx);
    if (targets_.defined()) b.targets = targets_.index_select(0, idx);
  }
  if (!device.is_cpu()) {
    b.inputs = b.inputs.to(device);
    if (b.targets.defined()) b.targets = b.targets.to(device);
  }
  ++position_;
  b.last = position_ == static_cast<int64_t>(p.size());
  return b;
}

// ---------------------------------------------------------------------------------------
// Loss scaling

bool LossScaler::unscale(const std::vector<torch::Tensor>& params) const {
  if (!enabled_) return false;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return false;
  // As torch.cuda.amp: the reciprocal is taken in double and applied in fp32.
  const double inv = static_cast<double>(static_cast<float>(1.0 / scale_));
  if (grads.front().is_cuda()) {
    auto found = torch::zeros({1}, grads.front().options().dtype(torch::kFloat));
    auto inv_t = torch::full({1}, inv, grads.front().options().dtype(torch::kFloat));
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found, inv_t);
    return found.item<float>() != 0.0f;
  }
  torch::Tensor finite = torch::ones({}, torch::kBool);
  for (auto& g : grads) {
    g.mul_(inv);
    finite = finite.logical_and(torch::isfinite(g).all());
  }
  return !finite.item<bool>();
}

void LossScaler::update(bool found_inf) {
  if (!enabled_) return;
  if (found_inf) {
    scale_ *= backoff_;
    tracker_ = 0;
    return;
  }
  if (++tracker_ >= interval_) {
    double grown = scale_ * growth_;
    if (std::isfinite(grown) && grown <= static_cast<double>(std::numeric_limits<float>::max())) scale_ = grown;
    tracker_ = 0;
  }
}

// ---------------------------------------------------------------------------------------
// The Accelerator

namespace {
torch::Device pick_device(const Options& o) {
  const bool cuda = torch::cuda::is_available();
  switch (o.device) {
    case DeviceKind::CPU: return torch::Device(torch::kCPU);
    case DeviceKind::CUDA:
      ACCEL_CHECK(cuda, Status::Unsupported,
                  "device CUDA was requested but CUDA is not available (this libtorch has no CUDA, or no GPU is visible)");
      ACCEL_CHECK(o.device_index < static_cast<int>(torch::cuda::device_count()), Status::InvalidArgument,
                  "device_index ", o.device_index, " but only ", torch::cuda::device_count(), " CUDA devices are visible");
      return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(o.device_index));
    case DeviceKind::Auto:
    default:
      return cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(o.device_index)) : torch::Device(torch::kCPU);
  }
}
}  // namespace

comm::DataType comm_dtype(c10::ScalarType t) {
  switch (t) {
    case torch::kChar: return comm::DataType::Int8;
    case torch::kByte: return comm::DataType::Uint8;
    case torch::kInt: return comm::DataType::Int32;
    case torch::kLong: return comm::DataType::Int64;
    case torch::kHalf: return comm::DataType::Float16;
    case torch::kBFloat16: return comm::DataType::BFloat16;
    case torch::kFloat: return comm::DataType::Float32;
    case torch::kDouble: return comm::DataType::Float64;
    default: fail(Status::Unsupported, "tensors of ", c10::toString(t), " cannot be communicated");
  }
}

Accelerator::Accelerator(const Options& opts, std::shared_ptr<comm::Communicator> comm)
    : opts_((validate(opts), opts)),
      comm_(comm ? std::move(comm) : std::shared_ptr<comm::Communicator>(comm::make_local_communicator())),
      device_(pick_device(opts)),
      gen_(at::make_generator<at::CPUGeneratorImpl>(opts.seed)),
      scaler_(opts.precision == Precision::FP16, opts.loss_scale_init, opts.loss_scale_growth_factor,
              opts.loss_scale_backoff_factor, opts.loss_scale_growth_interval) {
  if (opts_.num_threads > 0) {  // libtorch's intra-op pool and the BLAS's own threads, so they never oversubscribe
    at::set_num_threads(opts_.num_threads);
    blas::set_threads(opts_.num_threads);
  }
  // TorchScript models draw dropout masks and initial values from libtorch's default
  // generator; seed it too so their runs repeat.
  torch::manual_seed(opts_.seed);
}

Accelerator::~Accelerator() { *hook_owner_ = nullptr; }

void Accelerator::check_strategy(const Optimizer* opt) const {
  if (comm_->size() <= 1 && !is_zero(opts_.strategy)) return;
  const std::string name = strategy_name(opts_.strategy);
  auto need = [&](const char* coll, comm::DataType t) {
    ACCEL_CHECK(comm_->supports(coll, t), Status::Unsupported, "strategy ", name, " needs ", coll, " of ",
                comm::dtype_name(t), ", which the '", comm_->backend(), "' communication backend lacks");
  };
  if (opts_.strategy == Strategy::DDP) {
    need("all_reduce", comm::DataType::Float32);
    need("broadcast", comm::DataType::Float32);
  } else if (is_zero(opts_.strategy)) {
    const comm::DataType w = comm_dtype(opts_.precision == Precision::BF16   ? torch::kBFloat16
                                        : opts_.precision == Precision::FP16 ? torch::kHalf
                                                                              : torch::kFloat);
    need("broadcast", comm::DataType::Float32);
    need("reduce_scatter", w);
    need("all_gather", w);
    need("all_gather", comm::DataType::Float32);
    need("all_reduce", comm::DataType::Float64);
    need("all_reduce", comm::DataType::Int32);
    ACCEL_CHECK(!opt || opt->shardable(), Status::Unsupported, "ZeRO cannot shard the ", opt->name(),
                " optimizer: its update is not elementwise (it needs whole-tensor norms); use DDP, or SGD or AdamW");
  }
}

int Accelerator::zero_stage_active() const { return zero_ ? zero_->stage() : 0; }

void Accelerator::charge_flops(double flops, const char* label) {
  const double fps = comm_->flops_per_second();
  if (fps > 0 && flops > 0) comm_->charge_compute(flops / fps, label);
}

std::vector<torch::Tensor> Accelerator::full_parameters(const Model& model) {
  if (zero_ && &model == model_.get()) return zero_->full_parameters();
  std::vector<torch::Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.detach().to(torch::kCPU, torch::kFloat, false, true));
  return out;
}

void Accelerator::save_model(const Model& model, const std::string& path) {
  const bool script = path.size() >= 3 && path.compare(path.size() - 3, 3, ".pt") == 0;
  ACCEL_CHECK(!script || model.from_torchscript(), Status::Unsupported, "only a model loaded from TorchScript exports as ",
              "TorchScript ('", path, "'); save the built-in MLP as .safetensors");
  std::vector<torch::Tensor> params = full_parameters(model);
  Status status = Status::Ok;
  std::string why;
  if (comm_->rank() == 0) {
    try {
      paths::check_file_target(path, script ? paths::FileKind::TorchScript : paths::FileKind::Safetensors, "path");
      if (script)
        model.export_torchscript(params, path);
      else
        save_safetensors(model.parameter_names(), params, path);
    } catch (const Error& e) {
      why = e.what();
      status = e.status();
    }
  }
  agree(status, why);  // the outcome on every process, the file there on return
}

void Accelerator::prepare(const std::shared_ptr<Model>& model, const std::shared_ptr<Optimizer>& opt,
                          const std::shared_ptr<Scheduler>& sched, const std::shared_ptr<DataLoader>& loader) {
  // Check everything first: a failed prepare changes nothing.
  std::shared_ptr<Model> m = model ? model : (opt ? opt->model() : model_);
  ACCEL_CHECK(!model_ || !m || m == model_, Status::InvalidState,
              "this context already trains another model; a context trains one model with one optimizer");
  ACCEL_CHECK(!opt || opt->model() == m, Status::InvalidArgument, "the optimizer was created for a different model");
  ACCEL_CHECK(!opt_ || !opt || opt == opt_, Status::InvalidState, "this context already steps another optimizer");
  std::shared_ptr<Optimizer> o = opt ? opt : opt_;
  ACCEL_CHECK(!sched || (o && sched->optimizer() == o), Status::InvalidArgument,
              "the scheduler belongs to an optimizer that is not prepared on this context");
  ACCEL_CHECK(!sched_ || !sched || sched == sched_, Status::InvalidState, "this context already has a scheduler");
  ACCEL_CHECK(!loader || !loader->config().split_batches || loader->config().batch_size % comm_->size() == 0,
              Status::InvalidArgument, "split_batches needs a batch size (", loader ? loader->config().batch_size : 0,
              ") divisible by the number of processes (", comm_->size(), ")");
  if (m && !model_) {
    check_strategy(o.get());
    ACCEL_CHECK(!is_zero(opts_.strategy) || !m->parameters().empty(), Status::InvalidArgument,
                "ZeRO shards parameters; the model has none");
  }
  if (o && !opt_) check_strategy(o.get());

  if (m && !model_) {
    m->to(device_);
    if (is_zero(opts_.strategy)) {
      // the working copy: 16-bit under mixed precision where the model can compute with it
      c10::ScalarType work = torch::kFloat;
      if (opts_.precision == Precision::BF16 && (m->casts_weights() || device_.is_cuda())) work = torch::kBFloat16;
      if (opts_.precision == Precision::FP16 && (m->casts_weights() || device_.is_cuda())) work = torch::kHalf;
      if (emulate_fp16() && work == torch::kFloat) m->set_grad_rounding(true);
      zero_ = std::make_unique<ZeroEngine>(zero_stage(opts_.strategy), *comm_, *m, work, opts_.bucket_bytes);
    } else if (emulate_fp16()) {
      m->set_grad_rounding(true);
    }
    model_ = m;
    if (ddp()) ddp_setup();
  }
  if (o && !opt_) {
    if (!zero_ && !o->bound()) o->bind();  // ZeRO steps its shards itself: no unsharded state
    opt_ = o;
  }
  if (sched) sched_ = sched;
  if (loader && !prepared(loader.get())) {
    // Accelerate shards at prepare: every process gets its share of each epoch's batches
    if (comm_->size() > 1) loader->shard(comm_->rank(), comm_->size());
    loaders_.push_back(loader);
  }
}

bool Accelerator::prepared(const DataLoader* loader) const {
  for (const auto& l : loaders_)
    if (l.get() == loader) return true;
  return false;
}

torch::Tensor Accelerator::forward(Model& model, const std::vector<torch::Tensor>& inputs) {
  torch::Device target = model.parameters().empty() ? device_ : model.parameters().front().device();
  std::vector<torch::Tensor> placed;
  placed.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    ACCEL_CHECK(inputs[i].defined(), Status::InvalidArgument, "input ", i, " is empty");
    placed.push_back(inputs[i].device() == target ? inputs[i] : inputs[i].to(target));
  }
  ForwardMode mode;
  mode.emulate_fp16 = emulate_fp16();
  std::optional<torch::NoGradGuard> no_grad;
  if (!model.is_training()) no_grad.emplace();
  std::optional<compat::AutocastGuard> autocast;
  if (opts_.precision == Precision::BF16) {
    autocast.emplace(target.type(), torch::kBFloat16);
  } else if (opts_.precision == Precision::FP16 && target.is_cuda()) {
    autocast.emplace(target.type(), torch::kHalf);
  }
  const bool sharded = zero_ && &model == model_.get();
  if (sharded && zero_->stage() == 3) check_even_collectives();
  if (&model == model_.get()) {
    fwd_rows_ = placed.empty() || placed[0].dim() == 0 ? 1 : placed[0].size(0);
    if (comm_->flops_per_second() > 0)  // the simulator: charge the forward's estimated compute
      charge_flops(2.0 * static_cast<double>(fwd_rows_) * static_cast<double>(model.num_elements()), "forward");
  }
  if (!sharded || zero_->stage() != 3) return model.forward(placed, mode);
  if (zero_->gates_units()) {
    mode.gate = zero_.get();
    return model.forward(placed, mode);
  }
  zero_->before(0);
  torch::Tensor out = model.forward(placed, mode);
  zero_->after(0, out);
  return out;
}

std::optional<Batch> Accelerator::next_batch(DataLoader& loader) {
  const bool ours = prepared(&loader);
  auto b = loader.next(device_);
  if (b && ours) {
    end_of_data_ = b->last;
    last_rows_ = b->inputs.size(0);
    last_valid_ = b->valid;
    last_loader_ = &loader;
    last_position_ = loader.position();
  }
  if (!b && ours) {
    // The epoch is over here. Processes with more batches (even_batches off) are about to
    // make collectives this one will not: say so here, where they fail at theirs, instead of
    // leaving them waiting.
    auto it = std::find(epoch_collectives_.begin(), epoch_collectives_.end(), &loader);
    const bool trained = it != epoch_collectives_.end();
    if (trained) epoch_collectives_.erase(it);
    if (last_loader_ == &loader) last_loader_ = nullptr;
    if (trained && comm_->size() > 1) {
      const auto& counts = loader.batches_per_process();
      const int64_t mine = collectives_per_epoch(counts[static_cast<size_t>(comm_->rank())]);
      for (size_t r = 0; r < counts.size(); ++r)
        ACCEL_CHECK(collectives_per_epoch(counts[r]) <= mine, Status::InvalidState, uneven_message(loader, false));
    }
  }
  return b;
}

int64_t Accelerator::collectives_through(int64_t position, int64_t batches) const {
  // DDP and ZeRO-1 communicate on the micro-batches that complete the gradients (every K-th
  // and the epoch's last); ZeRO-2 reduce-scatters every micro-batch, ZeRO-3 gathers for
  // every forward
  if (communicates_every_micro_batch()) return position;
  const int64_t k = opts_.gradient_accumulation_steps;
  return position / k + (position == batches && position % k != 0 ? 1 : 0);
}

std::string Accelerator::uneven_message(DataLoader& loader, bool ahead) {
  const auto& counts = loader.batches_per_process();
  const size_t me = static_cast<size_t>(comm_->rank());
  size_t other = 0;  // the process that differs most from this one
  for (size_t r = 0; r < counts.size(); ++r)
    if (ahead ? counts[r] < counts[other] : counts[r] > counts[other]) other = r;
  const char* what = !communicates_every_micro_batch() ? "gradient synchronisations"
                     : zero_->stage() == 3             ? "weight gathers and gradient reduce-scatters"
                                                       : "gradient reduce-scatters";
  std::ostringstream m;
  m << "the prepared data loader gives process " << me << " " << counts[me] << " batches per epoch and process " << other << " "
    << counts[other] << " (even_batches is off), so under " << strategy_name(opts_.strategy) << " with "
    << opts_.gradient_accumulation_steps << " accumulation step(s) they make " << collectives_per_epoch(counts[me]) << " and "
    << collectives_per_epoch(counts[other]) << " " << what << " per epoch: "
    << (ahead ? "batch " + std::to_string(last_position_) + " of this epoch has no counterpart on process " + std::to_string(other)
              : std::string("the others are still training on batches this process does not have"))
    << ", and the processes would wait for each other forever (on GPUs, a hang). Turn even_batches on (the default: "
       "the last round wraps around), set drop_last, or use a dataset that divides evenly";
  return m.str();
}

void Accelerator::check_even_collectives() {
  DataLoader* loader = last_loader_;
  if (comm_->size() <= 1 || !loader || loader->config().even_batches) return;  // even batches: equal shares
  const auto& counts = loader->batches_per_process();
  int64_t fewest = counts.front();
  for (int64_t c : counts) fewest = std::min(fewest, c);
  // the collectives this process has made in the epoch once this one is made
  const int64_t made = collectives_through(last_position_, loader->num_batches());
  ACCEL_CHECK(made <= collectives_per_epoch(fewest), Status::InvalidState, uneven_message(*loader, true));
  if (std::find(epoch_collectives_.begin(), epoch_collectives_.end(), loader) == epoch_collectives_.end())
    epoch_collectives_.push_back(loader);
}

// ---------------------------------------------------------------------------------------
// Process utilities

namespace {
torch::Tensor host_contiguous(const torch::Tensor& t) {
  ACCEL_CHECK(t.defined(), Status::InvalidArgument, "no tensor");
  return t.detach().to(torch::kCPU).contiguous();
}

std::string dims_str(const int64_t* d, int64_t n) {
  std::string s = "[";
  for (int64_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}
}  // namespace

// Every process's dtype, rank and shape, exchanged before a collective whose sizes depend on
// them, so that a mismatch is a clear error on every process instead of a mismatched
// collective. Row r: {dtype, ndim, extra, dims[16]}.
std::vector<int64_t> Accelerator::describe_across(const torch::Tensor& x, int64_t extra) {
  std::vector<int64_t> mine(kRow, 0), all(kRow * static_cast<size_t>(comm_->size()));
  mine[0] = static_cast<int64_t>(x.scalar_type());
  mine[1] = x.dim();
  mine[2] = extra;
  for (int64_t d = 0; d < x.dim() && d < 16; ++d) mine[static_cast<size_t>(3 + d)] = x.size(d);
  comm_->all_gather(mine.data(), all.data(), kRow, comm::DataType::Int64)->wait();
  for (int r = 0; r < comm_->size(); ++r) {
    const int64_t* row = &all[kRow * static_cast<size_t>(r)];
    ACCEL_CHECK(row[0] == all[0], Status::InvalidArgument, "tensor: the dtypes differ across processes: process 0 has ",
                c10::toString(static_cast<c10::ScalarType>(all[0])), ", process ", r, " has ",
                c10::toString(static_cast<c10::ScalarType>(row[0])));
    ACCEL_CHECK(row[1] == all[1], Status::InvalidArgument, "tensor: the number of dimensions differs across processes: ",
                "process 0 has ", dims_str(&all[3], all[1]), ", process ", r, " has ", dims_str(row + 3, row[1]));
  }
  return all;
}

torch::Tensor Accelerator::reduce(const torch::Tensor& t, comm::RedOp op) {
  torch::Tensor r = host_contiguous(t).clone();
  comm_->all_reduce(r.data_ptr(), r.data_ptr(), static_cast<size_t>(r.numel()), comm_dtype(r.scalar_type()), op)->wait();
  return r.device() == device_ ? r : r.to(device_);
}

torch::Tensor Accelerator::broadcast(const torch::Tensor& t, int root) {
  ACCEL_CHECK(root >= 0 && root < comm_->size(), Status::InvalidArgument, "root must be in [0, ", comm_->size(),
              ") (a process index), got ", root);
  torch::Tensor r = host_contiguous(t).clone();
  comm_->broadcast(r.data_ptr(), r.data_ptr(), static_cast<size_t>(r.numel()), comm_dtype(r.scalar_type()), root)->wait();
  return r.device() == device_ ? r : r.to(device_);
}

torch::Tensor Accelerator::gather(const torch::Tensor& t) {
  torch::Tensor x = host_contiguous(t);
  ACCEL_CHECK(x.dim() >= 1, Status::InvalidArgument, "gather needs a tensor of at least one dimension, got a scalar");
  const int n = comm_->size();
  // the shapes first: a clear error instead of silently mixed rows
  const std::vector<int64_t> all = describe_across(x, 0);
  const size_t nd = static_cast<size_t>(x.dim());
  for (int r = 0; r < n; ++r)
    for (size_t d = 0; d < nd; ++d)
      ACCEL_CHECK(all[kRow * static_cast<size_t>(r) + 3 + d] == all[3 + d], Status::InvalidArgument,
                  "gather needs the same shape on every process: process 0 has ", dims_str(&all[3], x.dim()),
                  ", process ", r, " has ", dims_str(&all[kRow * static_cast<size_t>(r) + 3], x.dim()),
                  " (pad_across_processes makes them equal)");
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape[0] *= n;
  torch::Tensor out = torch::empty(out_shape, x.options());
  comm_->all_gather(x.data_ptr(), out.data_ptr(), static_cast<size_t>(x.numel()), comm_dtype(x.scalar_type()))->wait();
  return out.device() == device_ ? out : out.to(device_);
}

torch::Tensor Accelerator::pad_across_processes(const torch::Tensor& t, int64_t dim, double value, bool pad_first) {
  torch::Tensor x = host_contiguous(t);
  ACCEL_CHECK(x.dim() >= 1, Status::InvalidArgument, "pad_across_processes needs a tensor of at least one dimension");
  ACCEL_CHECK(dim >= -x.dim() && dim < x.dim(), Status::InvalidArgument, "dim must be in [", -x.dim(), ", ", x.dim(),
              ") for a tensor ", shape_str(x), ", got ", dim);
  if (dim < 0) dim += x.dim();
  if (!x.is_floating_point()) {  // the pad value must be one of the dtype's values: [lo, end)
    const double half = std::ldexp(1.0, static_cast<int>(x.element_size()) * 8 - 1);
    const bool unsigned_bytes = x.scalar_type() == torch::kByte;
    const double lo = unsigned_bytes ? 0.0 : -half, end = unsigned_bytes ? 2 * half : half;
    ACCEL_CHECK(std::isfinite(value) && value == std::floor(value) && value >= lo && value < end,
                Status::InvalidArgument, "pad_value must be an integer in the range of ", c10::toString(x.scalar_type()),
                " for this tensor, got ", value);
  }
  const int n = comm_->size();
  const std::vector<int64_t> all = describe_across(x, dim);
  for (int r = 0; r < n; ++r)
    ACCEL_CHECK(all[kRow * static_cast<size_t>(r) + 2] == dim, Status::InvalidArgument,
                "dim differs across processes: process 0 pads dimension ", all[2], ", process ", r, " dimension ",
                all[kRow * static_cast<size_t>(r) + 2]);
  const int64_t size = x.size(dim);
  int64_t target = 0;
  for (int r = 0; r < n; ++r) target = std::max(target, all[kRow * static_cast<size_t>(r) + 3 + static_cast<size_t>(dim)]);
  torch::Tensor out = x;
  if (target > size) {
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape[static_cast<size_t>(dim)] = target;
    out = torch::full(shape, value, x.options());
    out.narrow(dim, pad_first ? target - size : 0, size).copy_(x);
  }
  return out.device() == device_ ? out : out.to(device_);
}

torch::Tensor Accelerator::gather_for_metrics(const torch::Tensor& t) {
  torch::Tensor x = host_contiguous(t);
  ACCEL_CHECK(x.dim() >= 1, Status::InvalidArgument, "gather_for_metrics needs a tensor of at least one dimension");
  // this process's rows that are not even_batches' duplicates (they come first)
  int64_t keep = x.size(0);
  if (last_rows_ == x.size(0) && last_valid_ >= 0) keep = last_valid_;
  const torch::Tensor mine = x.narrow(0, 0, keep);
  const int n = comm_->size();
  std::vector<int64_t> counts(static_cast<size_t>(n));
  comm_->all_gather(&keep, counts.data(), 1, comm::DataType::Int64)->wait();
  torch::Tensor padded = pad_across_processes(mine, 0, 0.0, false).to(torch::kCPU);
  torch::Tensor all = gather(padded).to(torch::kCPU);
  const int64_t per = padded.size(0);
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < n; ++r) parts.push_back(all.narrow(0, r * per, counts[static_cast<size_t>(r)]));
  torch::Tensor out = torch::cat(parts, 0);
  return out.device() == device_ ? out : out.to(device_);
}

void Accelerator::set_seed(uint64_t seed, bool per_process) {
  const uint64_t s = seed + (per_process ? static_cast<uint64_t>(comm_->rank()) : 0);
  gen_.set_current_seed(s);
  torch::manual_seed(s);
}

void Accelerator::backward(const torch::Tensor& loss) {
  ACCEL_CHECK(model_ != nullptr, Status::InvalidState, "backward before accel_prepare bound a model");
  ACCEL_CHECK(loss.defined() && loss.numel() == 1, Status::InvalidArgument, "the loss must be a tensor of one element, got ",
              loss.defined() ? shape_str(loss) : std::string("none"));
  ACCEL_CHECK(loss.is_floating_point(), Status::InvalidArgument, "the loss must be floating-point");
  ACCEL_CHECK(loss.requires_grad(), Status::InvalidArgument,
              "the loss has no autograd graph (was the model in evaluation mode, or the loss computed from constants?)");
  if (!scaler_.enabled()) {
    const double v = loss.item<double>();
    ACCEL_CHECK(std::isfinite(v), Status::NonFinite, "the loss is ", v,
                "; gradients are unchanged and this micro-batch is not counted");
  }
  // The common case (a 0-d fp32 loss, no accumulation, no scaling) adds nothing to the graph.
  torch::Tensor scaled = loss;
  if (scaled.dim() != 0 || scaled.scalar_type() != torch::kFloat) scaled = scaled.to(torch::kFloat).reshape({});
  if (opts_.gradient_accumulation_steps > 1) scaled = scaled / static_cast<double>(opts_.gradient_accumulation_steps);
  if (scaler_.enabled()) scaled = scaled * scaler_.scale();
  // this micro-batch completes the gradients: DDP communicates during its backward only
  const bool sync = accum_count_ + 1 >= opts_.gradient_accumulation_steps || end_of_data_;
  if ((zero_ || ddp()) && (sync || communicates_every_micro_batch())) check_even_collectives();
  ddp_sync_now_ = ddp() && sync;
  in_backward_ = true;
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{in_backward_};
  if (zero_) {
    zero_->begin_backward(sync, fwd_rows_);
    try {
      scaled.backward();
    } catch (...) {
      zero_->end_backward_abandoned();
      throw;
    }
    zero_->end_backward();
  } else {
    scaled.backward();
    if (ddp_sync_now_) {
      ddp_finish();
    } else if (comm_->flops_per_second() > 0) {
      charge_flops(4.0 * static_cast<double>(fwd_rows_) * static_cast<double>(model_->num_elements()), "backward");
    }
  }
  ddp_sync_now_ = false;
  ++micro_steps_;
  ++accum_count_;
  sync_ = sync;
  pending_ = true;
}

// ---------------------------------------------------------------------------------------
// DDP

void Accelerator::ddp_setup() {
  const auto& params = model_->parameters();
  // the same starting weights (and buffers, such as running statistics) everywhere: rank 0's
  broadcast_from_rank0(*comm_, *model_);
  // buckets in reverse parameter order (backward produces the last layers' gradients first)
  bucket_of_.assign(params.size(), {0, 0});
  Bucket cur;
  auto close = [&] {
    if (cur.params.empty()) return;
    buckets_.push_back(std::move(cur));
    cur = Bucket{};
  };
  for (size_t k = params.size(); k-- > 0;) {
    const int64_t numel = params[k].numel();
    if (!cur.params.empty() && (cur.numel + numel) * 4 > opts_.bucket_bytes) close();
    bucket_of_[k] = {buckets_.size(), cur.params.size()};
    cur.params.push_back(k);
    cur.offsets.push_back(cur.numel);
    cur.numel += numel;
  }
  close();
  for (size_t k = 0; k < params.size(); ++k)
    accumulators_.push_back(on_grad_accumulated(params[k], [owner = hook_owner_, k] {
      if (Accelerator* a = *owner) a->ddp_accumulated(k);
    }));
}

void Accelerator::ddp_accumulated(size_t k) {
  if (!in_backward_) return;
  const auto& p = model_->parameters()[k];
  auto [bi, slot] = bucket_of_[k];
  Bucket& b = buckets_[bi];
  // the gradient lives in its bucket (as DDP's gradient_as_bucket_view): later micro-batches
  // accumulate into it in place, and the all-reduce averages it there
  // every slot is written before the all-reduce: here, or zeroed in ddp_finish
  if (!b.flat.defined()) b.flat = torch::empty({b.numel}, torch::dtype(p.scalar_type()).device(p.device()));
  torch::Tensor view = b.flat.narrow(0, b.offsets[slot], p.numel()).view(p.sizes());
  if (p.grad().data_ptr() != view.data_ptr()) {
    view.copy_(p.grad());
    const_cast<torch::Tensor&>(p).mutable_grad() = view;
  }
  if (!ddp_sync_now_ || b.work) return;
  if (++b.ready == b.params.size()) ddp_launch(b);
}

void Accelerator::ddp_launch(Bucket& b) {
  charge_flops(4.0 * static_cast<double>(fwd_rows_) * static_cast<double>(b.numel), "backward");
  b.work = comm_->all_reduce(b.flat.data_ptr(), b.flat.data_ptr(), static_cast<size_t>(b.flat.numel()),
                             comm_dtype(b.flat.scalar_type()), comm::RedOp::Avg);
}

void Accelerator::ddp_finish() {
  const auto& params = model_->parameters();
  // buckets with parameters that got no gradient this step (unused in the forward): zeros
  // for them, so every rank launches the same collectives
  for (auto& b : buckets_) {
    if (b.work) continue;
    for (size_t i = 0; i < b.params.size(); ++i) {
      const auto& p = params[b.params[i]];
      if (!b.flat.defined()) b.flat = torch::zeros({b.numel}, torch::dtype(p.scalar_type()).device(p.device()));
      torch::Tensor view = b.flat.narrow(0, b.offsets[i], p.numel()).view(p.sizes());
      if (!p.grad().defined()) {
        view.zero_();
        const_cast<torch::Tensor&>(p).mutable_grad() = view;
      } else if (p.grad().data_ptr() != view.data_ptr()) {
        view.copy_(p.grad());
        const_cast<torch::Tensor&>(p).mutable_grad() = view;
      }
    }
    ddp_launch(b);
  }
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
    b.ready = 0;
  }
}

void Accelerator::ddp_release() {
  for (auto& b : buckets_) b.flat = torch::Tensor();  // the gradients (views) were reset
}

bool Accelerator::unscale_once() {
  if (!scaler_.enabled()) return false;
  if (!unscaled_) {
    // as torch.cuda.amp: the reciprocal in double, applied in fp32
    found_inf_ = zero_ ? zero_->unscale(static_cast<double>(static_cast<float>(1.0 / scaler_.scale())))
                       : scaler_.unscale(model_->parameters());
    unscaled_ = true;
  }
  return found_inf_;
}

double Accelerator::clip_grad_norm(double max_norm) {
  ACCEL_CHECK(model_ != nullptr, Status::InvalidState, "clip_grad_norm before accel_prepare bound a model");
  ACCEL_CHECK(std::isfinite(max_norm) && max_norm > 0, Status::InvalidArgument, "max_norm must be finite and > 0, got ",
              max_norm);
  if (!pending_ || !sync_) return std::nan("");
  unscale_once();
  if (zero_) return zero_->clip(max_norm);  // the norm over every rank's shard
  std::vector<torch::Tensor> grads, norms;
  for (const auto& p : model_->parameters())
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  norms.reserve(grads.size());
  for (const auto& g : grads) norms.push_back(g.norm(2));
  const double total = torch::stack(norms).norm(2).item<double>();
  if (!std::isfinite(total)) return total;
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0)
    for (auto& g : grads) g.mul_(coef);
  return total;
}

StepResult Accelerator::step() {
  ACCEL_CHECK(model_ != nullptr && opt_ != nullptr, Status::InvalidState,
              "step before accel_prepare bound a model and an optimizer");
  StepResult r;
  if (pending_ && sync_) {
    comm_->on_step(optimizer_steps_ + 1);
    r.sync_step = true;
    if (unscale_once()) {
      r.skipped = true;
      scaler_.update(true);
    } else {
      if (zero_)
        zero_->step(*opt_);
      else
        opt_->step();
      scaler_.update(false);
      if (sched_) sched_->step();
      ++optimizer_steps_;
      r.stepped = true;
    }
    if (zero_) {
      zero_->zero_grad();
    } else {
      opt_->zero_grad();
      if (ddp()) ddp_release();
    }
    accum_count_ = 0;
    pending_ = false;
    unscaled_ = false;
    found_inf_ = false;
  }
  r.loss_scale = scaler_.scale();
  r.optimizer_steps = optimizer_steps_;
  r.micro_steps = micro_steps_;
  return r;
}

}  // namespace accel
