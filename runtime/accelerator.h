// The Accelerator: one training context (runtime/accelerator.cpp; checkpoints in
// checkpoint.cpp). It places the model and the batches, runs forward under autocast and
// backward with loss scaling and accumulation, and hands the processes' share of the work
// to its strategy (runtime/strategy/).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/data.h"
#include "runtime/model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/precision.h"

namespace accel {

struct StepResult {
  bool stepped = false, skipped = false, sync_step = false;
  double loss_scale = 1.0;
  int64_t optimizer_steps = 0, micro_steps = 0;
};

class ParallelStrategy;

// Where save_state puts checkpoints when it is given no directory: checkpoints/checkpoint_N
// under `dir` (N counting up from 0), keeping the newest `total_limit` (0 = all). A project
// belongs to one run at a time: set_project takes an advisory lock on `dir`/.accel.lock (on
// process 0, for the whole world) and a second run fails there, naming the first.
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
  bool prepared(const Model* model) const { return model && model == model_.get(); }
  bool has_optimizer() const { return opt_ != nullptr; }
  // Real processes: every process publishes what it is about to prepare (strategy,
  // precision, accumulation, model shapes, optimizer, loader) in the world's store and checks
  // that the others publish the same, so a mismatch is an error naming the processes and the
  // fields on every process instead of a hang or garbage in the first collective.
  void agree_on_configuration(const Model* m, const Optimizer* o, const DataLoader* l);

  // `cache`: a causal LM's KV cache (generation; runtime/models/transformer.h).
  torch::Tensor forward(Model& model, const std::vector<torch::Tensor>& inputs, lm_detail::KVCache* cache = nullptr);
  std::optional<Batch> next_batch(DataLoader& loader);

  // `tokens` >= 0: the loss is a mean over that many tokens (a causal-LM loss), and the step's
  // gradients become those of the mean over every token of the global batch: each such
  // micro-batch backpropagates its sum, and when the gradients are complete they are
  // multiplied by processes / (the tokens of every micro-batch of every process), counted
  // with one all-reduce. Every loss of one accumulation window is of one kind
  // (InvalidArgument otherwise).
  void backward(const torch::Tensor& loss, int64_t tokens = -1);
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
  // Parameter `index`'s gradient as the next step would use it (fp32, host; unscaled, a mean
  // over the accumulation's losses, averaged over the processes; a collective under ZeRO).
  // InvalidState for a model prepare did not bind, with no backward since the last step, or
  // in the middle of an accumulation; InvalidArgument for an index out of range.
  torch::Tensor full_gradient(const Model& model, size_t index);
  // Writes the model's weights as safetensors (the main process writes; under ZeRO every
  // process must call it).
  void save_model(const Model& model, const std::string& path);
  // Writes a causal LM as a Hugging Face directory (runtime/models/transformer.h), in the
  // dtype its parameters were made in; the main process writes, every process calls it.
  void save_pretrained(const Model& model, const std::string& dir);
  // Writes a LoRA model's adapters in PEFT's format (a collective like save_pretrained).
  void save_adapter(const Model& model, const std::string& dir);
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
  // A save of the model's whole parameters: gathers them (a collective under ZeRO), runs
  // write(params) on the main process, and gives every process its outcome.
  void write_on_main(const Model& model, const std::function<void(std::vector<torch::Tensor>&)>& write);
  bool unscale_once();  // returns found_inf; unscales at most once per real step
  // Completes the step's gradients once: unscales them, then (token-mean losses) divides by
  // the global batch's token count. Returns found_inf.
  bool finish_gradients();

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
  int project_lock_ = -1;  // process 0: the descriptor holding PROJECT/.accel.lock (one run per project)
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
  int window_kind_ = 0;           // this accumulation window's losses: 0 none yet, 1 plain means, 2 token means
  int64_t window_tokens_ = 0;     // tokens of this window's token-mean losses on this process
  bool tokens_applied_ = false;   // the global token count has divided this step's gradients
  int64_t optimizer_steps_ = 0, micro_steps_ = 0;
};

}  // namespace accel
