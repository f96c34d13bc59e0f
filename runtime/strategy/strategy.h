// How the processes of a world share the training work: the seam between the Accelerator
// and DDP, ZeRO or nothing at all. The Accelerator holds one strategy and calls it at each
// phase of a step; it never asks which strategy it holds. Internal to the runtime.
//
// A new strategy (hybrid sharding, FSDP-style per-module units, pipeline...) is a file in
// this folder that implements ParallelStrategy, plus one line in the table of factory.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/precision.h"

namespace accel {

// What every strategy is built from.
struct StrategySetup {
  const Options& options;          // precision, strategy, bucket_bytes...
  comm::Communicator& comm;        // the world
  comm::ComputeClock* clock;       // the simulator's virtual clock; null on real backends
  torch::Device device;            // the context's device
};

// When a strategy communicates during a training loop (the Accelerator checks, before each
// such collective, that uneven data will not leave a process waiting forever).
enum class Cadence {
  Never,               // no collectives in training
  OnSync,              // on the micro-batch that completes the gradients (DDP, ZeRO-1)
  EveryMicroBatch,     // on every backward (ZeRO-2)
  EveryForward,        // on every forward and backward (ZeRO-3)
};

// Whether a backward with this cadence communicates (`sync`: it completes the gradients).
inline bool communicates_in_backward(Cadence c, bool sync) {
  return c == Cadence::EveryMicroBatch || c == Cadence::EveryForward || (c == Cadence::OnSync && sync);
}

// StatePiece (a range of one parameter's flattened values that this process holds) is the
// optimizer's (runtime/optim/optimizer.h): ZeRO hands its pieces to the optimizer's step.

class ParallelStrategy {
 public:
  explicit ParallelStrategy(const StrategySetup& s) : opts_(s.options), comm_(s.comm), clock_(s.clock), device_(s.device) {}
  virtual ~ParallelStrategy() = default;
  ParallelStrategy(const ParallelStrategy&) = delete;
  ParallelStrategy& operator=(const ParallelStrategy&) = delete;

  // --- prepare
  // Before anything changes: whether this world and optimizer can run the strategy
  // (Unsupported/InvalidArgument naming what is missing). `model` or `opt` may be null.
  virtual void check(const Model* model, const Optimizer* opt) const { (void)model, (void)opt; }
  // The model is on the context's device: make it this strategy's (broadcast, shard, hooks).
  virtual void prepare(Model& model) = 0;
  // Whether the strategy keeps the optimizer's state itself (sharded): then the Optimizer
  // makes none of its own.
  virtual bool shards_state() const { return false; }

  // --- a step
  virtual Cadence cadence() const = 0;
  // What its collectives are called in errors ("gradient synchronisations").
  virtual const char* collectives_noun() const { return "collectives"; }
  // The prepared model's forward (ZeRO-3 gathers weights around it).
  virtual torch::Tensor forward(Model& model, const std::vector<torch::Tensor>& inputs, const ForwardMode& mode) {
    return model.forward(inputs, mode);
  }
  // Runs backward of the already scaled loss and this strategy's communication. `sync`: this
  // micro-batch completes the gradients; `rows`: the batch's rows (compute estimates).
  virtual void backward(const torch::Tensor& scaled_loss, bool sync, int64_t rows) = 0;
  // Unscales the gradients (fp16); true when any process's hold inf/NaN (the same answer on
  // every process).
  virtual bool unscale(const LossScaler& scaler);
  // The global norm of the gradients, scaled down to max_norm when above.
  virtual double clip(double max_norm);
  // Multiplies the (synchronised) gradients by f.
  virtual void scale_gradients(double f);
  virtual void step(Optimizer& opt) {
    give_host_grads(opt);
    opt.step();
  }
  virtual void zero_grad(Optimizer& opt) {
    host_grads_.clear();
    opt.zero_grad();
  }

  // --- evaluation and checkpoints
  // The prepared model's parameters whole, fp32, on the host (a collective when sharded).
  virtual std::vector<torch::Tensor> full_parameters();
  // Parameter `index`'s gradient whole, fp32, on the host, as the optimizer's step would use
  // it now (after unscale, scale_gradients and clip; averaged over the processes once
  // synchronised); zeros where it has none. A collective when the gradients are sharded.
  virtual torch::Tensor full_gradient(size_t index);
  virtual int zero_stage() const { return 0; }
  // Sharded state (shards_state()): this process's pieces and their values, for "weight"
  // or an optimizer state kind (undefined where the optimizer has made none yet).
  virtual std::vector<StatePiece> pieces() const { return {}; }
  virtual torch::Tensor piece_state(const std::string& kind, const StatePiece& p) {
    (void)kind, (void)p;
    return {};
  }
  // Optimizer state that every process holds whole under a sharding strategy (Adafactor's
  // row and column factors under ZeRO), in the kind's own shape; undefined otherwise. The
  // main process writes it into its checkpoint file.
  virtual torch::Tensor replicated_state(const std::string& kind, size_t param) const {
    (void)kind, (void)param;
    return {};
  }
  // Sets the weights and optimizer state from whole flattened values per parameter ("weight"
  // and the kinds present; fp32, any device) and the optimizer's step count.
  virtual void restore(const std::map<std::string, std::vector<torch::Tensor>>& full, int64_t steps, Optimizer* opt);
  virtual int64_t optimizer_state_steps(const Optimizer* opt) const { return opt ? opt->state_steps() : 0; }

 protected:
  Model& model() { return *model_; }
  // Charges estimated FLOPs to the simulator's clock (nothing on real backends).
  void charge(double flops, const char* label) const {
    if (clock_) clock_->charge_flops(flops, label);
  }
  // Offload (docs/memory.md): the gradients go to host memory as each is complete, not at
  // the step: `flat` holds the parameters `params` at `offsets` (a DDP bucket, or one
  // parameter), copied in its dtype once `after` (the collective that averaged it; null:
  // none) is done, its transfer posted to the clock beside the compute. unscale,
  // scale_gradients and clip multiply the copies as they multiply the device's gradients
  // (the same multiplications: the same bits), and step hands them to the optimizer.
  bool offloads_grads() const { return opts_.offload != Offload::None; }
  void grads_to_host(const torch::Tensor& flat, const std::vector<size_t>& params, const std::vector<int64_t>& offsets,
                     const comm::Work* after);
  void scale_host_grads(double f);
  void give_host_grads(Optimizer& opt) const;

  const Options& opts_;
  comm::Communicator& comm_;
  comm::ComputeClock* clock_;
  torch::Device device_;
  Model* model_ = nullptr;  // set by prepare

 private:
  struct HostGrads {
    torch::Tensor host;
    std::vector<size_t> params;
    std::vector<int64_t> offsets;
  };
  std::vector<HostGrads> host_grads_;  // this step's, in the order they were complete
};

// The strategy `opts.strategy` names on this world (DDP on one process is no strategy).
std::unique_ptr<ParallelStrategy> make_strategy(const StrategySetup& setup);

// Runs `fn` each time autograd has accumulated a gradient into p.grad (a post hook on the
// parameter's gradient accumulator, as DDP's reducer does). The hook lives as long as the
// returned node is held.
compat::GradAccumulator on_grad_accumulated(const torch::Tensor& p, std::function<void()> fn);

// Offload: a host copy of a reduced gradient `g` (offload::copy_to_host), its transfer posted
// to `clock` (when there is one) beside the compute, from the end of `after` (DDP's and ZeRO's
// buckets alike).
torch::Tensor grad_to_host_posted(const torch::Tensor& g, comm::ComputeClock* clock, const comm::Work* after);

// Broadcasts process 0's parameters and buffers to every process (DDP and ZeRO at prepare).
void broadcast_from_rank0(comm::Communicator& comm, Model& model);

// Flat buffers: parameters grouped into buckets of at most `bucket_bytes` (4 bytes per
// element), in reverse parameter order (backward completes the last layers first). Used by
// DDP's gradient buckets and ZeRO's units alike.
std::vector<std::vector<size_t>> reverse_buckets(const std::vector<torch::Tensor>& params, int64_t bucket_bytes);
// A parameter's slot in a flat buffer: `numel` elements at `offset`.
struct FlatLayout {
  std::vector<size_t> params;    // indices into the model's parameters
  std::vector<int64_t> offsets;  // element offsets in the flat buffer
  int64_t numel = 0;
  static FlatLayout of(const std::vector<size_t>& group, const std::vector<torch::Tensor>& params);
};
// Makes p.grad a view of its slot in `flat` (copying the gradient autograd wrote elsewhere),
// so later micro-batches accumulate in place and a collective reduces the slot directly.
void grad_into_slot(const torch::Tensor& p, const torch::Tensor& flat, int64_t offset);

}  // namespace accel
