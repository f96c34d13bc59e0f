// ZeRO stages 1-2 (DeepSpeed's stage_1_and_2, FSDP's SHARD_GRAD_OP): every rank keeps the
// whole working weights (the model's parameters are views of each unit's `full`), steps its
// chunks and all-gathers them back. Stage 2 keeps only its chunk of the gradient,
// reduce-scattered every micro-batch (the engine's sharded gradient); stage 1 keeps each
// unit's whole gradient, accumulated over the micro-batches as DDP does, and reduces it on
// the micro-batch that completes it, keeping its chunk of the average. See zero.h.
#include "comm/tensors.h"
#include "runtime/strategy/zero.h"

namespace accel {

namespace {

// An all-gather of a bucket's chunks packed rank after rank: once complete, `unpack` copies
// each unit's chunks into its weights.
class UnpackedWork final : public comm::Work {
 public:
  UnpackedWork(std::shared_ptr<comm::Work> inner, std::function<void()> unpack)
      : inner_(std::move(inner)), unpack_(std::move(unpack)) {}
  void wait() override {
    inner_->wait();
    if (unpack_) {
      auto f = std::move(unpack_);
      unpack_ = nullptr;
      f();
    }
  }
  bool test() override {
    if (!inner_->test()) return false;
    wait();
    return true;
  }
  const comm::Work* underlying() const override { return inner_->underlying(); }

 private:
  std::shared_ptr<comm::Work> inner_;
  std::function<void()> unpack_;
};

// Stage 2, and stage 1's weights.
class ReplicatedEngine : public ZeroEngine {
 public:
  ReplicatedEngine(comm::Communicator& comm, comm::ComputeClock* clock, Model& model, c10::ScalarType work)
      : ZeroEngine(comm, clock, model, work) {}

 protected:
  // With fp32 working weights the master chunks are views of `full`.
  bool separate_master() const override { return work_ != torch::kFloat; }

  // Consecutive units' collectives go as one where each costs much (see zero.h).
  int64_t coalesced_bytes(int64_t bucket_bytes) const override { return bucket_bytes; }

  void stepped(size_t u, std::vector<std::shared_ptr<comm::Work>>& gathers) override {
    const Unit& x = units_[u];
    Bucket& b = buckets_[bucket_of_unit_[u]];
    if (b.size() == 1) {
      torch::Tensor slot = on_rank(x.full, u);
      if (master_.defined()) slot.copy_(master_chunk(u));
      gathers.push_back(comm::all_gather(comm_, slot, x.full));  // in place: slot is this rank's part of full
      return;
    }
    if (++b.stepped < b.size()) return;  // the bucket's last unit stepped: one all-gather for all
    b.stepped = 0;
    // the rank's chunks of the bucket's units in turn (in the working dtype), gathered rank
    // after rank, then each unit's chunks copied into its weights
    torch::Tensor mine = torch::empty({b.chunks}, on(work_));
    torch::Tensor all = torch::empty({n_ * b.chunks}, on(work_));
    for (size_t v = b.lo; v <= b.hi; ++v) mine.narrow(0, units_[v].bucket_at, units_[v].chunk).copy_(master_chunk(v));
    auto w = comm::all_gather(comm_, mine, all);
    const size_t lo = b.lo, hi = b.hi;
    const int64_t chunks = b.chunks;
    gathers.push_back(std::make_shared<UnpackedWork>(std::move(w), [this, mine, all, lo, hi, chunks] {
      torch::NoGradGuard ng;
      torch::Tensor rows = all.view({n_, chunks});
      for (size_t v = lo; v <= hi; ++v)
        units_[v].full.view({n_, units_[v].chunk}).copy_(rows.narrow(1, units_[v].bucket_at, units_[v].chunk));
    }));
  }

  void restored_weights(size_t u, const torch::Tensor& flat) override {
    units_[u].full.copy_(flat);  // the replicated working weights (fp32: also the master)
  }
};

// Stage 1: the gradient whole per unit, reduced on sync micro-batches only.
class Stage1Engine final : public ReplicatedEngine {
 public:
  using ReplicatedEngine::ReplicatedEngine;

 protected:
  void shard_buffers() override {}  // no sharded gradient: chunk r of each unit's buffer
  void laid_out(size_t u, const torch::Tensor& mine) override {
    (void)mine;
    units_[u].gbuf = torch::zeros({units_[u].padded}, on(work_));
  }
  torch::Tensor grad_chunk(size_t u) override { return on_rank(units_[u].gbuf, u); }

  bool take_grad(Unit& u, size_t slot, const torch::Tensor& p) override {
    // the gradient lives in the unit's buffer: later micro-batches accumulate in place
    grad_into_slot(p, u.gbuf, u.offsets[slot]);
    return sync_;  // stage 1 reduces on the micro-batch that completes the gradients
  }
  bool reduces(bool sync) const override { return sync; }
  void unreduced(Unit& u) override {
    const auto& params = model_.parameters();
    for (size_t i = 0; i < u.params.size(); ++i) grad_into_slot(params[u.params[i]], u.gbuf, u.offsets[i]);
  }
  std::shared_ptr<comm::Work> reduce(size_t u) override {
    // in place: chunk r of the buffer receives the rank's average
    return comm::reduce_scatter(comm_, units_[u].gbuf, on_rank(units_[u].gbuf, u), comm::RedOp::Avg);
  }
  // the whole gradient is kept anyway: every reduction stays in flight until backward ends
  size_t max_inflight() const override { return SIZE_MAX; }
  void reduced(size_t u) override {  // in place, in the buffer that stays; or from its bucket's result
    Unit& x = units_[u];
    if (x.rs_out.defined()) on_rank(x.gbuf, u).copy_(x.rs_out);
    x.rs_out = torch::Tensor();
  }
  void drop_partial(Unit& u) override { (void)u; }  // the buffer stays (gradients accumulate in it)
};

}  // namespace

const ZeroStage& zero_stage1() {
  static const ZeroStage s{1, Cadence::OnSync, "gradient synchronisations", &make_zero_engine<Stage1Engine>};
  return s;
}

const ZeroStage& zero_stage2() {
  static const ZeroStage s{2, Cadence::EveryMicroBatch, "gradient reduce-scatters", &make_zero_engine<ReplicatedEngine>};
  return s;
}

}  // namespace accel
