// Optimizers (SGD, AdamW, LAMB, Adafactor) and learning-rate schedules (runtime/optim/optimizer.cpp).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/model.h"

namespace accel {

// Optimizers and schedulers

struct SGDConfig {
  double lr = 0.01, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
};
struct AdamWConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};
// LAMB (You et al., 2019): Adam's update plus decoupled weight decay, rescaled per tensor by
// the trust ratio ||w|| / ||update|| (1 where either norm is 0).
struct LAMBConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-6, weight_decay = 0.01;
};
// Adafactor (Shazeer & Stern, 2018) exactly as transformers' `Adafactor`: second moments
// factored into row and column means for tensors of 2 or more dimensions (full for vectors),
// updates clipped by their RMS, optional first moment (beta1), and the step size either `lr`
// or, with relative_step, min(1e-2 (warmup_init: 1e-6 * step), 1 / sqrt(step)), times the
// parameter's RMS (at least eps2) with scale_parameter.
struct AdafactorConfig {
  double lr = 0.0;  // 0 with relative_step (transformers' lr=None); > 0 without
  double eps1 = 1e-30, eps2 = 1e-3;
  double clip_threshold = 1.0;
  double decay_rate = -0.8;
  double beta1 = 0.0;  // 0: no first moment (transformers' beta1=None)
  double weight_decay = 0.0;
  bool scale_parameter = true, relative_step = true, warmup_init = false;
};
void validate(const SGDConfig& c);
void validate(const AdafactorConfig& c);
void validate(const AdamWConfig& c);
void validate(const LAMBConfig& c);

// An optimizer over a model's parameters. Its state is made at bind(), after the model is
// placed; the learning rate may be set before. SGD and AdamW compute exactly what
// torch::optim's do (runtime/optim/update.h), in one fused pass per parameter on the CPU.
class Optimizer {
 public:
  Optimizer(std::shared_ptr<Model> model, SGDConfig cfg);
  Optimizer(std::shared_ptr<Model> model, AdamWConfig cfg);
  Optimizer(std::shared_ptr<Model> model, LAMBConfig cfg);
  Optimizer(std::shared_ptr<Model> model, AdafactorConfig cfg);
  const std::shared_ptr<Model>& model() const { return model_; }
  double base_lr() const { return base_lr_; }
  double lr() const { return lr_; }
  void set_lr(double lr);
  void bind();  // builds the optimizer's state over the model's (placed) parameters
  bool bound() const { return bound_; }
  // The optimizer's state for checkpoints: per parameter (model order) and kind, fp32
  // tensors of the parameter's shape ("exp_avg", "exp_avg_sq" for AdamW; "momentum_buffer"
  // for SGD with momentum; "m", "v" for LAMB), undefined where not created yet; and the
  // number of steps taken. kinds() lists the kind names for this optimizer.
  std::vector<std::string> state_kinds() const;
  // The shape of state `kind` for a parameter of `shape` (Adafactor's row and column moments
  // drop the last and the second-to-last dimension; every other kind has the parameter's).
  std::vector<int64_t> state_shape(const std::string& kind, const std::vector<int64_t>& shape) const;
  std::vector<torch::Tensor> state(const std::string& kind) const;
  int64_t state_steps() const;
  // Replaces the state (bound optimizers only); tensors as state() returns them.
  void restore(const std::map<std::string, std::vector<torch::Tensor>>& state, int64_t steps);
  const char* kind() const { return sgd_ ? "sgd" : adamw_ ? "adamw" : lamb_ ? "lamb" : "adafactor"; }
  const std::optional<AdafactorConfig>& adafactor_config() const { return adafactor_; }
  const std::optional<SGDConfig>& sgd_config() const { return sgd_; }
  const std::optional<AdamWConfig>& adamw_config() const { return adamw_; }
  // Whether ZeRO can shard this optimizer: each rank steps its own chunk of the flattened
  // parameters. SGD and AdamW are elementwise; Adafactor's factors and RMS are sums over a
  // tensor, which ZeRO all-reduces (parameters of 1 or 2 dimensions); LAMB's per-tensor
  // trust ratio is not sharded.
  bool shardable() const { return sgd_.has_value() || adamw_.has_value() || adafactor_.has_value(); }
  const char* name() const { return sgd_ ? "SGD" : adamw_ ? "AdamW" : lamb_ ? "LAMB" : "Adafactor"; }
  void step();
  void zero_grad();  // sets gradients to none

 private:
  void lamb_step();
  void adafactor_step();
  // The kinds parameter i's state holds once it has one (Adafactor: by its rank).
  std::vector<std::string> kinds_of(size_t i) const;
  // A parameter's state: AdamW's exp_avg/exp_avg_sq (LAMB's m/v), SGD's momentum buffer,
  // each made at the parameter's first update, and how many updates it had.
  struct ParamState {
    torch::Tensor exp_avg, exp_avg_sq, momentum;
    torch::Tensor row, col;  // Adafactor's factored second moments
    int64_t steps = 0;
  };
  // Where a state kind ("exp_avg", "m", "momentum_buffer"...) lives in a ParamState.
  static torch::Tensor ParamState::*slot_of(const std::string& kind);

  std::shared_ptr<Model> model_;
  std::optional<SGDConfig> sgd_;
  std::optional<AdamWConfig> adamw_;
  std::optional<LAMBConfig> lamb_;
  std::optional<AdafactorConfig> adafactor_;
  double base_lr_, lr_;
  bool bound_ = false;
  std::vector<ParamState> state_;  // per parameter, model order
  int64_t lamb_steps_ = 0;
};

enum class Schedule { Constant = 0, Linear = 1, Cosine = 2 };
struct SchedulerConfig {
  Schedule kind = Schedule::Constant;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
  double min_lr_ratio = 0.0;
};
void validate(const SchedulerConfig& c);

// lr(step) = base_lr * factor(step); the factors of transformers' schedules with warmup.
double schedule_factor(const SchedulerConfig& c, int64_t step);

class Scheduler {
 public:
  Scheduler(std::shared_ptr<Optimizer> opt, SchedulerConfig cfg);
  void step();  // one real optimizer step happened
  int64_t steps() const { return steps_; }
  void restore(int64_t steps);  // as after `steps` real steps
  const std::shared_ptr<Optimizer>& optimizer() const { return opt_; }

 private:
  std::shared_ptr<Optimizer> opt_;
  SchedulerConfig cfg_;
  int64_t steps_ = 0;
};

}  // namespace accel
