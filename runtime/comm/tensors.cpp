// Collectives on tensors, staged through the host where the backend cannot reach them (tensors.h).
#include "runtime/comm/tensors.h"

#include <utility>
#include <vector>

#include "runtime/options.h"

namespace accel::comm {

namespace {

// Waits for the operation on the host copies, then copies the results back.
class StagedWork final : public Work {
 public:
  // `keep`: the host copies the operation reads, alive until it completes
  StagedWork(std::shared_ptr<Work> inner, std::vector<std::pair<torch::Tensor, torch::Tensor>> back,
             std::vector<torch::Tensor> keep = {})
      : inner_(std::move(inner)), back_(std::move(back)), keep_(std::move(keep)) {}
  void wait() override {
    inner_->wait();
    finish();
  }
  bool test() override {
    if (!inner_->test()) return false;
    wait();  // complete: rethrows a failure, else copies back
    return true;
  }

 private:
  void finish() {
    for (auto& [host, dev] : back_) dev.copy_(host);
    back_.clear();
    keep_.clear();
  }
  std::shared_ptr<Work> inner_;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> back_;  // (host result, device destination)
  std::vector<torch::Tensor> keep_;
};

void check(const torch::Tensor& t, const char* what) {
  ACCEL_CHECK(t.defined() && t.is_contiguous(), Status::Internal, "a collective's ", what, " must be a contiguous tensor");
}

// A copy in host memory (always a copy: the backend must not see the tensor's own memory).
torch::Tensor host_copy(const torch::Tensor& t) { return t.to(torch::TensorOptions().device(torch::kCPU), false, true); }

// `t` in host memory: a view of `base_host` where t lies in base's storage, else a copy.
torch::Tensor host_of(const torch::Tensor& t, const torch::Tensor& base, const torch::Tensor& base_host) {
  if (base.defined() && t.storage().is_alias_of(base.storage()))
    return base_host.view({-1}).narrow(0, t.storage_offset() - base.storage_offset(), t.numel());
  return host_copy(t);
}

size_t count(const torch::Tensor& t) { return static_cast<size_t>(t.numel()); }


}  // namespace

Device location_of(const torch::Tensor& t) {
  Device d;
  if (t.is_cuda()) {
    d.kind = Device::Kind::Cuda;
    d.index = t.get_device();
  }
  return d;
}

std::shared_ptr<Work> all_reduce(Communicator& c, const torch::Tensor& t, RedOp op) {
  check(t, "buffer");
  if (c.reaches(location_of(t)))
    return c.all_reduce(t.data_ptr(), t.data_ptr(), count(t), comm_dtype(t.scalar_type()), op);
  torch::Tensor h = host_copy(t);
  auto w = c.all_reduce(h.data_ptr(), h.data_ptr(), count(h), comm_dtype(h.scalar_type()), op);
  return std::make_shared<StagedWork>(std::move(w), std::vector<std::pair<torch::Tensor, torch::Tensor>>{{h, t}});
}

std::shared_ptr<Work> reduce_scatter(Communicator& c, const torch::Tensor& send, const torch::Tensor& recv, RedOp op) {
  check(send, "input");
  check(recv, "output");
  if (c.reaches(location_of(send)) && c.reaches(location_of(recv)))
    return c.reduce_scatter(send.data_ptr(), recv.data_ptr(), count(recv), comm_dtype(recv.scalar_type()), op);
  torch::Tensor hs = host_copy(send), hr = host_of(recv, send, hs);  // in place: recv is send's slot
  auto w = c.reduce_scatter(hs.data_ptr(), hr.data_ptr(), count(hr), comm_dtype(hr.scalar_type()), op);
  return std::make_shared<StagedWork>(std::move(w), std::vector<std::pair<torch::Tensor, torch::Tensor>>{{hr, recv}},
                                      std::vector<torch::Tensor>{hs});
}

std::shared_ptr<Work> all_gather(Communicator& c, const torch::Tensor& send, const torch::Tensor& recv) {
  check(send, "input");
  check(recv, "output");
  if (c.reaches(location_of(send)) && c.reaches(location_of(recv)))
    return c.all_gather(send.data_ptr(), recv.data_ptr(), count(send), comm_dtype(send.scalar_type()));
  torch::Tensor hr = host_copy(recv), hs = host_of(send, recv, hr);  // in place: send is recv's slot
  auto w = c.all_gather(hs.data_ptr(), hr.data_ptr(), count(hs), comm_dtype(hs.scalar_type()));
  return std::make_shared<StagedWork>(std::move(w), std::vector<std::pair<torch::Tensor, torch::Tensor>>{{hr, recv}},
                                      std::vector<torch::Tensor>{hs});
}

std::shared_ptr<Work> broadcast(Communicator& c, const torch::Tensor& t, int root) {
  check(t, "buffer");
  if (c.reaches(location_of(t)))
    return c.broadcast(t.data_ptr(), t.data_ptr(), count(t), comm_dtype(t.scalar_type()), root);
  torch::Tensor h = host_copy(t);
  auto w = c.broadcast(h.data_ptr(), h.data_ptr(), count(h), comm_dtype(h.scalar_type()), root);
  return std::make_shared<StagedWork>(std::move(w), std::vector<std::pair<torch::Tensor, torch::Tensor>>{{h, t}});
}

}  // namespace accel::comm
