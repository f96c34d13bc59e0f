// The runtime's options: their checks, the strategies' names (options.h).
#include "runtime/options.h"

#include <cctype>
#include <sstream>

#include "runtime/domain.h"

namespace accel {

void validate(const Options& o) {
  ACCEL_CHECK(o.precision == Precision::No || o.precision == Precision::BF16 || o.precision == Precision::FP16 ||
                  o.precision == Precision::Auto,
              Status::InvalidArgument, "mixed_precision must be 0 (no), 1 (bf16), 2 (fp16) or 3 (auto), got ",
              static_cast<int>(o.precision));
  domain::at_least("gradient_accumulation_steps", o.gradient_accumulation_steps, 1);
  ACCEL_CHECK(o.device == DeviceKind::Auto || o.device == DeviceKind::CPU || o.device == DeviceKind::CUDA,
              Status::InvalidArgument, "device must be 0 (auto), 1 (cpu) or 2 (cuda), got ", static_cast<int>(o.device));
  domain::at_least("device_index", o.device_index, 0);
  domain::positive("loss_scale_init", o.loss_scale_init);
  domain::above("loss_scale_growth_factor", o.loss_scale_growth_factor, 1);
  domain::open("loss_scale_backoff_factor", o.loss_scale_backoff_factor, 0, 1);
  domain::at_least("loss_scale_growth_interval", o.loss_scale_growth_interval, 1);
  domain::within("num_threads", o.num_threads, 0, 4096);
  ACCEL_CHECK(static_cast<int>(o.strategy) >= 0 && static_cast<int>(o.strategy) <= 4, Status::InvalidArgument,
              "strategy must be in [0, 4] (0 no, 1 DDP, 2-4 ZeRO stages 1-3), got ", static_cast<int>(o.strategy));
  domain::at_least("bucket_bytes", o.bucket_bytes, 1);
  ACCEL_CHECK(o.offload == Offload::None || o.offload == Offload::Optimizer || o.offload == Offload::Parameters,
              Status::InvalidArgument, "offload must be 0 (none), 1 (optimizer) or 2 (parameters), got ",
              static_cast<int>(o.offload));
  ACCEL_CHECK(o.offload != Offload::Parameters || o.strategy == Strategy::Zero3, Status::InvalidArgument,
              "offload 2 (parameters) keeps each rank's shard of the weights in host memory, which only ZeRO-3 "
              "shards: set strategy ZeRO-3, or offload 1 (optimizer)");
}

const char* offload_name(Offload o) {
  switch (o) {
    case Offload::Optimizer: return "optimizer";
    case Offload::Parameters: return "parameters";
    default: return "none";
  }
}

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::None: return "no";
    case Strategy::DDP: return "ddp";
    case Strategy::Zero1: return "zero1";
    case Strategy::Zero2: return "zero2";
    case Strategy::Zero3: return "zero3";
  }
  return "unknown";
}

std::optional<Strategy> parse_strategy(const std::string& name) {
  std::string v;
  for (char c : name) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "no" || v == "none" || v.empty()) return Strategy::None;
  if (v == "ddp" || v == "multi_gpu") return Strategy::DDP;
  if (v == "zero1" || v == "zero-1" || v == "zero_1") return Strategy::Zero1;
  if (v == "zero2" || v == "zero-2" || v == "zero_2" || v == "shard_grad_op") return Strategy::Zero2;
  if (v == "zero3" || v == "zero-3" || v == "zero_3" || v == "full_shard") return Strategy::Zero3;
  return std::nullopt;
}

std::string shape_str(const torch::Tensor& t) {
  std::ostringstream os;
  os << "[";
  for (int64_t i = 0; i < t.dim(); ++i) os << (i ? ", " : "") << t.size(i);
  os << "]";
  return os.str();
}

}  // namespace accel
