// The strategy seam's shared parts: the defaults of ParallelStrategy (one process's view of
// the gradients), the factory, the single-process strategy, and the flat-buffer helpers that
// DDP and ZeRO share.
#include "runtime/strategy/strategy.h"

#include <cmath>

#include "comm/tensors.h"
#include "runtime/strategy/ddp.h"
#include "runtime/strategy/zero.h"

namespace accel {

// ---------------------------------------------------------------------------------------
// Defaults: the gradients live whole in the parameters' .grad

bool ParallelStrategy::unscale(const LossScaler& scaler) {
  const bool inf = scaler.unscale(model_->parameters());
  if (scaler.enabled()) scale_host_grads(scaler.inv_scale());
  return inf;
}

void ParallelStrategy::scale_gradients(double f) {
  torch::NoGradGuard ng;
  for (const auto& p : model_->parameters())
    if (p.grad().defined()) p.grad().mul_(f);
  scale_host_grads(f);
}

double ParallelStrategy::clip(double max_norm) {
  std::vector<torch::Tensor> grads, norms;
  for (const auto& p : model_->parameters())
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  norms.reserve(grads.size());
  for (const auto& g : grads) norms.push_back(g.norm(2));
  const double total = torch::stack(norms).norm(2).item<double>();
  if (!std::isfinite(total)) return total;
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    for (auto& g : grads) g.mul_(coef);
    scale_host_grads(coef);
  }
  return total;
}

void ParallelStrategy::grads_to_host(const torch::Tensor& flat, const std::vector<size_t>& params,
                                     const std::vector<int64_t>& offsets, const comm::Work* after) {
  host_grads_.push_back(HostGrads{grad_to_host_posted(flat, clock_, after), params, offsets});
}

torch::Tensor grad_to_host_posted(const torch::Tensor& g, comm::ComputeClock* clock, const comm::Work* after) {
  torch::NoGradGuard ng;
  torch::Tensor host = offload::copy_to_host(g);
  if (clock)
    clock->post_host_transfer(static_cast<uint64_t>(g.numel()) * g.element_size(), "offload: gradients to the host",
                              after);
  return host;
}

void ParallelStrategy::scale_host_grads(double f) {
  torch::NoGradGuard ng;
  for (auto& h : host_grads_) h.host.mul_(f);
}

void ParallelStrategy::give_host_grads(Optimizer& opt) const {
  const auto& ps = model_->parameters();
  for (const auto& h : host_grads_)
    for (size_t i = 0; i < h.params.size(); ++i) {
      const torch::Tensor& p = ps[h.params[i]];
      opt.set_host_grad(h.params[i], h.host.narrow(0, h.offsets[i], p.numel()).view(p.sizes()));
    }
}

std::vector<torch::Tensor> ParallelStrategy::full_parameters() {
  std::vector<torch::Tensor> out;
  for (const auto& p : model_->parameters()) out.push_back(p.detach().to(torch::kCPU, torch::kFloat, false, true));
  return out;
}

torch::Tensor ParallelStrategy::full_gradient(size_t index) {
  const torch::Tensor& p = model_->parameters().at(index);
  const torch::Tensor g = p.grad();
  if (!g.defined()) return torch::zeros(p.sizes(), torch::TensorOptions().dtype(torch::kFloat));
  return g.detach().to(torch::kCPU, torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
}

void ParallelStrategy::restore(const std::map<std::string, std::vector<torch::Tensor>>& full, int64_t steps,
                               Optimizer* opt) {
  torch::NoGradGuard ng;
  const auto& params = model_->parameters();
  const auto& weights = full.at("weight");
  for (size_t i = 0; i < params.size(); ++i) params[i].detach().copy_(weights[i]);
  if (!opt) return;
  opt->zero_grad();
  std::map<std::string, std::vector<torch::Tensor>> state;
  for (const auto& k : opt->state_kinds())
    if (auto it = full.find(k); it != full.end()) state[k] = it->second;
  opt->restore(state, steps);
}

// ---------------------------------------------------------------------------------------
// One process, or every process on its own: no communication

namespace {
class SingleProcess final : public ParallelStrategy {
 public:
  using ParallelStrategy::ParallelStrategy;
  ~SingleProcess() override { *owner_ = nullptr; }
  void prepare(Model& model) override {
    model_ = &model;
    // fp16 requested where the device has no fp16 kernels: emulated by rounding
    if (opts_.precision == Precision::FP16 && device_.is_cpu()) model.set_grad_rounding(true);
    // offload: each gradient to the host as soon as the backward that completes it has it
    if (offloads_grads())
      for (size_t k = 0; k < model.parameters().size(); ++k)
        accumulators_.push_back(on_grad_accumulated(model.parameters()[k], [owner = owner_, k] {
          if (SingleProcess* s = *owner) s->accumulated(k);
        }));
  }
  Cadence cadence() const override { return Cadence::Never; }
  void backward(const torch::Tensor& scaled_loss, bool sync, int64_t rows) override {
    rows_ = rows;
    charged_ = 0.0;
    copying_ = sync && offloads_grads();  // the backward that completes the gradients
    struct Done {
      SingleProcess& s;
      ~Done() { s.copying_ = false; }
    } done{*this};
    scaled_loss.backward();
    // a dense layer: 2 FLOPs per weight and row for each of dX and dW (the parameters
    // copied to the host were charged as their gradients came)
    charge(4.0 * static_cast<double>(rows) * static_cast<double>(model_->num_elements()) - charged_, "backward");
  }

 private:
  void accumulated(size_t k) {
    if (!copying_) return;
    const torch::Tensor& p = model_->parameters()[k];
    if (!p.grad().defined()) return;
    const double flops = 4.0 * static_cast<double>(rows_) * static_cast<double>(p.numel());
    charge(flops, "backward");  // the clock at this gradient, for its copy to start from
    charged_ += flops;
    grads_to_host(p.grad().reshape({-1}), {k}, {0}, nullptr);
  }
  std::vector<compat::GradAccumulator> accumulators_;  // keeps the post hooks alive
  bool copying_ = false;
  int64_t rows_ = 0;
  double charged_ = 0.0;
  std::shared_ptr<SingleProcess*> owner_ = std::make_shared<SingleProcess*>(this);
};
}  // namespace

// ---------------------------------------------------------------------------------------
// The factory: one line per strategy

std::unique_ptr<ParallelStrategy> make_strategy(const StrategySetup& s) {
  const bool many = s.comm.size() > 1;
  switch (s.options.strategy) {
    case Strategy::None: return std::make_unique<SingleProcess>(s);
    case Strategy::DDP: return many ? make_ddp(s) : std::make_unique<SingleProcess>(s);
    case Strategy::Zero1: return make_zero(s, 1);
    case Strategy::Zero2: return make_zero(s, 2);
    case Strategy::Zero3: return make_zero(s, 3);
  }
  fail(Status::InvalidArgument, "strategy must be in [0, 4] (0 no, 1 DDP, 2-4 ZeRO stages 1-3), got ",
       static_cast<int>(s.options.strategy));
}

// ---------------------------------------------------------------------------------------
// Hooks and flat buffers

namespace {
struct CallbackPostHook final : torch::autograd::FunctionPostHook {
  explicit CallbackPostHook(std::function<void()> f) : fn(std::move(f)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn();
    return outputs;
  }
  std::function<void()> fn;
};
}  // namespace

compat::GradAccumulator on_grad_accumulated(const torch::Tensor& p, std::function<void()> fn) {
  compat::GradAccumulator acc = torch::autograd::impl::grad_accumulator(p);
  ACCEL_CHECK(static_cast<bool>(acc), Status::Internal, "a parameter without a gradient accumulator (does it require grad?)");
  acc->add_post_hook(std::make_unique<CallbackPostHook>(std::move(fn)));
  return acc;
}

void broadcast_from_rank0(comm::Communicator& comm, Model& model) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> state = model.parameters();
  for (const auto& b : model.buffers()) state.push_back(b);
  for (const auto& p : state) {  // in place on the parameter's device where the backend reaches it
    torch::Tensor t = p.detach();
    if (t.is_contiguous()) {
      comm::broadcast(comm, t, 0)->wait();
    } else {
      torch::Tensor c = t.contiguous();
      comm::broadcast(comm, c, 0)->wait();
      t.copy_(c);
    }
  }
}

std::vector<std::vector<size_t>> reverse_buckets(const std::vector<torch::Tensor>& params, int64_t bucket_bytes) {
  std::vector<std::vector<size_t>> groups;
  std::vector<size_t> cur;
  int64_t bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const int64_t b = params[k].numel() * 4;
    if (!cur.empty() && bytes + b > bucket_bytes) {
      groups.push_back(std::move(cur));
      cur.clear();
      bytes = 0;
    }
    cur.push_back(k);
    bytes += b;
  }
  if (!cur.empty()) groups.push_back(std::move(cur));
  return groups;
}

FlatLayout FlatLayout::of(const std::vector<size_t>& group, const std::vector<torch::Tensor>& params) {
  FlatLayout f;
  for (size_t k : group) {
    f.params.push_back(k);
    f.offsets.push_back(f.numel);
    f.numel += params[k].numel();
  }
  return f;
}

void grad_into_slot(const torch::Tensor& p, const torch::Tensor& flat, int64_t offset) {
  torch::Tensor view = flat.narrow(0, offset, p.numel()).view(p.sizes());
  if (p.grad().defined() && p.grad().data_ptr() == view.data_ptr()) return;
  if (p.grad().defined())
    view.copy_(p.grad());
  else
    view.zero_();
  const_cast<torch::Tensor&>(p).mutable_grad() = view;
}

}  // namespace accel
