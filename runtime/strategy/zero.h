// ZeRO stages 1-3 (FSDP's SHARD_GRAD_OP and FULL_SHARD): parameters, gradients and
// optimizer state sharded across the ranks of a communicator. Internal to the runtime.
//
// Files, as DeepSpeed splits its stages: zero.cpp, the engine every stage shares (the layout,
// the master weights and optimizer state, the step through the optimizer's Shard, unscale and
// clip, checkpoints, the sharded gradient of stages 2-3) and the strategy; zero_stage1_2.cpp,
// the replicated working weights of stages 1-2 and stage 1's whole gradient; zero_stage3.cpp,
// stage 3's weights gathered per unit around their use. What differs by stage is a ZeroStage
// (the strategy's answers and the engine's maker) and the engine's virtual hooks below.
//
// Layout (as FSDP's flat parameters): the model's parameters are grouped in units (a layer
// of the built-in MLP; buckets of Options::bucket_bytes in reverse order for other models
// under stages 1-2; the whole model for them under stage 3). Each unit's parameters are
// flattened, padded to a multiple of the rank count N and cut into N equal chunks; rank r
// owns chunk r of every unit. Per rank:
//   master     fp32, the rank's chunks (the optimizer's parameters)
//   state      fp32, the optimizer's moments for the master chunks
//   grad       the working dtype, the rank's chunks of the averaged gradients
//   full       the working dtype (bf16/fp16 under mixed precision, else fp32): every
//              unit's whole parameters; persistent under stages 1-2 (the model's
//              parameters are views of it), gathered before use and freed after under
//              stage 3
//   work shard stage 3 with a 16-bit working dtype: the rank's chunks in that dtype (the
//              all-gather's source); otherwise the master (fp32) is the source
// With fp32 working weights under stages 1-2 the master chunks are views of `full`.
//
// Collectives: one per unit (its gradient's reduce-scatter, its weights' all-gather), except
// where the backend pays a high fixed cost per collective (Gloo: thread hand-offs and TCP
// round trips, ~1 ms each on a loaded 2-core machine, against ~0.1 ms of arithmetic for the
// digits MLP's step). There stages 1-2 send runs of consecutive units of up to
// Options::bucket_bytes together (a bucket, as DeepSpeed's reduce_bucket_size): the units'
// chunks packed rank after rank, so one reduce-scatter leaves every unit's chunk of the
// bucket in place in the rank's buffers, and one all-gather brings back every unit's chunks.
// The layout (units, chunks, what each rank owns: checkpoints' pieces) is the same either
// way, and so are the values (the same elements reduced, the same bits gathered).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <memory>
#include <vector>

#include "runtime/strategy/strategy.h"

namespace accel {

// The ZeRO strategy at `stage` (1-3): a ZeroEngine made at prepare.
std::unique_ptr<ParallelStrategy> make_zero(const StrategySetup& setup, int stage);

class ZeroEngine;

// What differs between the stages outside the engine: the strategy's answers (before prepare
// too) and the engine's maker (the working dtype `work`).
struct ZeroStage {
  int number;
  Cadence cadence;
  const char* collectives_noun;  // in errors
  std::unique_ptr<ZeroEngine> (*make)(comm::Communicator& comm, comm::ComputeClock* clock, Model& model,
                                      c10::ScalarType work, int64_t bucket_bytes, Offload offload);
};
const ZeroStage& zero_stage1();  // zero_stage1_2.cpp
const ZeroStage& zero_stage2();  // zero_stage1_2.cpp
const ZeroStage& zero_stage3();  // zero_stage3.cpp

// Every buffer below lives on the model's device (a GPU's when the model is there).
// A stage's engine derives from it; its maker calls layout() once constructed.
class ZeroEngine {
 public:
  virtual ~ZeroEngine();
  ZeroEngine(const ZeroEngine&) = delete;
  ZeroEngine& operator=(const ZeroEngine&) = delete;

  // Groups the parameters in units, shards them and points the model's parameters at the
  // working copy (asks the stage's hooks: call once, after construction).
  void layout(int64_t bucket_bytes);
  // Options::offload: the optimizer's state and the separate master in host memory; with
  // Offload::Parameters (stage 3) the working weights' shard too (before layout).
  void set_offload(Offload o) {
    offload_ = o != Offload::None;
    offload_params_ = o == Offload::Parameters;
  }
  c10::ScalarType work_dtype() const { return work_; }

  // The model's forward (stage 3 gathers each unit around its use).
  virtual torch::Tensor forward(Model& model, const std::vector<torch::Tensor>& inputs, const ForwardMode& mode) {
    return model.forward(inputs, mode);
  }

  // Brackets a backward. `sync`: this micro-batch completes the gradients. Stage 1 reduces
  // on sync micro-batches only (gradients accumulate unsharded in between, as DDP);
  // stages 2-3 reduce-scatter every micro-batch into the sharded gradient.
  void begin_backward(bool sync, int64_t rows);
  void end_backward();
  void end_backward_abandoned();  // backward threw: drop this micro-batch's partial reductions

  // For the step: `inv_scale` unscales (fp16); returns whether any rank's shard holds
  // inf/NaN (the same answer on every rank).
  bool unscale(double inv_scale);
  // The global norm of the (unscaled) gradient; scales it down to max_norm when above.
  double clip(double max_norm);
  // Multiplies the gradients by f (applied when they are read, with the loss scale's).
  void scale_gradients(double f) { grad_factor_ *= f; }
  // One optimizer step on the master chunks, then the working weights reassembled as the
  // stage requires (stages 1-2: all-gather of the updated chunks).
  void step(const Optimizer& opt);
  void zero_grad();

  // Collective: every parameter whole, fp32, on the host, in the model's order.
  std::vector<torch::Tensor> full_parameters();
  // Parameter `index`'s averaged gradient whole (fp32, host): its unit's chunks gathered, with
  // grad_factor_ applied (a collective).
  torch::Tensor full_gradient(size_t index);

  // Checkpoints. The ranges of the parameters' flattened values this rank's chunks hold
  // (at most one per parameter), and their state: "weight" (the fp32 master values) or an
  // optimizer kind ("exp_avg", "exp_avg_sq", "momentum_buffer"; undefined before the
  // first step created it).
  std::vector<StatePiece> pieces() const;
  torch::Tensor piece_state(const std::string& kind, const StatePiece& p);
  // Adafactor's row and column factors ("exp_avg_sq_row", "exp_avg_sq_col"), whole on every
  // rank; undefined for other kinds or before the first step.
  torch::Tensor replicated_state(const std::string& kind, size_t param) const;
  // Sets the rank's chunks from whole flattened values per parameter (fp32, any device),
  // for "weight" and the optimizer kinds present (Adafactor's factors in their own shapes),
  // and the step count.
  void restore(const std::map<std::string, std::vector<torch::Tensor>>& full, int64_t steps, const Optimizer* opt);
  int64_t steps() const { return steps_; }

 protected:
  // Broadcasts rank 0's parameters and buffers. `work` is the working dtype.
  // `clock`: the simulator's, to charge backward compute per unit (null on real backends).
  ZeroEngine(comm::Communicator& comm, comm::ComputeClock* clock, Model& model, c10::ScalarType work);

  struct Unit {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;  // element offsets in the unit's flat buffer
    int64_t numel = 0, padded = 0, chunk = 0, shard_offset = 0;
    torch::Tensor full;            // [padded], working dtype
    int64_t bucket_at = 0;         // where its chunks start in its bucket's part of each rank
    bool gathered = false;         // stage 3: `full` holds the weights
    // stage 1: the unit's whole gradient, persistent (the parameters' .grad are views; the
    // reduce-scatter runs in place, so chunk r of it is the rank's gradient shard);
    // stages 2-3: the micro-batch's gradient, alive only until it is reduce-scattered (stage 2
    // in a bucket of several units: in the bucket's packed buffer instead)
    torch::Tensor gbuf, rs_out;
    size_t ready = 0;
    bool launched = false;
  };
  // Consecutive units whose collectives go as one (see above); a unit alone elsewhere.
  struct Bucket {
    size_t lo = 0, hi = 0;  // its units, lo..hi
    int64_t chunks = 0;     // elements of the rank's chunks of its units
    size_t launched = 0;    // its units launched in this backward
    size_t stepped = 0;     // its units stepped in this optimizer step (stages 1-2)
    // a reduction's packed input (stage 2 writes the gradients straight into it) and its
    // result, the rank's chunks
    torch::Tensor send, out;
    std::shared_ptr<comm::Work> work;
    size_t size() const { return hi - lo + 1; }
  };

  // --- the stage's hooks: layout
  // How the parameters of a model that does not gate its units are grouped (stages 1-2:
  // buckets in reverse order, as DDP: backward completes the last layers first).
  virtual std::vector<std::vector<size_t>> ungated_units(int64_t bucket_bytes) const {
    return reverse_buckets(model_.parameters(), bucket_bytes);
  }
  // Whether the master chunks are a buffer of their own (else views of `full`).
  virtual bool separate_master() const = 0;
  // Whether the weights the stage reads between steps live in host memory (stage 3 with
  // offloaded parameters: the step's update stays there, each gather moves a unit's shard).
  virtual bool weights_on_host() const { return false; }
  // The rank's buffers over its chunks, after the master: the sharded gradient (stages 2-3).
  virtual void shard_buffers() { grad_ = torch::zeros({total_}, on(work_)); }
  // Unit u is laid out (its whole weights in `full`, the parameters views of it); `mine`:
  // the rank's chunk of its fp32 values.
  virtual void laid_out(size_t u, const torch::Tensor& mine) { (void)u, (void)mine; }
  // --- weights
  // Unit u's weights are not needed until its next use (stage 3 frees them).
  virtual void release(size_t u) { (void)u; }
  // Unit u's master chunk is updated: the working weights follow (stages 1-2: an all-gather
  // in flight, appended to `gathers`).
  virtual void stepped(size_t u, std::vector<std::shared_ptr<comm::Work>>& gathers) = 0;
  // Unit u's weights are restored: the master is; `flat` holds its whole fp32 values.
  virtual void restored_weights(size_t u, const torch::Tensor& flat) = 0;
  // --- gradients; the defaults are stages 2-3's sharded gradient, reduce-scattered every
  // micro-batch (stage 1 keeps each unit's whole gradient and reduces on sync only)
  // The rank's chunk of unit u's averaged gradient.
  virtual torch::Tensor grad_chunk(size_t u) { return grad_.narrow(0, units_[u].shard_offset, units_[u].chunk); }
  // Parameter p (slot `slot` of unit u) has its gradient: whether it counts towards
  // reducing the unit now.
  virtual bool take_grad(Unit& u, size_t slot, const torch::Tensor& p);
  // Whether this backward reduces (`sync`: it completes the gradients).
  virtual bool reduces(bool sync) const {
    (void)sync;
    return true;
  }
  // A unit no parameter of which got a gradient in this backward: its buffer before it is
  // reduced like the others.
  virtual void unreduced(Unit& u) {
    Bucket& b = buckets_[bucket_of_unit_[static_cast<size_t>(&u - units_.data())]];
    if (b.size() > 1 && !b.send.defined()) b.send = torch::zeros({n_ * b.chunks}, on(work_));  // its packed gradients
    if (b.size() == 1 && !u.gbuf.defined()) u.gbuf = torch::zeros({u.padded}, on(work_));
  }
  // Launches unit u's reduction; the units whose reductions may stay in flight at once.
  virtual std::shared_ptr<comm::Work> reduce(size_t u);
  // The bytes of consecutive units whose collectives may go as one (stages 1-2 on a backend
  // that pays per collective: Options::bucket_bytes; 0: one unit each, stage 3).
  virtual int64_t coalesced_bytes(int64_t bucket_bytes) const {
    (void)bucket_bytes;
    return 0;
  }
  // Stages 2-3: gradient reductions in flight at once while the next unit's gradient is
  // being filled (DeepSpeed's double buffer): bounds the unsharded gradient memory to two units
  // (two buckets where reductions go by bucket).
  virtual size_t max_inflight() const { return 1; }
  // Unit u's reduction completed (its rs_out holds the rank's chunk of the average, or, for
  // stage 1 alone in its bucket, the chunk of its buffer does).
  virtual void reduced(size_t u);
  // Backward threw: what unit u drops of the micro-batch's gradient.
  virtual void drop_partial(Unit& u) {
    u.gbuf = torch::Tensor();
    u.rs_out = torch::Tensor();
  }

  torch::Tensor master_chunk(size_t u);
  torch::Tensor on_rank(const torch::Tensor& flat, size_t u) const {  // the rank's chunk of a unit's flat values
    return flat.narrow(0, r_ * units_[u].chunk, units_[u].chunk);
  }
  torch::TensorOptions on(c10::ScalarType t) const { return torch::dtype(t).device(device_); }
  // fp32 zeros where the optimizer's state and the separate master live: the device, or the
  // host under offload (docs/memory.md); and a copy of t there.
  torch::Tensor home_zeros(at::IntArrayRef shape) const {
    return offload_ ? offload::host_zeros(shape, device_) : torch::zeros(shape, on(torch::kFloat));
  }
  torch::Tensor to_home(const torch::Tensor& t) const {
    return offload_ ? offload::to_host(t) : t.to(device_, torch::kFloat).clone();
  }

  // Whether the backend pays a high fixed cost per collective (Gloo), so that stages 1-2
  // coalesce their units' collectives (see above).
  bool costly_collectives() const;

  comm::Communicator& comm_;
  comm::ComputeClock* clock_;
  Model& model_;
  c10::ScalarType work_;
  int n_, r_;
  bool model_gates_;
  torch::Device device_;
  std::vector<Unit> units_;
  std::vector<Bucket> buckets_;         // over the units, in order; each unit's alone without coalescing
  std::vector<size_t> bucket_of_unit_;  // unit -> its bucket
  int64_t total_ = 0;  // elements in the rank's chunks, all units
  torch::Tensor master_, grad_;
  bool offload_ = false;  // Options::offload: state and separate master in host memory
  bool offload_params_ = false;  // Offload::Parameters: stage 3's working shard in host memory too
  std::vector<torch::Tensor> host_grad_;  // offload: the reduced chunks' host copies, by unit (this step's)
  bool grad_valid_ = false;
  bool sync_ = false;
  std::shared_ptr<ZeroEngine*> owner_ = std::make_shared<ZeroEngine*>(this);

 private:
  void accumulated(size_t param);
  void launch(size_t u);
  std::shared_ptr<comm::Work> reduce_bucket(Bucket& b);
  void pack(Bucket& b, size_t u, int64_t at, const torch::Tensor& flat);
  void complete(size_t bucket);
  // Offload, on the micro-batch that completes the gradients: unit u's reduced chunk to the
  // host as soon as `after` (its reduction) is done, the transfer posted beside the compute.
  void grad_to_host(size_t u, const comm::Work* after);
  void clear_grads();
  void charge_backward(size_t u);

  std::vector<std::pair<size_t, size_t>> unit_of_;  // param -> (unit, slot)
  double grad_factor_ = 1.0;  // applied when the gradient is read: 1/loss scale, clipping
  // optimizer state, by kind and the optimizer's StateScope: Element kinds flat over the
  // rank's chunks ([total_]); per parameter, Piece kinds over the rank's piece of it and
  // Parameter kinds whole (the same on every rank: Adafactor's row and column factors)
  std::map<std::string, torch::Tensor> flat_state_;
  std::map<std::string, std::vector<torch::Tensor>> piece_state_, whole_state_;
  // the rank's chunks as the optimizer's Shard (zero.cpp)
  class RankShard;
  friend class RankShard;
  int64_t steps_ = 0;
  // backward
  bool in_backward_ = false;
  int64_t rows_ = 0;
  std::deque<size_t> inflight_;  // buckets whose reduce-scatter is launched, oldest first
  std::vector<compat::GradAccumulator> accumulators_;
};

// A stage's maker: its engine E (constructed from these), laid out.
template <class E>
std::unique_ptr<ZeroEngine> make_zero_engine(comm::Communicator& comm, comm::ComputeClock* clock, Model& model,
                                             c10::ScalarType work, int64_t bucket_bytes, Offload offload) {
  std::unique_ptr<E> e = std::make_unique<E>(comm, clock, model, work);
  e->set_offload(offload);
  e->layout(bucket_bytes);
  return e;
}

}  // namespace accel
