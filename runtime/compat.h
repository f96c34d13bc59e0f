// The only place that knows which libtorch version accel is compiled against.
// Supported: Debian's libtorch 1.13 and the libtorch inside PyTorch 2.x wheels.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <string>
#include <utility>

#include "runtime/torch_version.h"

namespace accel::compat {

// A parameter's gradient accumulator, as libtorch hands it out: std::shared_ptr<Node> up to
// 2.x's move to c10::intrusive_ptr<Node>. Holding it keeps the post hooks alive.
using GradAccumulator = decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

// Autocast: 2.4 replaced the per-device functions with ones taking a device type.
inline bool autocast_enabled(c10::DeviceType type) {
#if ACCEL_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

inline void set_autocast_enabled(c10::DeviceType type, bool enabled) {
#if ACCEL_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(type, enabled);
#else
  if (type == c10::DeviceType::CUDA)
    at::autocast::set_enabled(enabled);
  else
    at::autocast::set_cpu_enabled(enabled);
#endif
}

inline c10::ScalarType autocast_dtype(c10::DeviceType type) {
#if ACCEL_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                       : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void set_autocast_dtype(c10::DeviceType type, c10::ScalarType dtype) {
#if ACCEL_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(type, dtype);
#else
  if (type == c10::DeviceType::CUDA)
    at::autocast::set_autocast_gpu_dtype(dtype);
  else
    at::autocast::set_autocast_cpu_dtype(dtype);
#endif
}

// RAII: autocast on `type` with `dtype` for the guard's lifetime, restoring the previous
// thread-local state afterwards.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType type, c10::ScalarType dtype)
      : type_(type), prev_enabled_(autocast_enabled(type)), prev_dtype_(autocast_dtype(type)) {
    set_autocast_enabled(type_, true);
    set_autocast_dtype(type_, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_autocast_enabled(type_, prev_enabled_);
    set_autocast_dtype(type_, prev_dtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType type_;
  bool prev_enabled_;
  c10::ScalarType prev_dtype_;
};

}  // namespace accel::compat
