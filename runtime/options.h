// The runtime's options (what accel_options carries), the strategies' names, and the
// helpers every runtime header needs. Internal: programs use include/accel/accel.h.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/compat.h"
#include "base/status.h"

namespace accel {

// Auto: bf16 where the device computes it natively (bf16_native), else fp32; the
// Accelerator resolves it once its device is known, so options() never holds Auto.
enum class Precision { No = 0, BF16 = 1, FP16 = 2, Auto = 3 };
enum class DeviceKind { Auto = 0, CPU = 1, CUDA = 2 };
// ZeRO stages as DeepSpeed numbers them (FSDP: SHARD_GRAD_OP ~ Zero2, FULL_SHARD ~ Zero3).
enum class Strategy { None = 0, DDP = 1, Zero1 = 2, Zero2 = 3, Zero3 = 4 };
// Optimizer: the optimizer's state and master weights in host memory (docs/memory.md);
// Parameters: that and, under ZeRO-3, each rank's shard of the working weights.
enum class Offload { None = 0, Optimizer = 1, Parameters = 2 };
const char* offload_name(Offload o);  // "none", "optimizer", "parameters"
inline bool is_zero(Strategy s) { return s == Strategy::Zero1 || s == Strategy::Zero2 || s == Strategy::Zero3; }
inline int zero_stage(Strategy s) { return is_zero(s) ? static_cast<int>(s) - 1 : 0; }
const char* strategy_name(Strategy s);
// "no", "ddp", "zero1".."zero3", "shard_grad_op", "full_shard" (any case); nullopt otherwise.
std::optional<Strategy> parse_strategy(const std::string& name);

struct Options {
  Precision precision = Precision::No;
  int gradient_accumulation_steps = 1;
  uint64_t seed = 0;
  DeviceKind device = DeviceKind::Auto;
  int device_index = 0;
  double loss_scale_init = 65536.0;
  double loss_scale_growth_factor = 2.0;
  double loss_scale_backoff_factor = 0.5;
  int loss_scale_growth_interval = 2000;
  int num_threads = 0;
  Strategy strategy = Strategy::None;       // with more than one process: how they share the work
  int64_t bucket_bytes = 25ll << 20;        // DDP: gradient bucket size
  std::string backend = "auto";             // a launched world's backend: auto, gloo, nccl
  double timeout_seconds = 300;             // real processes: joining and each collective
  Offload offload = Offload::None;          // what lives in host memory
};

// Validates options; throws Error(InvalidArgument) naming the bad field.
void validate(const Options& o);


// Human-readable "[32, 64]".
std::string shape_str(const torch::Tensor& t);

}  // namespace accel
