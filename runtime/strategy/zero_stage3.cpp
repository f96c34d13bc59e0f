// ZeRO stage 3 (DeepSpeed's stage3, FSDP's FULL_SHARD): a rank holds only its chunks of the
// weights; each unit's whole weights are all-gathered before its use in forward, freed after
// it, and gathered again when backward reaches it. The gradient is the engine's sharded one,
// reduce-scattered every micro-batch. See zero.h.
#include "comm/tensors.h"
#include "runtime/strategy/zero.h"

namespace accel {

namespace {

// Stage 3 frees a unit's gathered weights by emptying the storage they live in, not by
// replacing the tensors: autograd saved views of them in forward (linear saves weight.t()),
// and those views must see the weights again once backward gathers them back into the
// same storage. The bytes go back to the allocator (and the simulator's budget).
void free_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void alloc_storage(const torch::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  ACCEL_CHECK(s->allocator() != nullptr, Status::Internal, "a sharded unit's storage has no allocator");
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

class Stage3Engine final : public ZeroEngine, public UnitGate {
 public:
  Stage3Engine(comm::Communicator& comm, comm::ComputeClock* clock, Model& model, c10::ScalarType work)
      : ZeroEngine(comm, clock, model, work) {}

  torch::Tensor forward(Model& model, const std::vector<torch::Tensor>& inputs, const ForwardMode& mode) override {
    if (model_gates_) {  // the model gathers unit by unit
      ForwardMode gated = mode;
      gated.gate = this;
      return model.forward(inputs, gated);
    }
    // a model that does not call the gate itself: the whole model is unit 0
    before(0);
    torch::Tensor out = model.forward(inputs, mode);
    after(0, out);
    return out;
  }

  // Gathers a unit before its use in forward, frees it after (and gathers it again when
  // backward reaches its output).
  void before(size_t unit) override {
    ACCEL_CHECK(unit < units_.size(), Status::Internal, "unit ", unit, " out of range");
    gather(unit);
  }
  void after(size_t unit, const torch::Tensor& out) override {
    if (out.defined() && out.requires_grad()) {
      // backward reaches this unit when the gradient of its output is known: gather again
      const_cast<torch::Tensor&>(out).register_hook([owner = owner_, unit](const torch::Tensor& g) -> torch::Tensor {
        if (ZeroEngine* e = *owner) static_cast<Stage3Engine*>(e)->gather(unit);
        return g;
      });
    }
    release(unit);
  }

 protected:
  // Ungated models are one unit, gathered whole around their forward.
  std::vector<std::vector<size_t>> ungated_units(int64_t bucket_bytes) const override {
    (void)bucket_bytes;
    return Model::units_of_all(model_.parameters().size());
  }
  bool separate_master() const override { return true; }
  bool weights_on_host() const override { return source_on_host_; }
  void shard_buffers() override {
    // Offload::Parameters: the 16-bit shard in host memory (pinned on CUDA); in fp32 the
    // gathers' source is the master, in host memory under any offload
    if (work_ != torch::kFloat)
      work_shard_ = offload_params_ ? offload::host_zeros({total_}, device_, work_) : torch::zeros({total_}, on(work_));
    source_on_host_ = offload_ && (work_ == torch::kFloat || offload_params_);
    ZeroEngine::shard_buffers();
  }
  void laid_out(size_t u, const torch::Tensor& mine) override {
    if (work_shard_.defined()) work_chunk(u).copy_(mine);
    release(u);
  }

  void release(size_t u) override {
    Unit& x = units_[u];
    if (!x.gathered) return;
    free_storage(x.full);
    x.gathered = false;
  }
  void stepped(size_t u, std::vector<std::shared_ptr<comm::Work>>& gathers) override {
    (void)gathers;  // the next forward gathers the weights
    if (work_shard_.defined()) work_chunk(u).copy_(master_chunk(u));
  }
  void restored_weights(size_t u, const torch::Tensor& flat) override {
    if (work_shard_.defined()) work_chunk(u).copy_(on_rank(flat, u));
  }

 private:
  torch::Tensor work_chunk(size_t u) { return work_shard_.narrow(0, units_[u].shard_offset, units_[u].chunk); }
  // what the all-gather sends
  torch::Tensor source_chunk(size_t u) { return work_shard_.defined() ? work_chunk(u) : master_chunk(u); }

  void gather(size_t u) {
    Unit& x = units_[u];
    if (x.gathered) return;
    alloc_storage(x.full, static_cast<size_t>(x.padded) * x.full.element_size());
    torch::Tensor src = source_chunk(u);
    if (source_on_host_) {
      // the shard lives in host memory: to the device first (a staging copy, freed after the
      // gather; from pinned memory, asynchronous on CUDA), over the host link
      torch::Tensor staged = torch::empty({x.chunk}, on(work_));
      staged.copy_(src, /*non_blocking=*/true);
      if (clock_)
        clock_->charge_host_transfer(static_cast<uint64_t>(staged.numel()) * staged.element_size(),
                                     "offload: a unit's parameter shard to the device");
      src = staged;
    }
    comm::all_gather(comm_, src, x.full)->wait();
    x.gathered = true;
  }

  torch::Tensor work_shard_;  // with a 16-bit working dtype: the rank's chunks in it
  bool source_on_host_ = false;  // the gathers read host memory (offloaded parameters)
};

}  // namespace

const ZeroStage& zero_stage3() {
  static const ZeroStage s{3, Cadence::EveryForward, "weight gathers and gradient reduce-scatters",
                           &make_zero_engine<Stage3Engine>};
  return s;
}

}  // namespace accel
