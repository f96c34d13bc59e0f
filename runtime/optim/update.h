// One SGD or AdamW update of one tensor: the arithmetic of libtorch's optimizers, written
// once. The unsharded Optimizer calls it per parameter, ZeRO per shard of the flattened
// parameters (the updates are elementwise, so a shard's update is the whole tensor's update
// restricted to it). Contiguous fp32 CPU tensors go through the fused kernels of kernels.h,
// split across libtorch's intra-op threads; other devices and dtypes through libtorch's ops,
// term by term the same.
#pragma once

#include <cstdint>

#include "runtime/optim/optimizer.h"

namespace accel {

// `step`: this tensor's 1-based update count (for the bias corrections).
void adamw_update(const AdamWConfig& c, double lr, int64_t step, const torch::Tensor& param, const torch::Tensor& grad,
                  const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq);
// `momentum_buffer`: allocated by the caller when momentum != 0 (`first`: it holds nothing
// yet and starts as this update).
void sgd_update(const SGDConfig& c, double lr, const torch::Tensor& param, const torch::Tensor& grad,
                const torch::Tensor& momentum_buffer, bool first);

}  // namespace accel
