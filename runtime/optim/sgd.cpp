// SGD, exactly torch::optim::SGD (momentum, dampening, Nesterov, weight decay). Elementwise:
// ZeRO steps shards with it. The arithmetic is sgd_update's (update.h).
#include "runtime/optim/optimizer.h"
#include "runtime/optim/update.h"

namespace accel {

void validate(const SGDConfig& c) {
  domain::positive("lr", c.lr);
  domain::non_negative("momentum", c.momentum);
  domain::closed("dampening", c.dampening, 0, 1);
  domain::non_negative("weight_decay", c.weight_decay);
  ACCEL_CHECK(!c.nesterov || (c.momentum > 0 && c.dampening == 0), Status::InvalidArgument,
              "nesterov needs momentum > 0 and dampening 0, got momentum ", c.momentum, " and dampening ", c.dampening);
}

namespace {

class SGD final : public OptimizerAlgorithm {
 public:
  explicit SGD(const SGDConfig& c) : c_(c) { validate(c_); }
  const char* kind() const override { return "sgd"; }
  const char* name() const override { return "SGD"; }
  double base_lr() const override { return c_.lr; }
  std::vector<std::string> state_kinds() const override {
    if (c_.momentum != 0) return {"momentum_buffer"};
    return {};
  }

  void step(const std::vector<torch::Tensor>& params, std::vector<ParamState>& state, double lr) override {
    torch::NoGradGuard ng;
    // as libtorch's optimizers: a parameter without a gradient is left alone, and its state
    // (created at its first update) counts only its own updates
    for (size_t i = 0; i < params.size(); ++i) {
      const torch::Tensor& p = params[i];
      if (!p.grad().defined()) continue;
      ParamState& st = state[i];
      torch::Tensor buf;
      const bool momentum = c_.momentum != 0;
      if (momentum) buf = st.t["momentum_buffer"];
      const bool first = momentum && !buf.defined();
      if (first) buf = st.t["momentum_buffer"] = torch::empty_like(p, torch::MemoryFormat::Preserve);
      sgd_update(c_, lr, p, p.grad(), buf, first);
      ++st.steps;
    }
  }

  bool shardable() const override { return true; }
  // Elementwise: each segment of the shard as a tensor of its own; the momentum buffer is new
  // at the shard's first step.
  void step_shard(Shard& shard, double lr) const override {
    const bool momentum = c_.momentum != 0;
    for (size_t s = 0; s < shard.segments(); ++s) {
      torch::Tensor p = shard.weight(s);
      torch::Tensor g = shard.grad(s, 0, p.numel());  // a copy only for 16-bit or scaled gradients
      sgd_update(c_, lr, p, g, momentum ? shard.state("momentum_buffer", s) : torch::Tensor(), shard.step() == 1);
      shard.stepped(s);
    }
  }

 private:
  SGDConfig c_;
};

}  // namespace

Optimizer::Optimizer(std::shared_ptr<Model> model, SGDConfig cfg) : Optimizer(std::move(model), std::make_unique<SGD>(cfg)) {}

}  // namespace accel
