// Collectives on tensors, as the strategies make them: each tensor carries its device, and
// where the backend cannot reach it (Communicator::reaches) the data goes through the
// backend's home (Communicator::home: host memory, or nccl's GPU): copied there before the
// operation, copied back when its Work completes. Where the backend reaches the tensor
// nothing is copied. In-place forms follow
// NCCL's rules (all_gather: `send` is recv's slot of this rank; reduce_scatter: `recv` is
// send's slot), recognised from the tensors' storage.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "comm/communicator.h"

namespace accel::comm {

Device location_of(const torch::Tensor& t);

// The communicator's element type for a tensor's dtype (Unsupported for bool, complex...).
DataType dtype_of(c10::ScalarType t);

// Every tensor: contiguous, of a type dtype_of() knows. In place: send and recv the same.
std::shared_ptr<Work> all_reduce(Communicator& c, const torch::Tensor& t, RedOp op);
std::shared_ptr<Work> reduce_scatter(Communicator& c, const torch::Tensor& send, const torch::Tensor& recv, RedOp op);
std::shared_ptr<Work> all_gather(Communicator& c, const torch::Tensor& send, const torch::Tensor& recv);
std::shared_ptr<Work> broadcast(Communicator& c, const torch::Tensor& t, int root);

// The runtime's own host buffers (counters, flags, metadata): passed as they are where the
// backend reaches the host, else staged through its home (nccl's GPU). They wait.
void host_all_reduce(Communicator& c, void* buf, size_t count, DataType t, RedOp op);
void host_broadcast(Communicator& c, void* buf, size_t count, DataType t, int root);
void host_all_gather(Communicator& c, const void* send, void* recv, size_t sendcount, DataType t);

}  // namespace accel::comm
