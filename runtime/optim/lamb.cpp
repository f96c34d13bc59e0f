// LAMB (You et al., 2019): Adam's update plus decoupled weight decay, rescaled per tensor by
// the trust ratio ||w|| / ||update||. Not shardable: the trust ratio needs whole tensors.
#include <cmath>

#include "runtime/optim/optimizer.h"

namespace accel {

void validate(const LAMBConfig& c) { validate_adam_like(c); }

namespace {

class LAMB final : public OptimizerAlgorithm {
 public:
  explicit LAMB(const LAMBConfig& c) : c_(c) { validate(c_); }
  const char* kind() const override { return "lamb"; }
  const char* name() const override { return "LAMB"; }
  double base_lr() const override { return c_.lr; }
  std::vector<std::string> state_kinds() const override { return {"m", "v"}; }
  bool fp32_state() const override { return true; }
  int64_t state_steps(const std::vector<ParamState>& state) const override {
    (void)state;
    return steps_;
  }
  void restored(int64_t steps) override { steps_ = steps; }

  void step(const std::vector<torch::Tensor>& params, std::vector<ParamState>& state, double lr) override {
    const LAMBConfig& c = c_;
    torch::NoGradGuard ng;
    ++steps_;
    const double bc1 = 1 - std::pow(c.beta1, static_cast<double>(steps_));
    const double bc2 = 1 - std::pow(c.beta2, static_cast<double>(steps_));
    for (size_t i = 0; i < params.size(); ++i) {
      const torch::Tensor& p = params[i];
      if (!p.grad().defined()) continue;
      torch::Tensor g = p.grad().to(torch::kFloat);
      ParamState& st = state[i];
      torch::Tensor& m = st.t["m"];
      torch::Tensor& v = st.t["v"];
      if (!m.defined()) {
        m = torch::zeros_like(p, torch::kFloat);
        v = torch::zeros_like(p, torch::kFloat);
      }
      m.mul_(c.beta1).add_(g, 1 - c.beta1);
      v.mul_(c.beta2).addcmul_(g, g, 1 - c.beta2);
      torch::Tensor update = (m / bc1) / ((v / bc2).sqrt() + c.eps);
      torch::Tensor w = p.detach().to(torch::kFloat);
      if (c.weight_decay != 0) update.add_(w, c.weight_decay);
      // the trust ratio needs the whole tensor's norms: why ZeRO cannot shard LAMB
      const double wn = w.norm().item<double>(), un = update.norm().item<double>();
      const double trust = wn > 0 && un > 0 ? wn / un : 1.0;
      p.detach().add_(update.to(p.scalar_type()), -lr * trust);
    }
  }

 private:
  LAMBConfig c_;
  int64_t steps_ = 0;  // one count for every tensor
};

}  // namespace

Optimizer::Optimizer(std::shared_ptr<Model> model, LAMBConfig cfg) : Optimizer(std::move(model), std::make_unique<LAMB>(cfg)) {}

}  // namespace accel
