// accel's internal C++ runtime. The C ABI in capi/ wraps it thinly.
// UNSTABLE: this API changes without notice; programs use include/accel/accel.h.
#pragma once

#include <torch/torch.h>
#include <torch/script.h>

#include "runtime/compat.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/status.h"

namespace accel {

enum class Precision { No = 0, BF16 = 1, FP16 = 2 };
enum class DeviceKind { Auto = 0, CPU = 1, CUDA = 2 };
// ZeRO stages as DeepSpeed numbers them (FSDP: SHARD_GRAD_OP ~ Zero2, FULL_SHARD ~ Zero3).
enum class Strategy { None = 0, DDP = 1, Zero1 = 2, Zero2 = 3, Zero3 = 4 };
inline bool is_zero(Strategy s) { return s == Strategy::Zero1 || s == Strategy::Zero2 || s == Strategy::Zero3; }
inline int zero_stage(Strategy s) { return is_zero(s) ? static_cast<int>(s) - 1 : 0; }
const char* strategy_name(Strategy s);
// "no", "ddp", "zero1".."zero3", "shard_grad_op", "full_shard" (any case); nullopt otherwise.
std::optional<Strategy> parse_strategy(const std::string& name);

struct Options {
  Precision precision = Precision::No;
  int gradient_accumulation_steps = 1;
  uint64_t seed = 0;
  DeviceKind device = DeviceKind::Auto;
  int device_index = 0;
  double loss_scale_init = 65536.0;
  double loss_scale_growth_factor = 2.0;
  double loss_scale_backoff_factor = 0.5;
  int loss_scale_growth_interval = 2000;
  int num_threads = 0;
  Strategy strategy = Strategy::None;       // with more than one process: how they share the work
  int64_t bucket_bytes = 25ll << 20;        // DDP: gradient bucket size
};

// Validates options; throws Error(InvalidArgument) naming the bad field.
void validate(const Options& o);

// Rounds a float tensor through float16 and back, in both directions of autograd: the
// forward value and the gradient flowing back are both representable in float16 (values
// beyond 65504 become inf, tiny ones flush to zero), which is what a GPU holding them in
// fp16 would see. Used to emulate fp16 where no fp16 kernels exist.
torch::Tensor round_through_fp16(const torch::Tensor& x);

// ---------------------------------------------------------------------------------------
// Models

// Called by a model around the use of each of its parameter units in forward (ZeRO stage 3
// gathers a unit's weights before and frees them after).
class UnitGate {
 public:
  virtual ~UnitGate() = default;
  virtual void before(size_t unit) = 0;
  // `out` is the unit's output (a backward hook on it gathers the weights again)
  virtual void after(size_t unit, const torch::Tensor& out) = 0;
};

struct ForwardMode {
  bool emulate_fp16 = false;  // round activations/weights/gradients through fp16
  UnitGate* gate = nullptr;   // when set, models that report gates_units() call it per unit
};

class Model {
 public:
  virtual ~Model() = default;
  virtual torch::Tensor forward(const std::vector<torch::Tensor>& inputs, const ForwardMode& mode) = 0;
  virtual void to(const torch::Device& device) = 0;
  virtual void train(bool on) = 0;
  virtual bool is_training() const = 0;
  // Parameters in a stable order with dotted names ("layers.0.weight").
  const std::vector<std::string>& parameter_names() const { return names_; }
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  int64_t num_elements() const;
  // Rounds each parameter's gradient contribution through fp16 while `on` (set by the
  // Accelerator for fp16 emulation on models whose layers it cannot instrument).
  virtual void set_grad_rounding(bool on) { (void)on; }
  // Non-trainable state (e.g. batch-norm running statistics), in a stable order.
  virtual std::vector<torch::Tensor> buffers() const { return {}; }
  // Parameter units: indices of parameters used together (a layer), in forward order.
  // The default is one unit holding everything.
  virtual std::vector<std::vector<size_t>> units() const;
  static std::vector<std::vector<size_t>> units_of_all(size_t nparams);
  // True when forward calls ForwardMode::gate around each unit's use.
  virtual bool gates_units() const { return false; }
  // Writes a TorchScript file of this model with `weights` (fp32, model order). Only
  // models that came from TorchScript can (Unsupported otherwise).
  virtual bool from_torchscript() const { return false; }
  virtual void export_torchscript(const std::vector<torch::Tensor>& weights, const std::string& path) const {
    (void)weights;
    fail(Status::Unsupported, "only a model loaded from TorchScript exports as TorchScript ('", path,
         "'); save the built-in MLP as .safetensors");
  }
  // Whether forward accepts bf16/fp16 parameters with fp32 inputs outside autocast (the
  // built-in MLP casts); ZeRO keeps the working copy in fp32 for models that do not.
  virtual bool casts_weights() const { return false; }

 protected:
  void set_parameters(std::vector<std::string> names, std::vector<torch::Tensor> params) {
    names_ = std::move(names);
    params_ = std::move(params);
  }

 private:
  std::vector<std::string> names_;
  std::vector<torch::Tensor> params_;
};

enum class Activation { ReLU = 0, GELU = 1, Tanh = 2, Sigmoid = 3 };

struct MLPConfig {
  std::vector<int64_t> sizes;  // input, hidden..., output
  Activation activation = Activation::ReLU;
  double dropout = 0.0;
  bool bias = true;
};

// The built-in multi-layer perceptron. `gen` draws the initial weights (like torch.nn.Linear:
// U(-1/sqrt(fan_in), 1/sqrt(fan_in))) and the dropout masks.
std::unique_ptr<Model> make_mlp(const MLPConfig& cfg, at::Generator gen);

// Loads a TorchScript module (IO error when the file is missing, Format error when it is
// not a module with a forward method).
std::unique_ptr<Model> load_torchscript(const std::string& path);

// Writes the model's parameters (fp32, on the host) to `path` as safetensors, atomically.
void save_model_safetensors(const Model& model, const std::string& path);
void save_safetensors(const std::vector<std::string>& names, const std::vector<torch::Tensor>& tensors,
                      const std::string& path);

// ---------------------------------------------------------------------------------------
// Losses (fp32 whatever the input precision; validate shapes, dtypes and class ranges)

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets);
torch::Tensor mse(const torch::Tensor& input, const torch::Tensor& target);

// ---------------------------------------------------------------------------------------
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
void validate(const SGDConfig& c);
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
  std::vector<torch::Tensor> state(const std::string& kind) const;
  int64_t state_steps() const;
  // Replaces the state (bound optimizers only); tensors as state() returns them.
  void restore(const std::map<std::string, std::vector<torch::Tensor>>& state, int64_t steps);
  const char* kind() const { return sgd_ ? "sgd" : adamw_ ? "adamw" : "lamb"; }
  const std::optional<SGDConfig>& sgd_config() const { return sgd_; }
  const std::optional<AdamWConfig>& adamw_config() const { return adamw_; }
  // Whether ZeRO can shard this optimizer: its update is elementwise, so each rank can
  // step its own chunk of the flattened parameters (SGD and AdamW are; LAMB's per-tensor
  // trust ratio is not).
  bool shardable() const { return sgd_.has_value() || adamw_.has_value(); }
  const char* name() const { return sgd_ ? "SGD" : adamw_ ? "AdamW" : "LAMB"; }
  void step();
  void zero_grad();  // sets gradients to none

 private:
  void lamb_step();
  // A parameter's state: AdamW's exp_avg/exp_avg_sq (LAMB's m/v), SGD's momentum buffer,
  // each made at the parameter's first update, and how many updates it had.
  struct ParamState {
    torch::Tensor exp_avg, exp_avg_sq, momentum;
    int64_t steps = 0;
  };
  // Where a state kind ("exp_avg", "m", "momentum_buffer"...) lives in a ParamState.
  static torch::Tensor ParamState::*slot_of(const std::string& kind);

  std::shared_ptr<Model> model_;
  std::optional<SGDConfig> sgd_;
  std::optional<AdamWConfig> adamw_;
  std::optional<LAMBConfig> lamb_;
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

// ---------------------------------------------------------------------------------------
// Data

struct DataLoaderConfig {
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  bool drop_last = false;
  // Sharding across processes, with Accelerate's batch-sampler semantics (used when the
  // loader is prepared on a world of more than one process):
  bool even_batches = true;   // wrap around from the start so every process gets as many full batches
  bool split_batches = false; // each batch is split across processes (batch_size must divide by their number)
};

struct Batch {
  torch::Tensor inputs, targets;  // targets undefined when the loader has none
  bool last = false;              // the last batch of its epoch
  int64_t valid = 0;              // leading rows that are not duplicates added by even_batches
};

// One process's batch in an epoch: sample indices, and how many of them are not
// wrap-around duplicates (they come first).
struct PlannedBatch {
  std::vector<int64_t> indices;
  int64_t valid = 0;
};

// Accelerate's BatchSamplerShard: the batches process `rank` of `world` gets from the
// epoch's sample order. world == 1 gives the plain batches.
std::vector<PlannedBatch> shard_batches(const std::vector<int64_t>& order, int64_t batch_size, bool drop_last,
                                        int rank, int world, bool split_batches, bool even_batches);

// A loader over tensors in host memory. Epoch e's order is torch.randperm(N) drawn from a
// generator seeded with seed + e (as Accelerate's SeedableRandomSampler), so every
// process and every resumed run sees the same order; each process then takes its shard.
class DataLoader {
 public:
  DataLoader(torch::Tensor inputs, torch::Tensor targets, DataLoaderConfig cfg);
  // This process's batches per epoch (the same on every process with even_batches).
  int64_t num_batches();
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }
  int64_t num_samples() const { return inputs_.size(0); }
  const DataLoaderConfig& config() const { return cfg_; }
  void set_epoch(int64_t epoch);
  // Resumes at batch `position` of `epoch` (a checkpoint's data position).
  void restore(int64_t epoch, int64_t position);
  // Makes this loader yield process `rank`'s share of `world` (checks split_batches' divisibility).
  void shard(int rank, int world);
  // Every process's number of batches per epoch (index = rank; one entry when not sharded).
  // They differ only without even_batches; they do not depend on the epoch's order.
  const std::vector<int64_t>& batches_per_process();
  // The next batch on `device`, or nullopt at the end of the epoch (then the epoch advances).
  std::optional<Batch> next(const torch::Device& device);

 private:
  const std::vector<PlannedBatch>& plan();

  torch::Tensor inputs_, targets_;
  DataLoaderConfig cfg_;
  int rank_ = 0, world_ = 1;
  int64_t epoch_ = 0, position_ = 0;
  int64_t plan_epoch_ = -1;
  std::vector<int64_t> per_process_;  // batches_per_process(), computed once per sharding
  std::vector<PlannedBatch> plan_;
};

// ---------------------------------------------------------------------------------------
// The Accelerator

// Dynamic loss scaling with torch.cuda.amp.GradScaler's update rule, written with generic
// tensor ops so it runs on every device.
class LossScaler {
 public:
  LossScaler(bool enabled, double init, double growth, double backoff, int interval)
      : enabled_(enabled), scale_(enabled ? init : 1.0), growth_(growth), backoff_(backoff), interval_(interval) {}
  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  int growth_tracker() const { return tracker_; }
  void restore(double scale, int tracker) {
    scale_ = scale;
    tracker_ = tracker;
  }
  // Multiplies every defined gradient by 1/scale; returns true when any holds inf/NaN.
  bool unscale(const std::vector<torch::Tensor>& params) const;
  // After a real step: back off on overflow, else grow every `interval` clean steps.
  void update(bool found_inf);

 private:
  bool enabled_;
  double scale_;
  double growth_, backoff_;
  int interval_;
  int tracker_ = 0;
};

struct StepResult {
  bool stepped = false, skipped = false, sync_step = false;
  double loss_scale = 1.0;
  int64_t optimizer_steps = 0, micro_steps = 0;
};

class ParallelStrategy;

// Where save_state puts checkpoints when it is given no directory: checkpoints/checkpoint_N
// under `dir` (N counting up from 0), keeping the newest `total_limit` (0 = all).
struct ProjectConfig {
  std::string dir;
  int total_limit = 0;
};

class Accelerator {
 public:
  // `comm` connects the context to its world (the simulator's rank, later gloo or nccl);
  // null means a single process (the local backend).
  explicit Accelerator(const Options& opts, std::shared_ptr<comm::Communicator> comm = nullptr);
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  comm::Communicator& comm() { return *comm_; }
  // The simulator's clock when the context runs on a simulated rank; null otherwise.
  comm::ComputeClock* clock() { return clock_; }
  int process_index() const { return comm_->rank(); }
  int num_processes() const { return comm_->size(); }
  int local_process_index() const { return comm_->local_rank(); }

  // Process utilities (Accelerate's names). Tensors go through the host; results are
  // placed on this context's device. Every process must make the same calls in order.
  // gather: concatenation along dim 0 of every process's tensor (same shape everywhere).
  torch::Tensor gather(const torch::Tensor& t);
  // gather_for_metrics: gather, minus the rows that even_batches duplicated in the last
  // batch a prepared loader yielded, so every sample counts once.
  torch::Tensor gather_for_metrics(const torch::Tensor& t);
  torch::Tensor broadcast(const torch::Tensor& t, int root);
  torch::Tensor reduce(const torch::Tensor& t, comm::RedOp op);
  // pads dimension `dim` to the largest size among the processes with `value`
  torch::Tensor pad_across_processes(const torch::Tensor& t, int64_t dim, double value, bool pad_first);
  // reseeds the context's generator and libtorch's default one (seed + rank if per_process)
  void set_seed(uint64_t seed, bool per_process);

  const Options& options() const { return opts_; }
  const torch::Device& device() const { return device_; }
  Precision precision() const { return opts_.precision; }
  // fp16 requested where the device has no fp16 kernels: emulated by rounding.
  bool emulate_fp16() const { return opts_.precision == Precision::FP16 && device_.is_cpu(); }
  at::Generator& generator() { return gen_; }

  void prepare(const std::shared_ptr<Model>& model, const std::shared_ptr<Optimizer>& opt,
               const std::shared_ptr<Scheduler>& sched, const std::shared_ptr<DataLoader>& loader);
  bool prepared(const DataLoader* loader) const;

  torch::Tensor forward(Model& model, const std::vector<torch::Tensor>& inputs);
  std::optional<Batch> next_batch(DataLoader& loader);

  void backward(const torch::Tensor& loss);
  bool sync_gradients() const { return sync_; }
  // Norm before clipping; NaN on accumulation micro-steps (nothing done).
  double clip_grad_norm(double max_norm);
  StepResult step();
  double loss_scale() const { return scaler_.scale(); }
  int64_t optimizer_steps() const { return optimizer_steps_; }
  int64_t micro_steps() const { return micro_steps_; }

  // The model's parameters whole, fp32, on the host. Under ZeRO a collective: every
  // process must call it (the shards are gathered).
  std::vector<torch::Tensor> full_parameters(const Model& model);
  // Writes the model's weights as safetensors (the main process writes; under ZeRO every
  // process must call it).
  void save_model(const Model& model, const std::string& path);
  int zero_stage_active() const;  // 0 unless a ZeRO engine shards the prepared model
  bool shards_parameters() const { return zero_stage_active() > 0; }

  // Checkpoints (runtime/checkpoint.cpp, docs/checkpoints.md). Collectives: every process
  // calls them. save_state writes the whole training state to `dir` (empty: the next
  // automatic name under the project) atomically and returns the directory written;
  // load_state restores it (empty: the latest checkpoint of the project), on any number
  // of processes and any strategy.
  void set_project(const ProjectConfig& p);
  std::string save_state(const std::string& dir);
  std::string load_state(const std::string& dir);

 private:
  // Every process's {dtype, ndim, extra, dims[16]} (19 int64 per process, process order),
  // after checking that dtypes and ranks agree (InvalidArgument naming the processes).
  static constexpr size_t kRow = 19;  // describe_across's row: {dtype, ndim, extra, dims[16]}
  std::vector<int64_t> describe_across(const torch::Tensor& x, int64_t extra);
  // Process 0's outcome on every process: with `status` not Ok there, every process throws
  // Error(status, process 0's message). A collective (a no-op on one process).
  void agree(Status status, const std::string& message);
  bool unscale_once();  // returns found_inf; unscales at most once per real step

  // Uneven shares (even_batches off) make the processes with more batches issue collectives
  // the others never will. Before a collective caused by a batch of `last_loader_` (DDP's
  // and ZeRO's backward, ZeRO-3's forward) this fails on a process that is past what the
  // process with the fewest batches will make; the processes with fewer fail at the end of
  // such an epoch (next_batch): every process gets the error, none waits forever.
  void check_even_collectives();
  // The collectives a training loop has made by batch `position` (1-based) of an epoch of
  // `batches`; at position == batches, the epoch's total.
  int64_t collectives_through(int64_t position, int64_t batches) const;
  int64_t collectives_per_epoch(int64_t batches) const { return collectives_through(batches, batches); }
  std::string uneven_message(DataLoader& loader, bool ahead);  // ahead: this process is the longer one
  DataLoader* last_loader_ = nullptr;  // the prepared loader that yielded the last batch (until its epoch ends)
  int64_t last_position_ = 0;          // that batch's 1-based position in its epoch
  std::vector<const DataLoader*> epoch_collectives_;  // loaders whose batches made collectives in their current epoch
  ProjectConfig project_;
  int64_t fwd_rows_ = 0;  // rows of the last forward's first input (compute estimates)

  Options opts_;
  std::shared_ptr<comm::Communicator> comm_;
  torch::Device device_;
  at::Generator gen_;
  LossScaler scaler_;
  std::shared_ptr<Model> model_;
  std::shared_ptr<Optimizer> opt_;
  std::shared_ptr<Scheduler> sched_;
  std::vector<std::shared_ptr<DataLoader>> loaders_;
  comm::ComputeClock* clock_ = nullptr;         // the simulator's clock; null on real backends
  std::unique_ptr<ParallelStrategy> strategy_;  // how the processes share the work (runtime/strategy/)

  int64_t accum_count_ = 0;       // micro-batches since the last real step
  bool end_of_data_ = false;      // the last batch yielded was the last of its epoch
  int64_t last_rows_ = -1, last_valid_ = -1;  // the last prepared batch: rows, non-duplicate rows
  bool sync_ = false;             // the current micro-batch completes the gradients
  bool pending_ = false;          // backward ran since the last step
  bool unscaled_ = false;         // gradients of this step already unscaled
  bool found_inf_ = false;
  int64_t optimizer_steps_ = 0, micro_steps_ = 0;
};

// The communicator's element type for a tensor's dtype (Unsupported for bool, complex...).
comm::DataType comm_dtype(c10::ScalarType t);

// Human-readable "[32, 64]".
std::string shape_str(const torch::Tensor& t);

}  // namespace accel
