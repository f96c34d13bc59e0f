// ZeRO stages 1-3 (FSDP's SHARD_GRAD_OP and FULL_SHARD): parameters, gradients and
// optimizer state sharded across the ranks of a communicator. Internal to the runtime.
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

// Every buffer below lives on the model's device (a GPU's when the model is there).
class ZeroEngine final : public UnitGate {
 public:
  // Broadcasts rank 0's parameters and buffers, shards them and points the model's
  // parameters at the working copy. `work` is the working dtype.
  // `clock`: the simulator's, to charge backward compute per unit (null on real backends).
  ZeroEngine(int stage, comm::Communicator& comm, comm::ComputeClock* clock, Model& model, c10::ScalarType work,
             int64_t bucket_bytes);
  ~ZeroEngine() override;
  ZeroEngine(const ZeroEngine&) = delete;
  ZeroEngine& operator=(const ZeroEngine&) = delete;

  int stage() const { return stage_; }
  c10::ScalarType work_dtype() const { return work_; }

  // Stage 3: gathers a unit before its use in forward, frees it after (and gathers it
  // again when backward reaches its output).
  void before(size_t unit) override;
  void after(size_t unit, const torch::Tensor& out) override;
  // Forward of a model that does not call the gate itself: the whole model is unit 0.
  bool gates_units() const { return model_gates_; }

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
  void restore(const std::map<std::string, std::vector<torch::Tensor>>& full, int64_t steps, bool adafactor);
  int64_t steps() const { return steps_; }

 private:
  struct Unit {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;  // element offsets in the unit's flat buffer
    int64_t numel = 0, padded = 0, chunk = 0, shard_offset = 0;
    torch::Tensor full;            // [padded], working dtype
    bool gathered = false;
    // stage 1: the unit's whole gradient, persistent (the parameters' .grad are views; the
    // reduce-scatter runs in place, so chunk r of it is the rank's gradient shard);
    // stages 2-3: the micro-batch's gradient, alive only until it is reduce-scattered
    torch::Tensor gbuf, rs_out;
    size_t ready = 0;
    bool launched = false;
    std::shared_ptr<comm::Work> work;
  };
  torch::Tensor master_chunk(size_t u);
  torch::Tensor source_chunk(size_t u);  // what the all-gather sends
  torch::Tensor grad_chunk(size_t u) {
    const Unit& x = units_[u];
    return stage_ == 1 ? x.gbuf.narrow(0, r_ * x.chunk, x.chunk) : grad_.narrow(0, x.shard_offset, x.chunk);
  }
  void gather(size_t u);
  void release(size_t u);
  void accumulated(size_t param);
  void launch(size_t u);
  void complete(size_t u);
  void clear_grads();
  void charge_backward(size_t u);

  int stage_;
  comm::Communicator& comm_;
  comm::ComputeClock* clock_;
  Model& model_;
  c10::ScalarType work_;
  int n_, r_;
  bool model_gates_;
  torch::Device device_;
  torch::TensorOptions on(c10::ScalarType t) const { return torch::dtype(t).device(device_); }
  std::vector<Unit> units_;
  std::vector<std::pair<size_t, size_t>> unit_of_;  // param -> (unit, slot)
  int64_t total_ = 0;  // elements in the rank's chunks, all units
  torch::Tensor master_, work_shard_, grad_;
  bool grad_valid_ = false;
  double grad_factor_ = 1.0;  // applied when the gradient is read: 1/loss scale, clipping
  // optimizer state
  torch::Tensor exp_avg_, exp_avg_sq_, momentum_;
  // Adafactor: per parameter, the row and column factors of a matrix (whole, the same on
  // every rank) or this rank's piece of a vector's second moment; exp_avg_ with beta1
  std::vector<torch::Tensor> af_row_, af_col_, af_sq_;
  void adafactor_step(const AdafactorConfig& c, double lr);
  int64_t steps_ = 0;
  // backward
  bool in_backward_ = false, sync_ = false;
  int64_t rows_ = 0;
  std::deque<size_t> inflight_;  // units whose reduce-scatter is launched, oldest first
  std::vector<compat::GradAccumulator> accumulators_;
  std::shared_ptr<ZeroEngine*> owner_ = std::make_shared<ZeroEngine*>(this);
};

}  // namespace accel
