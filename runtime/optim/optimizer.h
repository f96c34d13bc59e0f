// Optimizers (SGD, AdamW, LAMB, Adafactor: one class each, runtime/optim/<name>.cpp, behind
// OptimizerAlgorithm) and learning-rate schedules (runtime/optim/optimizer.cpp).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/domain.h"
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

// A range of one parameter's flattened values that a shard holds (sharded state).
struct StatePiece {
  size_t param = 0;
  int64_t start = 0, len = 0;  // in the parameter's flattened values
  size_t unit = 0;             // the segment of the shard that holds it (ZeRO: its unit)
  int64_t in_chunk = 0;        // where in that segment
};

// How an optimizer's state kind is laid out, for a strategy that shards it (ZeRO).
enum class StateScope {
  Element,    // a value per element of every parameter: a flat buffer over the shard
  Piece,      // a value per element of the parameters that hold it (kinds_of), kept per
              // parameter over its piece (Adafactor's exp_avg_sq: vectors only)
  Parameter,  // per parameter, in its own shape (state_shape), whole and the same on every
              // rank (Adafactor's row and column factors)
};

// Sums of statistics over the ranks that share a step: the identity on one rank, an
// all-reduce over ZeRO's communicator under ZeRO.
class Reducer {
 public:
  virtual ~Reducer() = default;
  virtual void sum(const torch::Tensor& t) = 0;  // in place
};

// What one step updates: contiguous fp32 segments of flattened parameters (ZeRO: the rank's
// chunk of each unit; one process: a parameter whole), the pieces of parameters in them,
// and the optimizer state for them. The strategy makes it; the optimizer reads and updates it.
class Shard {
 public:
  virtual ~Shard() = default;
  virtual size_t segments() const = 0;
  // Segment s's fp32 weights (the master weights), updated in place.
  virtual torch::Tensor weight(size_t s) = 0;
  // Elements [at, at + len) of segment s's gradient, fp32 and unscaled (a view when it
  // already is).
  virtual torch::Tensor grad(size_t s, int64_t at, int64_t len) = 0;
  // Segment s's slice of an Element kind's state (zeros at first use).
  virtual torch::Tensor state(const std::string& kind, size_t s) = 0;
  // A parameter's Piece or Parameter kind's state (zeros at first use; use it flattened).
  virtual torch::Tensor param_state(const std::string& kind, size_t param) = 0;
  // Segment s is updated: the strategy may send it on (ZeRO's all-gather).
  virtual void stepped(size_t s) = 0;
  // The pieces of parameters the shard holds (at most one per parameter).
  virtual const std::vector<StatePiece>& pieces() const = 0;
  // The parameters this step covers over every rank, and a parameter's (whole) shape.
  virtual const std::vector<size_t>& params() const = 0;
  virtual std::vector<int64_t> shape(size_t param) const = 0;
  virtual int64_t step() const = 0;  // this shard's 1-based update count
  virtual Reducer& reducer() = 0;
};

// A parameter's state in the unsharded optimizer: its tensors by kind, each made at the
// parameter's first update, and how many updates it had.
struct ParamState {
  std::map<std::string, torch::Tensor> t;
  int64_t steps = 0;
};

// One optimizer (runtime/optim/<name>.cpp): its state kinds and its update, of whole
// parameters (one process, DDP) and, where shardable, of a shard (ZeRO).
class OptimizerAlgorithm {
 public:
  virtual ~OptimizerAlgorithm() = default;
  virtual const char* kind() const = 0;  // "adamw": the checkpoint's name
  virtual const char* name() const = 0;  // "AdamW": the messages'
  virtual double base_lr() const = 0;
  virtual std::vector<std::string> state_kinds() const = 0;
  // The kinds a parameter's state holds once it has one (Adafactor: by its rank).
  virtual std::vector<std::string> kinds_of(const torch::Tensor& param) const {
    (void)param;
    return state_kinds();
  }
  virtual std::vector<int64_t> state_shape(const std::string& kind, const std::vector<int64_t>& shape) const {
    (void)kind;
    return shape;
  }
  virtual StateScope scope(const std::string& kind) const {
    (void)kind;
    return StateScope::Element;
  }
  // Whether restored state is fp32 (else the parameter's dtype).
  virtual bool fp32_state() const { return false; }
  // Steps the parameters that have a gradient (`state`: per parameter, model order).
  virtual void step(const std::vector<torch::Tensor>& params, std::vector<ParamState>& state, double lr) = 0;
  // The step count a checkpoint records, and its restore.
  virtual int64_t state_steps(const std::vector<ParamState>& state) const {
    (void)state;
    return 0;
  }
  virtual void restored(int64_t steps) { (void)steps; }
  // Sharding: whether ZeRO can shard it, what it refuses of a model, one step of a shard.
  virtual bool shardable() const { return false; }
  virtual void check_shardable(const Model& model) const { (void)model; }
  virtual void step_shard(Shard& shard, double lr) const;
  // A scheduler's refusal (Adafactor with relative_step sets its own step size).
  virtual void check_schedulable() const {}
};

// The unsharded step of an optimizer written for shards: each parameter that has a gradient
// is a shard of its own (its state, its update count, the identity as the reducer).
void step_as_shards(const OptimizerAlgorithm& algo, const std::vector<torch::Tensor>& params,
                    std::vector<ParamState>& state, double lr, const class Optimizer* offload = nullptr);

// An optimizer over a model's parameters. Its state is made at bind(), after the model is
// placed; the learning rate may be set before. SGD and AdamW compute exactly what
// torch::optim's do (runtime/optim/update.h), in one fused pass per parameter on the CPU.
// A new optimizer: a class implementing OptimizerAlgorithm in runtime/optim/<name>.cpp that
// defines its constructor below.
class Optimizer {
 public:
  Optimizer(std::shared_ptr<Model> model, SGDConfig cfg);        // sgd.cpp
  Optimizer(std::shared_ptr<Model> model, AdamWConfig cfg);      // adamw.cpp
  Optimizer(std::shared_ptr<Model> model, LAMBConfig cfg);       // lamb.cpp
  Optimizer(std::shared_ptr<Model> model, AdafactorConfig cfg);  // adafactor.cpp
  Optimizer(std::shared_ptr<Model> model, std::unique_ptr<OptimizerAlgorithm> algorithm);
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
  std::vector<std::string> state_kinds() const { return algo_->state_kinds(); }
  // The shape of state `kind` for a parameter of `shape` (Adafactor's row and column moments
  // drop the last and the second-to-last dimension; every other kind has the parameter's).
  std::vector<int64_t> state_shape(const std::string& kind, const std::vector<int64_t>& shape) const {
    return algo_->state_shape(kind, shape);
  }
  std::vector<torch::Tensor> state(const std::string& kind) const;
  int64_t state_steps() const;
  // Replaces the state (bound optimizers only); tensors as state() returns them.
  void restore(const std::map<std::string, std::vector<torch::Tensor>>& state, int64_t steps);
  const char* kind() const { return algo_->kind(); }
  // Whether ZeRO can shard this optimizer: each rank steps its own chunk of the flattened
  // parameters. SGD and AdamW are elementwise; Adafactor's factors and RMS are sums over a
  // tensor, which ZeRO all-reduces (parameters of 1 or 2 dimensions); LAMB's per-tensor
  // trust ratio is not sharded.
  bool shardable() const { return algo_->shardable(); }
  const char* name() const { return algo_->name(); }
  // For a sharding strategy: how each kind is laid out, which kinds a parameter holds, what
  // the optimizer refuses of a model, and one step of a shard at the current lr.
  StateScope state_scope(const std::string& kind) const { return algo_->scope(kind); }
  std::vector<std::string> kinds_of(const torch::Tensor& param) const { return algo_->kinds_of(param); }
  void check_shardable(const Model& model) const { algo_->check_shardable(model); }
  void step_shard(Shard& shard) const { algo_->step_shard(shard, lr_); }
  void check_schedulable() const { algo_->check_schedulable(); }
  void step();
  void zero_grad();  // sets gradients to none

  // Offload (Options::offload, docs/memory.md): the state in host memory, each step on fp32
  // host copies of the weights and gradients with the shard kernels (the arithmetic of the
  // step without offload for fp32 weights; fp32 state for 16-bit ones), the weights copied
  // back. Set at prepare, before the state exists (shardable optimizers only).
  void set_offload(bool on) { offload_ = on; }
  bool offload() const { return offload_; }
  // Bytes moved between the device and the host since the last call (the simulator charges
  // their time); ZeRO's shard counts its own through count_host_bytes.
  uint64_t take_host_bytes() {
    const uint64_t b = host_bytes_;
    host_bytes_ = 0;
    return b;
  }
  void count_host_bytes(uint64_t bytes) const { host_bytes_ += bytes; }
  // Parameter i's gradient, already in host memory: the strategy copied it there as it was
  // reduced (bucket by bucket, during the backward; its transfer charged then), so the
  // offloaded step reads it instead of copying the device's. Dropped at zero_grad.
  void set_host_grad(size_t i, torch::Tensor g) {
    if (host_grads_.size() <= i) host_grads_.resize(i + 1);
    host_grads_[i] = std::move(g);
  }
  const torch::Tensor* host_grad(size_t i) const {
    return i < host_grads_.size() && host_grads_[i].defined() ? &host_grads_[i] : nullptr;
  }

 private:
  std::shared_ptr<Model> model_;
  std::unique_ptr<OptimizerAlgorithm> algo_;
  double base_lr_, lr_;
  bool bound_ = false;
  bool offload_ = false;
  mutable uint64_t host_bytes_ = 0;
  std::vector<torch::Tensor> host_grads_;  // set_host_grad's, by parameter
  std::vector<ParamState> state_;  // per parameter, model order
};

// Offload's host memory (docs/memory.md): fp32, pinned when the model is on a GPU, and
// charged to a simulated rank's host budget (device_memory::HostScope).
namespace offload {
torch::Tensor host_zeros(at::IntArrayRef shape, const torch::Device& model_device,
                         c10::ScalarType dtype = torch::kFloat);
// An fp32 copy of t in host memory.
torch::Tensor to_host(const torch::Tensor& t);
// A copy of t in host memory in t's dtype (pinned, and asynchronous, on CUDA: wait_copies
// before reading it): a reduced gradient leaving the device as soon as it is complete.
torch::Tensor copy_to_host(const torch::Tensor& t);
// The asynchronous copies to the host are complete (a CUDA device synchronisation; nothing
// on the CPU).
void wait_copies(const torch::Device& model_device);
}  // namespace offload

// AdamW and LAMB share their hyper-parameters' domains.
template <class C>
void validate_adam_like(const C& c) {
  domain::positive("lr", c.lr);
  domain::half_open("beta1", c.beta1, 0, 1);
  domain::half_open("beta2", c.beta2, 0, 1);
  domain::positive("eps", c.eps);
  domain::non_negative("weight_decay", c.weight_decay);
}

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
