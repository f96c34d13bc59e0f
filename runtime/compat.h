// The only place that knows which libtorch version accel is compiled against.
// Supported: Debian's libtorch 1.13 and the libtorch inside PyTorch 2.x wheels.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <cstring>
#include <string>
#include <utility>

#include "base/status.h"
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

// A fused attention kernel (at::scaled_dot_product_attention) exists from 2.1 on; callers
// check kHasFusedAttention before calling scaled_dot_product_attention, which elsewhere is an
// Internal error.
constexpr bool kHasFusedAttention = ACCEL_TORCH_AT_LEAST(2, 1);
inline at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                               const at::Tensor& bias, double scale) {
#if ACCEL_TORCH_AT_LEAST(2, 1)
  return at::scaled_dot_product_attention(q, k, v, bias, 0.0, /*is_causal=*/false, scale);
#else
  (void)q, (void)k, (void)v, (void)bias, (void)scale;
  fail(Status::Internal, "this libtorch has no fused attention (check compat::kHasFusedAttention first)");
#endif
}

// c10::Allocator: 2.3 made allocate() non-const and added the pure virtual copy_data(), which
// an allocator of host memory implements as memcpy.
#if ACCEL_TORCH_AT_LEAST(2, 3)
#define ACCEL_ALLOCATE_CONST
#define ACCEL_ALLOCATOR_COPY_DATA                                                  \
  void copy_data(void* dest, const void* src, std::size_t count) const override { \
    std::memcpy(dest, src, count);                                                 \
  }
#else
#define ACCEL_ALLOCATE_CONST const
#define ACCEL_ALLOCATOR_COPY_DATA
#endif

// What a libtorch error means as accel reports it: its exception type where libtorch gives one
// (OutOfMemoryError, IndexError, ValueError, TypeError, NotImplementedError), else its
// message, whose wording libtorch's versions keep (a failed CPU allocation is a plain
// c10::Error; so is a second backward through a freed graph). Everything else is Internal.
inline Status status_of(const c10::Error& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return Status::OutOfMemory;
  const std::string what = e.what_without_backtrace();
  // libtorch's CPU allocator reports a failed allocation as a plain c10::Error
  if (what.find("not enough memory") != std::string::npos || what.find("can't allocate memory") != std::string::npos)
    return Status::OutOfMemory;
  if (what.find("backward through the graph a second time") != std::string::npos) return Status::InvalidState;
  if (dynamic_cast<const c10::IndexError*>(&e) || dynamic_cast<const c10::ValueError*>(&e) ||
      dynamic_cast<const c10::TypeError*>(&e))
    return Status::InvalidArgument;
  if (dynamic_cast<const c10::NotImplementedError*>(&e)) return Status::Unsupported;
  return Status::Internal;
}

}  // namespace accel::compat
