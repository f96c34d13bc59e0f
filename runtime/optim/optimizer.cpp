// Optimizers (SGD, AdamW, LAMB) and learning-rate schedules. The elementwise updates of SGD
// and AdamW are written once (runtime/optim/kernels.cpp, through update.h) and serve both
// the unsharded optimizer here (per parameter) and ZeRO (per shard).
#include <ATen/Parallel.h>

#include <cmath>

#include "runtime/domain.h"
#include "runtime/optim/kernels.h"
#include "runtime/optim/update.h"
#include "runtime/optim/optimizer.h"

namespace accel {

// ---------------------------------------------------------------------------------------
// The updates

namespace {
// The fused kernels take contiguous fp32 host memory; anything else takes libtorch's ops.
bool fusable(std::initializer_list<const torch::Tensor*> ts) {
  for (const torch::Tensor* t : ts)
    if (!t->defined() || !t->device().is_cpu() || t->scalar_type() != torch::kFloat || !t->is_contiguous()) return false;
  return true;
}

// The kernels' threads: libtorch's intra-op count, one inside a parallel region.
int kernel_threads() { return at::in_parallel_region() ? 1 : at::get_num_threads(); }
}  // namespace

void adamw_update(const AdamWConfig& c, double lr, int64_t step, const torch::Tensor& param, const torch::Tensor& grad,
                  const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) {
  const double bias_correction1 = 1 - std::pow(c.beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(c.beta2, static_cast<double>(step));
  torch::Tensor p = param.detach();
  if (fusable({&p, &grad, &exp_avg, &exp_avg_sq}) && grad.numel() == p.numel()) {
    optim::AdamWCoefficients k;
    k.decay = c.weight_decay != 0;
    k.decay_factor = static_cast<float>(1 - lr * c.weight_decay);
    k.beta1 = static_cast<float>(c.beta1);
    k.one_minus_beta1 = static_cast<float>(1 - c.beta1);
    k.beta2 = static_cast<float>(c.beta2);
    k.one_minus_beta2 = static_cast<float>(1 - c.beta2);
    k.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
    k.eps = static_cast<float>(c.eps);
    k.neg_step_size = static_cast<float>(-(lr / bias_correction1));
    float *pp = p.data_ptr<float>(), *m = exp_avg.data_ptr<float>(), *v = exp_avg_sq.data_ptr<float>();
    const float* g = grad.data_ptr<float>();
    optim::adamw(pp, g, m, v, p.numel(), k, kernel_threads());
    return;
  }
  // libtorch's AdamW, term by term (what the kernel computes, on any device and dtype)
  if (c.weight_decay != 0) p.mul_(1 - lr * c.weight_decay);
  exp_avg.mul_(c.beta1).add_(grad, 1 - c.beta1);
  exp_avg_sq.mul_(c.beta2).addcmul_(grad, grad, 1 - c.beta2);
  torch::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(c.eps);
  p.addcdiv_(exp_avg, denom, -(lr / bias_correction1));
}

void sgd_update(const SGDConfig& c, double lr, const torch::Tensor& param, const torch::Tensor& grad,
                const torch::Tensor& momentum_buffer, bool first) {
  torch::Tensor p = param.detach();
  const bool momentum = c.momentum != 0;
  if (fusable({&p, &grad}) && (!momentum || fusable({&momentum_buffer})) && grad.numel() == p.numel()) {
    optim::SGDCoefficients k;
    k.decay = c.weight_decay != 0;
    k.weight_decay = static_cast<float>(c.weight_decay);
    k.momentum = momentum;
    k.momentum_factor = static_cast<float>(c.momentum);
    k.one_minus_dampening = static_cast<float>(1 - c.dampening);
    k.nesterov = c.nesterov;
    k.first = first;
    k.neg_lr = static_cast<float>(-lr);
    float* pp = p.data_ptr<float>();
    float* buf = momentum ? momentum_buffer.data_ptr<float>() : nullptr;
    const float* g = grad.data_ptr<float>();
    optim::sgd(pp, g, buf, p.numel(), k, kernel_threads());
    return;
  }
  // libtorch's SGD, term by term
  torch::Tensor d = grad;
  if (c.weight_decay != 0) d = d.add(p, c.weight_decay);
  if (momentum) {
    if (first)
      momentum_buffer.copy_(d);
    else
      momentum_buffer.mul_(c.momentum).add_(d, 1 - c.dampening);
    d = c.nesterov ? d.add(momentum_buffer, c.momentum) : momentum_buffer;
  }
  p.add_(d, -lr);
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
void validate(const AdafactorConfig& c) {
  if (c.relative_step) {
    ACCEL_CHECK(c.lr == 0, Status::InvalidArgument, "Adafactor: lr ", c.lr,
                " with relative_step: the step size is relative (set lr 0, or turn relative_step off)");
  } else {
    domain::positive("lr", c.lr);
    ACCEL_CHECK(!c.warmup_init, Status::InvalidArgument, "Adafactor: warmup_init needs relative_step");
  }
  domain::non_negative("eps1", c.eps1);
  domain::non_negative("eps2", c.eps2);
  domain::positive("clip_threshold", c.clip_threshold);
  ACCEL_CHECK(std::isfinite(c.decay_rate) && c.decay_rate < 0, Status::InvalidArgument,
              "Adafactor: decay_rate must be finite and < 0 (beta2 at step t is 1 - t^decay_rate), got ", c.decay_rate);
  domain::half_open("beta1", c.beta1, 0, 1);
  domain::non_negative("weight_decay", c.weight_decay);
}
void validate(const LAMBConfig& c) { validate_adam_like(c); }

Optimizer::Optimizer(std::shared_ptr<Model> model, LAMBConfig cfg)
    : model_(std::move(model)), lamb_(cfg), base_lr_(cfg.lr), lr_(cfg.lr) {
  validate(cfg);
}

Optimizer::Optimizer(std::shared_ptr<Model> model, AdafactorConfig cfg)
    : model_(std::move(model)), adafactor_(cfg), base_lr_(cfg.lr), lr_(cfg.lr) {
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

void Optimizer::set_lr(double lr) { lr_ = lr; }

void Optimizer::bind() {
  state_.assign(model_->parameters().size(), ParamState{});
  bound_ = true;
}

void Optimizer::step() {
  ACCEL_CHECK(bound_, Status::InvalidState, "the optimizer is not prepared");
  if (lamb_) return lamb_step();
  if (adafactor_) return adafactor_step();
  torch::NoGradGuard ng;
  const auto& params = model_->parameters();
  // as libtorch's optimizers: a parameter without a gradient is left alone, and its state
  // (created at its first update) counts only its own updates
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor& p = params[i];
    if (!p.grad().defined()) continue;
    ParamState& st = state_[i];
    if (adamw_) {
      if (!st.exp_avg.defined()) {
        st.exp_avg = torch::zeros_like(p, torch::MemoryFormat::Preserve);
        st.exp_avg_sq = torch::zeros_like(p, torch::MemoryFormat::Preserve);
      }
      adamw_update(*adamw_, lr_, ++st.steps, p, p.grad(), st.exp_avg, st.exp_avg_sq);
    } else {
      const bool first = sgd_->momentum != 0 && !st.momentum.defined();
      if (first) st.momentum = torch::empty_like(p, torch::MemoryFormat::Preserve);
      sgd_update(*sgd_, lr_, p, p.grad(), st.momentum, first);
      ++st.steps;
    }
  }
}

std::vector<std::string> Optimizer::state_kinds() const {
  if (adamw_) return {"exp_avg", "exp_avg_sq"};
  if (adafactor_) {
    if (adafactor_->beta1 > 0) return {"exp_avg", "exp_avg_sq", "exp_avg_sq_row", "exp_avg_sq_col"};
    return {"exp_avg_sq", "exp_avg_sq_row", "exp_avg_sq_col"};
  }
  if (lamb_) return {"m", "v"};
  if (sgd_->momentum != 0) return {"momentum_buffer"};
  return {};
}

std::vector<std::string> Optimizer::kinds_of(size_t i) const {
  if (!adafactor_) return state_kinds();
  std::vector<std::string> k;
  if (adafactor_->beta1 > 0) k.push_back("exp_avg");
  if (model_->parameters()[i].dim() >= 2) {
    k.push_back("exp_avg_sq_row");
    k.push_back("exp_avg_sq_col");
  } else {
    k.push_back("exp_avg_sq");
  }
  return k;
}

std::vector<int64_t> Optimizer::state_shape(const std::string& kind, const std::vector<int64_t>& shape) const {
  std::vector<int64_t> s = shape;
  if (kind == "exp_avg_sq_row" && !s.empty()) s.pop_back();
  if (kind == "exp_avg_sq_col" && s.size() >= 2) s.erase(s.end() - 2);
  return s;
}

torch::Tensor Optimizer::ParamState::*Optimizer::slot_of(const std::string& kind) {
  if (kind == "exp_avg_sq_row") return &Optimizer::ParamState::row;
  if (kind == "exp_avg_sq_col") return &Optimizer::ParamState::col;
  if (kind == "exp_avg" || kind == "m") return &Optimizer::ParamState::exp_avg;
  if (kind == "exp_avg_sq" || kind == "v") return &Optimizer::ParamState::exp_avg_sq;
  if (kind == "momentum_buffer") return &Optimizer::ParamState::momentum;
  return nullptr;
}

std::vector<torch::Tensor> Optimizer::state(const std::string& kind) const {
  std::vector<torch::Tensor> out(model_->parameters().size());
  auto slot = slot_of(kind);
  if (!bound_ || !slot) return out;
  for (size_t i = 0; i < out.size(); ++i) out[i] = state_[i].*slot;
  return out;
}

int64_t Optimizer::state_steps() const {
  if (lamb_) return lamb_steps_;
  if ((!adamw_ && !adafactor_) || !bound_) return 0;
  for (const auto& st : state_)  // the first parameter's count that has one (libtorch's AdamW)
    if (st.exp_avg.defined() || st.exp_avg_sq.defined() || st.row.defined()) return st.steps;
  return 0;
}

void Optimizer::restore(const std::map<std::string, std::vector<torch::Tensor>>& state, int64_t steps) {
  ACCEL_CHECK(bound_, Status::InvalidState, "restore of an optimizer that is not prepared");
  const auto& params = model_->parameters();
  if (lamb_) lamb_steps_ = steps;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<std::string> kinds = kinds_of(i);
    ParamState& st = state_[i];
    // a parameter's state is all of its kinds or none (it had no update yet)
    bool complete = !kinds.empty();
    for (const auto& k : kinds) {
      auto it = state.find(k);
      complete = complete && it != state.end() && i < it->second.size() && it->second[i].defined();
    }
    if (!complete) {
      st = ParamState{};
      continue;
    }
    for (const auto& k : kinds) {
      const torch::Tensor& t = state.at(k)[i];
      torch::Tensor& cur = st.*slot_of(k);
      const std::vector<int64_t> shape = state_shape(k, params[i].sizes().vec());
      if (cur.defined() && cur.sizes().vec() == shape)
        cur.copy_(t.reshape(shape));  // into the existing state: no new memory
      else
        cur = t.to(params[i].device(), lamb_ || adafactor_ ? torch::kFloat : params[i].scalar_type()).reshape(shape).clone();
    }
    st.steps = steps;
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
    ParamState& st = state_[i];
    if (!st.exp_avg.defined()) {
      st.exp_avg = torch::zeros_like(p, torch::kFloat);
      st.exp_avg_sq = torch::zeros_like(p, torch::kFloat);
    }
    st.exp_avg.mul_(c.beta1).add_(g, 1 - c.beta1);
    st.exp_avg_sq.mul_(c.beta2).addcmul_(g, g, 1 - c.beta2);
    torch::Tensor update = (st.exp_avg / bc1) / ((st.exp_avg_sq / bc2).sqrt() + c.eps);
    torch::Tensor w = p.detach().to(torch::kFloat);
    if (c.weight_decay != 0) update.add_(w, c.weight_decay);
    // the trust ratio needs the whole tensor's norms: why ZeRO cannot shard LAMB
    const double wn = w.norm().item<double>(), un = update.norm().item<double>();
    const double trust = wn > 0 && un > 0 ? wn / un : 1.0;
    p.detach().add_(update.to(p.scalar_type()), -lr_ * trust);
  }
}

void Optimizer::adafactor_step() {
  const AdafactorConfig& c = *adafactor_;
  torch::NoGradGuard ng;
  const auto& params = model_->parameters();
  auto rms = [](const torch::Tensor& t) { return t.norm(2).item<double>() / std::sqrt(static_cast<double>(t.numel())); };
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor& p = params[i];
    if (!p.grad().defined()) continue;
    const torch::Tensor g = p.grad().to(torch::kFloat);
    ParamState& st = state_[i];
    const bool factored = p.dim() >= 2;
    if (st.steps == 0) {
      if (c.beta1 > 0) st.exp_avg = torch::zeros_like(g);
      if (factored) {
        st.row = torch::zeros(state_shape("exp_avg_sq_row", g.sizes().vec()), g.options());
        st.col = torch::zeros(state_shape("exp_avg_sq_col", g.sizes().vec()), g.options());
      } else {
        st.exp_avg_sq = torch::zeros_like(g);
      }
    }
    torch::Tensor w = p.detach();
    const bool cast = w.scalar_type() != torch::kFloat;
    if (cast) w = w.to(torch::kFloat);
    const double step = static_cast<double>(++st.steps);
    // the step size: transformers' _get_lr, with the parameter's RMS before this update
    double rel = lr_;
    if (c.relative_step) rel = std::min(c.warmup_init ? 1e-6 * step : 1e-2, 1.0 / std::sqrt(step));
    const double lr = (c.scale_parameter ? std::max(c.eps2, rms(w)) : 1.0) * rel;
    const double beta2t = 1.0 - std::pow(step, c.decay_rate);
    torch::Tensor update = g * g + c.eps1;
    if (factored) {
      st.row.mul_(beta2t).add_(update.mean(-1), 1.0 - beta2t);
      st.col.mul_(beta2t).add_(update.mean(-2), 1.0 - beta2t);
      auto r = (st.row / st.row.mean(-1, /*keepdim=*/true)).rsqrt_().unsqueeze(-1);
      auto col = st.col.unsqueeze(-2).rsqrt();
      update = torch::mul(r, col).mul_(g);
    } else {
      st.exp_avg_sq.mul_(beta2t).add_(update, 1.0 - beta2t);
      update = st.exp_avg_sq.rsqrt().mul_(g);
    }
    update.div_(std::max(rms(update) / c.clip_threshold, 1.0));
    update.mul_(lr);
    if (c.beta1 > 0) {
      st.exp_avg.mul_(c.beta1).add_(update, 1.0 - c.beta1);
      update = st.exp_avg;
    }
    if (c.weight_decay != 0) w.add_(w, -c.weight_decay * lr);
    w.add_(-update);
    if (cast) p.detach().copy_(w);
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
  ACCEL_CHECK(!opt_->adafactor_config() || !opt_->adafactor_config()->relative_step, Status::InvalidArgument,
              "Adafactor with relative_step sets its own step size: a scheduler has no lr to schedule (create it "
              "with an lr and relative_step off)");
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

}  // namespace accel
