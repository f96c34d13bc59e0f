// AdamW, exactly torch::optim::AdamW (decoupled weight decay, bias corrections per tensor's
// update count). Elementwise: ZeRO steps shards with it. The arithmetic is adamw_update's
// (update.h).
#include "runtime/optim/optimizer.h"
#include "runtime/optim/update.h"

namespace accel {

void validate(const AdamWConfig& c) { validate_adam_like(c); }

namespace {

class AdamW final : public OptimizerAlgorithm {
 public:
  explicit AdamW(const AdamWConfig& c) : c_(c) { validate(c_); }
  const char* kind() const override { return "adamw"; }
  const char* name() const override { return "AdamW"; }
  double base_lr() const override { return c_.lr; }
  std::vector<std::string> state_kinds() const override { return {"exp_avg", "exp_avg_sq"}; }

  void step(const std::vector<torch::Tensor>& params, std::vector<ParamState>& state, double lr) override {
    torch::NoGradGuard ng;
    // as libtorch's optimizers: a parameter without a gradient is left alone, and its state
    // (created at its first update) counts only its own updates
    for (size_t i = 0; i < params.size(); ++i) {
      const torch::Tensor& p = params[i];
      if (!p.grad().defined()) continue;
      ParamState& st = state[i];
      torch::Tensor& exp_avg = st.t["exp_avg"];
      torch::Tensor& exp_avg_sq = st.t["exp_avg_sq"];
      if (!exp_avg.defined()) {
        exp_avg = torch::zeros_like(p, torch::MemoryFormat::Preserve);
        exp_avg_sq = torch::zeros_like(p, torch::MemoryFormat::Preserve);
      }
      adamw_update(c_, lr, ++st.steps, p, p.grad(), exp_avg, exp_avg_sq);
    }
  }
  int64_t state_steps(const std::vector<ParamState>& state) const override {
    for (const auto& st : state)  // the first parameter's count that has one (libtorch's AdamW)
      for (const auto& [k, t] : st.t)
        if (t.defined()) return st.steps;
    return 0;
  }

  bool shardable() const override { return true; }
  // Elementwise: each segment of the shard as a tensor of its own, at the shard's step count.
  void step_shard(Shard& shard, double lr) const override {
    for (size_t s = 0; s < shard.segments(); ++s) {
      torch::Tensor exp_avg = shard.state("exp_avg", s), exp_avg_sq = shard.state("exp_avg_sq", s);
      torch::Tensor p = shard.weight(s);
      torch::Tensor g = shard.grad(s, 0, p.numel());  // a copy only for 16-bit or scaled gradients
      adamw_update(c_, lr, shard.step(), p, g, exp_avg, exp_avg_sq);
      shard.stepped(s);
    }
  }

 private:
  AdamWConfig c_;
};

}  // namespace

Optimizer::Optimizer(std::shared_ptr<Model> model, AdamWConfig cfg)
    : Optimizer(std::move(model), std::make_unique<AdamW>(cfg)) {}

}  // namespace accel
