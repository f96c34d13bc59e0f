// Collectives on tensors, staged through the host where the backend cannot reach them (tensors.h).
#include "comm/tensors.h"

#include <utility>
#include <vector>

#include "base/status.h"

namespace accel::comm {

DataType dtype_of(c10::ScalarType t) {
  switch (t) {
    case torch::kChar: return DataType::Int8;
    case torch::kByte: return DataType::Uint8;
    case torch::kInt: return DataType::Int32;
    case torch::kLong: return DataType::Int64;
    case torch::kHalf: return DataType::Float16;
    case torch::kBFloat16: return DataType::BFloat16;
    case torch::kFloat: return DataType::Float32;
    case torch::kDouble: return DataType::Float64;
    default: fail(Status::Unsupported, "tensors of ", c10::toString(t), " cannot be communicated");
  }
}

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
  const Work* underlying() const override { return inner_->underlying(); }

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

// The backend's home as a libtorch device.
torch::Device home_of(const Communicator& c) {
  const Device d = c.home();
  return d.kind == Device::Kind::Cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(d.index))
                                      : torch::Device(torch::kCPU);
}

// A copy in the backend's home (always a copy: the backend must not see the tensor's own memory).
torch::Tensor staged_copy(const Communicator& c, const torch::Tensor& t) {
  return t.to(torch::TensorOptions().device(home_of(c)), false, true);
}

// `t` in the backend's home: a view of `base_host` where t lies in base's storage, else a copy.
torch::Tensor staged_of(const Communicator& c, const torch::Tensor& t, const torch::Tensor& base,
                      const torch::Tensor& base_host) {
  if (base.defined() && t.storage().is_alias_of(base.storage()))
    return base_host.view({-1}).narrow(0, t.storage_offset() - base.storage_offset(), t.numel());
  return staged_copy(c, t);
}

c10::ScalarType scalar_of(DataType t) {
  switch (t) {
    case DataType::Int8: return torch::kChar;
    case DataType::Uint8: return torch::kByte;
    case DataType::Int32: return torch::kInt;
    case DataType::Int64: return torch::kLong;
    case DataType::Float16: return torch::kHalf;
    case DataType::Float32: return torch::kFloat;
    case DataType::Float64: return torch::kDouble;
    case DataType::BFloat16: return torch::kBFloat16;
    default: fail(Status::Internal, "no libtorch type for the host buffer's ", dtype_name(t));
  }
}

// A host buffer as a tensor (no copy).
torch::Tensor wrap(const void* p, size_t n, DataType t) {
  return torch::from_blob(const_cast<void*>(p), {static_cast<int64_t>(n)}, torch::TensorOptions().dtype(scalar_of(t)));
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
    return c.all_reduce(t.data_ptr(), t.data_ptr(), count(t), dtype_of(t.scalar_type()), op);
  torch::Tensor h = staged_copy(c, t);
  auto w = c.all_reduce(h.data_ptr(), h.data_ptr(), count(h), dtype_of(h.scalar_type()), op);
  return std::make_shared<StagedWork>(std::move(w), std::vector<std::pair<torch::Tensor, torch::Tensor>>{{h, t}});
}

std::shared_ptr<Work> reduce_scatter(Communicator& c, const torch::Tensor& send, const torch::Tensor& recv, RedOp op) {
  check(send, "input");
  check(recv, "output");
  if (c.reaches(location_of(send)) && c.reaches(location_of(recv)))
    return c.reduce_scatter(send.data_ptr(), recv.data_ptr(), count(recv), dtype_of(recv.scalar_type()), op);
  torch::Tensor hs = staged_copy(c, send), hr = staged_of(c, recv, send, hs);  // in place: recv is send's slot
  auto w = c.reduce_scatter(hs.data_ptr(), hr.data_ptr(), count(hr), dtype_of(hr.scalar_type()), op);
  return std::make_shared<StagedWork>(std::move(w), std::vector<std::pair<torch::Tensor, torch::Tensor>>{{hr, recv}},
                                      std::vector<torch::Tensor>{hs});
}

std::shared_ptr<Work> all_gather(Communicator& c, const torch::Tensor& send, const torch::Tensor& recv) {
  check(send, "input");
  check(recv, "output");
  if (c.reaches(location_of(send)) && c.reaches(location_of(recv)))
    return c.all_gather(send.data_ptr(), recv.data_ptr(), count(send), dtype_of(send.scalar_type()));
  torch::Tensor hr = staged_copy(c, recv), hs = staged_of(c, send, recv, hr);  // in place: send is recv's slot
  auto w = c.all_gather(hs.data_ptr(), hr.data_ptr(), count(hs), dtype_of(hs.scalar_type()));
  return std::make_shared<StagedWork>(std::move(w), std::vector<std::pair<torch::Tensor, torch::Tensor>>{{hr, recv}},
                                      std::vector<torch::Tensor>{hs});
}

std::shared_ptr<Work> broadcast(Communicator& c, const torch::Tensor& t, int root) {
  check(t, "buffer");
  if (c.reaches(location_of(t)))
    return c.broadcast(t.data_ptr(), t.data_ptr(), count(t), dtype_of(t.scalar_type()), root);
  torch::Tensor h = staged_copy(c, t);
  auto w = c.broadcast(h.data_ptr(), h.data_ptr(), count(h), dtype_of(h.scalar_type()), root);
  return std::make_shared<StagedWork>(std::move(w), std::vector<std::pair<torch::Tensor, torch::Tensor>>{{h, t}});
}

void host_all_reduce(Communicator& c, void* buf, size_t count, DataType t, RedOp op) {
  if (c.reaches(Device{}))
    c.all_reduce(buf, buf, count, t, op)->wait();
  else
    all_reduce(c, wrap(buf, count, t), op)->wait();
}

void host_broadcast(Communicator& c, void* buf, size_t count, DataType t, int root) {
  if (c.reaches(Device{}))
    c.broadcast(buf, buf, count, t, root)->wait();
  else
    broadcast(c, wrap(buf, count, t), root)->wait();
}

void host_all_gather(Communicator& c, const void* send, void* recv, size_t sendcount, DataType t) {
  if (c.reaches(Device{}))
    c.all_gather(send, recv, sendcount, t)->wait();
  else
    all_gather(c, wrap(send, sendcount, t), wrap(recv, sendcount * static_cast<size_t>(c.size()), t))->wait();
}

}  // namespace accel::comm
