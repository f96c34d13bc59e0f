// Inference beside training, for a loop that keeps its rate while its model learns
// (accel_inference_*, accel_publish_weights; docs/on-device.md).
//
// The trainer publishes its model's weights into a WeightChannel: a pool of weight sets,
// one of them the latest. Publishing copies into a set that no inference copy holds (a new
// one when all are held) and then makes it the latest; an Inference adopts the latest set
// at the start of a run by pointing its parameters at that set's tensors (set_data: no
// copy). The channel's mutex guards only pointers and counts, so neither side waits for
// the other's work: a run never waits for a publication, nor a publication for a run.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/model.h"

namespace accel {

class WeightChannel {
 public:
  struct Set {
    std::vector<torch::Tensor> tensors;
    uint64_t version = 0;
    std::chrono::steady_clock::time_point published;
    int holders = 0;  // inference copies using it (under the channel's mutex)
  };

  // Copies `weights` (the model's parameters, whole, then its buffers) into a set no copy
  // holds, as `dtypes` on `device`, and makes it the latest. Returns its version (1, 2, ...).
  uint64_t publish(const std::vector<torch::Tensor>& weights, const std::vector<c10::ScalarType>& dtypes,
                   const torch::Device& device);
  // The latest set, held (the one `held` pointed at, if any, released): `held` itself when
  // it is still the latest. Null before the first publication.
  Set* adopt(Set* held);
  void release(Set* held);
  // Sets allocated so far (the pool grows only while every set is held or the latest).
  size_t sets() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Set>> pool_;
  Set* latest_ = nullptr;
  uint64_t versions_ = 0;
};

class Inference {
 public:
  // `copy`: Model::clone() of the trained model; it is moved to `device`, put in evaluation
  // mode, its parameters made to need no gradient, and it adopts the channel's latest set
  // (its parameters, then its buffers, take that set's tensors).
  Inference(std::unique_ptr<Model> copy, std::shared_ptr<WeightChannel> channel, const torch::Device& device,
            int num_threads);
  ~Inference();
  Inference(const Inference&) = delete;
  Inference& operator=(const Inference&) = delete;

  // The forward with the latest published weights, without autograd, on the calling thread
  // with num_threads intra-op threads. InvalidState when another thread's run is in progress.
  torch::Tensor run(const std::vector<torch::Tensor>& inputs);
  // The version of the weights in use and how many seconds ago it was published.
  std::pair<uint64_t, double> weights() const;

 private:
  void adopt_latest();

  std::unique_ptr<Model> model_;
  std::shared_ptr<WeightChannel> channel_;
  torch::Device device_;
  int threads_;
  WeightChannel::Set* held_ = nullptr;
  std::atomic<bool> running_{false};
};

}  // namespace accel
