// Mixed precision: dynamic loss scaling (fp16) and fp16 emulated by rounding where a device
// has no fp16 kernels. Autocast itself is the Accelerator's forward (accelerator.cpp).
#pragma once

#include "runtime/options.h"

#include <vector>

namespace accel {

// Rounds a float tensor through float16 and back, in both directions of autograd: the
// forward value and the gradient flowing back are both representable in float16 (values
// beyond 65504 become inf, tiny ones flush to zero), which is what a GPU holding them in
// fp16 would see. Used to emulate fp16 where no fp16 kernels exist.
torch::Tensor round_through_fp16(const torch::Tensor& x);

// Whether bf16 is fast on this device: on a CUDA device, yes (Ampere and later compute it
// natively; earlier GPUs emulate it); on the CPU, where the processor has AVX-512 BF16 or
// AMX-BF16 (and the OS saves their registers) and ONEDNN_MAX_CPU_ISA/DNNL_MAX_CPU_ISA do not
// hold oneDNN below them. Elsewhere libtorch's CPU bf16 matmuls run without bf16
// instructions: 3.6-17x slower than fp32 on AVX2 (docs/performance.md). `why` (optional)
// gets a phrase that says what was found ("AVX-512 BF16", "no AVX-512 BF16 or AMX-BF16").
bool bf16_native(const torch::Device& device, std::string* why = nullptr);


// Dynamic loss scaling with torch.cuda.amp.GradScaler's update rule, written with generic
// tensor ops so it runs on every device.
class LossScaler {
 public:
  LossScaler(bool enabled, double init, double growth, double backoff, int interval)
      : enabled_(enabled), scale_(enabled ? init : 1.0), growth_(growth), backoff_(backoff), interval_(interval) {}
  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  // What unscale multiplies by: as torch.cuda.amp, the reciprocal in double, applied in fp32.
  double inv_scale() const { return static_cast<double>(static_cast<float>(1.0 / scale_)); }
  int growth_tracker() const { return tracker_; }
  void restore(double scale, int tracker) {
    scale_ = scale;
    tracker_ = tracker;
  }
  // Multiplies every defined gradient by 1/scale; returns true when any holds inf/NaN.
  bool unscale(const std::vector<torch::Tensor>& params) const;
  // After a real step: back off on overflow, else grow every `interval` clean steps.
  void update(bool found_inf);

 private:
  bool enabled_;
  double scale_;
  double growth_, backoff_;
  int interval_;
  int tracker_ = 0;
};

}  // namespace accel
