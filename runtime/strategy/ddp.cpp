// DDP: parameters from rank 0 at prepare; gradients averaged in buckets filled in reverse
// parameter order, each launched as soon as all its gradients are ready during backward
// (the gradients are views into their bucket, as DDP's gradient_as_bucket_view).
#include "runtime/strategy/ddp.h"

#include <deque>

#include "comm/kernels.h"
#include "comm/tensors.h"

namespace accel {

namespace {

class DataParallel final : public ParallelStrategy {
 public:
  using ParallelStrategy::ParallelStrategy;
  ~DataParallel() override { *owner_ = nullptr; }

  void check(const Model* model, const Optimizer* opt) const override {
    (void)model, (void)opt;
    for (comm::Collective c : {comm::Collective::AllReduce, comm::Collective::Broadcast})
      ACCEL_CHECK(comm_.supports(c, comm::DataType::Float32), Status::Unsupported, "strategy ddp needs ",
                  comm::collective_name(c), " of float32, which the '", comm_.backend(), "' communication backend lacks");
  }

  void prepare(Model& model) override {
    model_ = &model;
    if (opts_.precision == Precision::FP16 && device_.is_cpu()) model.set_grad_rounding(true);
    const auto& params = model.parameters();
    // the same starting weights (and buffers, such as running statistics) everywhere: rank 0's
    broadcast_from_rank0(comm_, model);
    bucket_of_.assign(params.size(), {0, 0});
    for (const auto& group : reverse_buckets(params, opts_.bucket_bytes)) {
      Bucket b;
      b.layout = FlatLayout::of(group, params);
      for (size_t slot = 0; slot < group.size(); ++slot) bucket_of_[group[slot]] = {buckets_.size(), slot};
      buckets_.push_back(std::move(b));
    }
    for (size_t k = 0; k < params.size(); ++k)
      accumulators_.push_back(on_grad_accumulated(params[k], [owner = owner_, k] {
        if (DataParallel* d = *owner) d->accumulated(k);
      }));
  }

  Cadence cadence() const override { return Cadence::OnSync; }
  const char* collectives_noun() const override { return "gradient synchronisations"; }

  void backward(const torch::Tensor& scaled_loss, bool sync, int64_t rows) override {
    rows_ = rows;
    averaging_.clear();  // (a backward that failed may have left some)
    sync_now_ = sync;  // DDP communicates during the backward that completes the gradients only
    in_backward_ = true;
    struct Done {
      DataParallel& d;
      ~Done() { d.in_backward_ = d.sync_now_ = false; }
    } done{*this};
    scaled_loss.backward();
    if (sync)
      finish();
    else
      charge(4.0 * static_cast<double>(rows) * static_cast<double>(model_->num_elements()), "backward");
  }

  void zero_grad(Optimizer& opt) override {
    ParallelStrategy::zero_grad(opt);
    for (auto& b : buckets_) b.flat = torch::Tensor();  // the gradients (views) were reset
  }

 private:
  struct Bucket {
    FlatLayout layout;
    torch::Tensor flat;  // the bucket's gradients, averaged in place; allocated at the first
                         // gradient of a step, freed at the step
    size_t ready = 0;
    std::shared_ptr<comm::Work> work;
  };

  torch::Tensor& flat_of(Bucket& b, const torch::Tensor& like, bool zeros) {
    if (!b.flat.defined()) {
      const auto o = torch::dtype(like.scalar_type()).device(like.device());
      b.flat = zeros ? torch::zeros({b.layout.numel}, o) : torch::empty({b.layout.numel}, o);
    }
    return b.flat;
  }

  // After autograd accumulated parameter k's gradient.
  void accumulated(size_t k) {
    if (!in_backward_) return;
    const auto& p = model_->parameters()[k];
    auto [bi, slot] = bucket_of_[k];
    Bucket& b = buckets_[bi];
    // every slot is written before the all-reduce: here, or zeroed in finish()
    grad_into_slot(p, flat_of(b, p, false), b.layout.offsets[slot]);
    if (!sync_now_ || b.work) return;
    if (++b.ready == b.layout.params.size()) launch(b);
  }

  void launch(Bucket& b) {
    charge(4.0 * static_cast<double>(rows_) * static_cast<double>(b.layout.numel), "backward");
    if (presum_ && b.flat.is_floating_point()) {
      // NCCL's avg on a floating type is a pre-multiply by 1/n rounded to the type, then a sum
      // (src/enqueue.cc turns ncclAvg into ncclDevPreMulSum), and NVLink SHARP runs no
      // pre-multiply: NCCL takes the ring. The same multiply here, then a sum: the same bits on
      // the ring and the tree, and NCCL (the simulator with it) may choose NVLS on one
      // H100/H200 node, as it does for PyTorch's DDP (which divides, then sums).
      b.flat.mul_(comm::avg_factor(comm::dtype_of(b.flat.scalar_type()), comm_.size()));
      b.work = comm::all_reduce(comm_, b.flat, comm::RedOp::Sum);
    } else {
      b.work = comm::all_reduce(comm_, b.flat, comm::RedOp::Avg);
    }
    if (offloads_grads()) {
      averaging_.push_back(&b);
      copy_averaged(false);
    }
  }

  // Offload: each bucket's average goes to the host once complete, in launch order, while
  // the backward goes on (`all`: waits for the rest, at its end).
  void copy_averaged(bool all) {
    while (!averaging_.empty()) {
      Bucket& b = *averaging_.front();
      if (all)
        b.work->wait();
      else if (!b.work->test())
        return;
      grads_to_host(b.flat, b.layout.params, b.layout.offsets, b.work.get());
      averaging_.pop_front();
    }
  }

  // Launches the buckets not complete yet (parameters unused in this forward get zeros, so
  // every rank launches the same collectives), then waits for every average.
  void finish() {
    const auto& params = model_->parameters();
    for (auto& b : buckets_) {
      if (b.work) continue;
      for (size_t i = 0; i < b.layout.params.size(); ++i) {
        const auto& p = params[b.layout.params[i]];
        grad_into_slot(p, flat_of(b, p, true), b.layout.offsets[i]);
      }
      launch(b);
    }
    copy_averaged(true);
    for (auto& b : buckets_) {
      b.work->wait();
      b.work.reset();
      b.ready = 0;
    }
  }

  std::vector<Bucket> buckets_;
  std::deque<Bucket*> averaging_;  // offload: launched, not yet copied to the host
  std::vector<std::pair<size_t, size_t>> bucket_of_;  // param -> (bucket, slot)
  std::vector<compat::GradAccumulator> accumulators_;  // keeps the post hooks alive
  bool in_backward_ = false, sync_now_ = false;
  // the backends with NCCL's semantics (real NCCL and the simulator) average as pre-multiply
  // and sum; Gloo and its shared memory keep their own average, fused in one pass
  const bool presum_ = comm_.size() > 1 && (comm_.backend() == "nccl" || comm_.backend() == "sim");
  int64_t rows_ = 0;
  // gradient hooks outlive nothing: they reach the strategy through this, cleared on destruction
  std::shared_ptr<DataParallel*> owner_ = std::make_shared<DataParallel*>(this);
};

}  // namespace

std::unique_ptr<ParallelStrategy> make_ddp(const StrategySetup& setup) { return std::make_unique<DataParallel>(setup); }

}  // namespace accel
