// Inference beside training (see inference.h).
#include "runtime/inference.h"

#include <ATen/Parallel.h>

#include "runtime/blas.h"
#include "base/status.h"

namespace accel {

// ---------------------------------------------------------------------------------------
// WeightChannel

uint64_t WeightChannel::publish(const std::vector<torch::Tensor>& weights, const std::vector<c10::ScalarType>& dtypes,
                               const torch::Device& device) {
  ACCEL_CHECK(dtypes.size() == weights.size(), Status::Internal, weights.size(), " weights to publish, ", dtypes.size(),
              " dtypes");
  Set* target = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& s : pool_)
      if (s.get() != latest_ && s->holders == 0) {
        target = s.get();
        break;
      }
  }
  // Only this thread publishes (the context's), and no copy adopts a set that is not the
  // latest: `target` stays unheld while it is filled, outside the mutex.
  std::unique_ptr<Set> fresh;
  if (target == nullptr) {
    fresh = std::make_unique<Set>();
    target = fresh.get();
  }
  {
    torch::NoGradGuard ng;
    if (target->tensors.size() != weights.size()) target->tensors.assign(weights.size(), torch::Tensor());
    for (size_t i = 0; i < weights.size(); ++i) {
      torch::Tensor& dst = target->tensors[i];
      const torch::Tensor& src = weights[i];
      if (!dst.defined() || dst.sizes() != src.sizes() || dst.scalar_type() != dtypes[i] || dst.device() != device)
        dst = torch::empty(src.sizes(), torch::TensorOptions().dtype(dtypes[i]).device(device));
      dst.copy_(src.detach());
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (fresh) pool_.push_back(std::move(fresh));
  target->version = ++versions_;
  target->published = std::chrono::steady_clock::now();
  latest_ = target;
  return target->version;
}

WeightChannel::Set* WeightChannel::adopt(Set* held) {
  std::lock_guard<std::mutex> lk(mu_);
  if (held == latest_) return held;
  if (held) --held->holders;
  if (latest_) ++latest_->holders;
  return latest_;
}

void WeightChannel::release(Set* held) {
  if (!held) return;
  std::lock_guard<std::mutex> lk(mu_);
  --held->holders;
}

size_t WeightChannel::sets() const {
  std::lock_guard<std::mutex> lk(mu_);
  return pool_.size();
}

// ---------------------------------------------------------------------------------------
// Inference

Inference::Inference(std::unique_ptr<Model> copy, std::shared_ptr<WeightChannel> channel, const torch::Device& device,
                     int num_threads)
    : model_(std::move(copy)), channel_(std::move(channel)), device_(device), threads_(num_threads) {
  model_->to(device_);
  model_->train(false);
  for (const auto& p : model_->parameters()) p.requires_grad_(false);
  adopt_latest();
}

Inference::~Inference() { channel_->release(held_); }

void Inference::adopt_latest() {
  WeightChannel::Set* s = channel_->adopt(held_);
  if (s == held_) return;
  held_ = s;
  if (!s) return;
  std::vector<torch::Tensor> own = model_->parameters();  // the model's own tensor objects: its forward reads them
  for (const auto& b : model_->buffers()) own.push_back(b);
  ACCEL_CHECK(s->tensors.size() == own.size(), Status::Internal, "the published weights hold ", s->tensors.size(),
              " tensors, the inference copy ", own.size());
  for (size_t i = 0; i < own.size(); ++i) own[i].set_data(s->tensors[i]);
}

torch::Tensor Inference::run(const std::vector<torch::Tensor>& inputs) {
  bool idle = false;
  ACCEL_CHECK(running_.compare_exchange_strong(idle, true), Status::InvalidState,
              "the inference copy is running on another thread (a copy runs on one thread at a time)");
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag.store(false); }
  } done{running_};
  // libtorch's OpenMP thread count is per thread: this thread's, once its own default is set
  at::get_num_threads();
  blas::set_calling_thread_threads(threads_, reinterpret_cast<const void*>(&at::get_num_threads));
  adopt_latest();
  std::vector<torch::Tensor> ins;
  ins.reserve(inputs.size());
  for (const auto& t : inputs) ins.push_back(t.device() == device_ ? t : t.to(device_));
  torch::Tensor out;
  {
    c10::InferenceMode guard;
    out = model_->forward(ins, ForwardMode{});
  }
  // an inference tensor may not enter autograd later (a loss's input): an ordinary copy
  return out.clone();
}

std::pair<uint64_t, double> Inference::weights() const {
  if (!held_) return {0, 0.0};
  const double age = std::chrono::duration<double>(std::chrono::steady_clock::now() - held_->published).count();
  return {held_->version, age};
}

}  // namespace accel
