// The optimizers' shared parts: the Optimizer over a model (its state per parameter, its
// checkpoint state, the step it hands to its OptimizerAlgorithm), the unsharded step of an
// optimizer written for shards, and the learning-rate schedules. Each optimizer's own
// arithmetic is in runtime/optim/<name>.cpp; the elementwise updates of SGD and AdamW are
// written once (runtime/optim/kernels.cpp, through update.h) and serve both the unsharded
// optimizer (per parameter) and ZeRO (per shard).
#include "runtime/optim/optimizer.h"

#include <cmath>
#include <optional>

#include <torch/cuda.h>

#include "runtime/device_memory.h"

namespace accel {

// ---------------------------------------------------------------------------------------
// Optimizers

void OptimizerAlgorithm::step_shard(Shard& shard, double lr) const {
  (void)shard, (void)lr;
  ACCEL_CHECK(false, Status::Internal, "the ", name(), " optimizer cannot step a shard");
}

Optimizer::Optimizer(std::shared_ptr<Model> model, std::unique_ptr<OptimizerAlgorithm> algorithm)
    : model_(std::move(model)), algo_(std::move(algorithm)), base_lr_(algo_->base_lr()), lr_(base_lr_) {
  const std::string why = model_ ? model_->untrainable() : std::string();
  ACCEL_CHECK(why.empty(), Status::InvalidState, why);
}

void Optimizer::set_lr(double lr) { lr_ = lr; }

void Optimizer::bind() {
  state_.assign(model_->parameters().size(), ParamState{});
  bound_ = true;
}

void Optimizer::step() {
  ACCEL_CHECK(bound_, Status::InvalidState, "the optimizer is not prepared");
  if (offload_) {
    if (!host_grads_.empty() && !model_->parameters().empty()) offload::wait_copies(model_->parameters().front().device());
    step_as_shards(*algo_, model_->parameters(), state_, lr_, this);
  } else {
    algo_->step(model_->parameters(), state_, lr_);
  }
}

namespace offload {

torch::Tensor host_zeros(at::IntArrayRef shape, const torch::Device& model_device, c10::ScalarType dtype) {
  device_memory::HostScope host;
  return torch::zeros(shape, torch::dtype(dtype).device(torch::kCPU).pinned_memory(model_device.is_cuda()));
}

torch::Tensor to_host(const torch::Tensor& t) {
  device_memory::HostScope host;
  torch::Tensor h = torch::empty(t.sizes(), torch::dtype(torch::kFloat).device(torch::kCPU).pinned_memory(t.is_cuda()));
  h.copy_(t.detach());
  return h;
}

torch::Tensor copy_to_host(const torch::Tensor& t) {
  device_memory::HostScope host;
  torch::Tensor h = torch::empty(t.sizes(), torch::dtype(t.scalar_type()).device(torch::kCPU).pinned_memory(t.is_cuda()));
  h.copy_(t.detach(), /*non_blocking=*/t.is_cuda());
  return h;
}

void wait_copies(const torch::Device& model_device) {
  if (model_device.is_cuda()) torch::cuda::synchronize(model_device.index());
}

}  // namespace offload

std::vector<torch::Tensor> Optimizer::state(const std::string& kind) const {
  std::vector<torch::Tensor> out(model_->parameters().size());
  if (!bound_) return out;
  for (size_t i = 0; i < out.size() && i < state_.size(); ++i)
    if (auto it = state_[i].t.find(kind); it != state_[i].t.end()) out[i] = it->second;
  return out;
}

int64_t Optimizer::state_steps() const { return algo_->state_steps(state_); }

void Optimizer::restore(const std::map<std::string, std::vector<torch::Tensor>>& state, int64_t steps) {
  ACCEL_CHECK(bound_, Status::InvalidState, "restore of an optimizer that is not prepared");
  const auto& params = model_->parameters();
  algo_->restored(steps);
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<std::string> kinds = algo_->kinds_of(params[i]);
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
      torch::Tensor& cur = st.t[k];
      const std::vector<int64_t> shape = state_shape(k, params[i].sizes().vec());
      if (cur.defined() && cur.sizes().vec() == shape)
        cur.copy_(t.reshape(shape));  // into the existing state: no new memory
      else if (offload_)
        cur = offload::to_host(t.reshape(shape));  // fp32 in host memory, as the offloaded step makes it
      else
        cur = t.to(params[i].device(), algo_->fp32_state() ? torch::kFloat : params[i].scalar_type()).reshape(shape).clone();
    }
    st.steps = steps;
  }
}

void Optimizer::zero_grad() {
  host_grads_.clear();
  for (const auto& p : model_->parameters()) {
    if (p.grad().defined()) p.mutable_grad().reset();
  }
}

namespace {
// One parameter whole as a shard of its own: one segment (its values flattened, fp32), its
// own state and update count, and the identity as the reducer.
// Offloaded (`offload` set): the weight and the gradient are fp32 copies in host memory, the
// state is made there, and the weight goes back to the device after the step.
class WholeParameter final : public Shard, public Reducer {
 public:
  WholeParameter(const OptimizerAlgorithm& algo, const torch::Tensor& p, size_t i, ParamState& st,
                 const Optimizer* offload)
      : algo_(algo), p_(p), st_(st), params_{i}, pieces_{StatePiece{i, 0, p.numel(), 0, 0}}, offload_(offload) {
    if (offload_) {
      w_ = offload::to_host(p);
      copy_back_ = true;
      if (const torch::Tensor* hg = offload_->host_grad(i)) {  // copied as it was reduced (counted then)
        g_ = offload::to_host(*hg).reshape({-1});
        offload_->count_host_bytes(static_cast<uint64_t>(p.numel()) * 2 * p.element_size());
      } else {
        g_ = offload::to_host(p.grad()).reshape({-1});
        offload_->count_host_bytes(static_cast<uint64_t>(p.numel()) * (2 * p.element_size() + p.grad().element_size()));
      }
    } else {
      torch::Tensor w = p.detach();
      if (w.scalar_type() != torch::kFloat) w = w.to(torch::kFloat);
      w_ = w.contiguous();
      copy_back_ = w_.data_ptr() != p.data_ptr();  // a cast or a contiguous copy
      g_ = p.grad().to(torch::kFloat).reshape({-1});
    }
    if (st.steps == 0) st.t.clear();  // a parameter's first update makes its state
    ++st.steps;
  }
  size_t segments() const override { return 1; }
  torch::Tensor weight(size_t) override { return w_.view({-1}); }
  torch::Tensor grad(size_t, int64_t at, int64_t len) override { return g_.narrow(0, at, len); }
  torch::Tensor state(const std::string& kind, size_t) override { return param_state(kind, params_[0]).view({-1}); }
  torch::Tensor param_state(const std::string& kind, size_t) override {
    torch::Tensor& t = st_.t[kind];
    if (!t.defined())
      t = offload_ ? offload::host_zeros(algo_.state_shape(kind, p_.sizes().vec()), p_.device())
                   : torch::zeros(algo_.state_shape(kind, p_.sizes().vec()), torch::dtype(torch::kFloat).device(p_.device()));
    return t;
  }
  void stepped(size_t) override {
    if (copy_back_) p_.detach().copy_(w_);
  }
  const std::vector<StatePiece>& pieces() const override { return pieces_; }
  const std::vector<size_t>& params() const override { return params_; }
  std::vector<int64_t> shape(size_t) const override { return p_.sizes().vec(); }
  int64_t step() const override { return st_.steps; }
  Reducer& reducer() override { return *this; }
  void sum(const torch::Tensor&) override {}  // one process: the partial sums are the sums

 private:
  const OptimizerAlgorithm& algo_;
  const torch::Tensor& p_;
  ParamState& st_;
  std::vector<size_t> params_;
  std::vector<StatePiece> pieces_;
  torch::Tensor w_, g_;
  bool copy_back_ = false;
  const Optimizer* offload_;
};
}  // namespace

void step_as_shards(const OptimizerAlgorithm& algo, const std::vector<torch::Tensor>& params,
                    std::vector<ParamState>& state, double lr, const Optimizer* offload) {
  torch::NoGradGuard ng;
  // a parameter without a gradient is left alone; its state counts only its own updates
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].grad().defined()) continue;
    WholeParameter shard(algo, params[i], i, state[i], offload);
    // offloaded, the step runs on host tensors: its temporaries are host memory too
    std::optional<device_memory::HostScope> host;
    if (offload) host.emplace();
    algo.step_shard(shard, lr);
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
  opt_->check_schedulable();
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
