// The C ABI: memory estimates (accel.h's section "Memory estimates"; `accel estimate-memory`).
#include "capi/internal.h"
#include "runtime/models/memory_estimate.h"

using namespace accel::capi;

extern "C" {

accel_status accel_memory_estimate_options_init(accel_memory_estimate_options* opts, uint32_t version) {
  return guard(nullptr, "accel_memory_estimate_options_init", [&] { init_options(opts, version); });
}

accel_status accel_estimate_memory(const char* model, const accel_memory_estimate_options* opts,
                                   accel_memory_estimate* out) {
  return guard(nullptr, "accel_estimate_memory", [&] {
    NEED(model);
    NEED(out);
    const size_t out_bytes = version_bytes<accel_memory_estimate>(out->version, "set out->version to ACCEL_MEMORY_ESTIMATE_VERSION");
    const accel_memory_estimate_options o = read_options(opts);
    accel::MemoryEstimateConfig c;
    c.precision = raw(o.mixed_precision);
    const int wd = raw(o.weights_dtype);
    ACCEL_CHECK(wd == ACCEL_FLOAT32 || wd == ACCEL_BFLOAT16, Status::InvalidArgument,
                "weights_dtype must be ACCEL_FLOAT32 or ACCEL_BFLOAT16, got ", wd);
    c.bf16_weights = wd == ACCEL_BFLOAT16;
    c.optimizer = static_cast<accel::EstimateOptimizer>(raw(o.optimizer));
    c.strategy = raw(o.strategy);
    c.world_size = o.world_size;
    c.micro_batch = o.micro_batch;
    c.seq_len = o.seq_len;
    c.gradient_checkpointing = o.gradient_checkpointing != 0;
    c.lora_rank = o.lora_rank;
    if (o.lora_target_modules) c.lora_targets = target_list(o.lora_target_modules);
    c.attention = static_cast<accel::EstimateAttention>(o.attention);
    const int off = raw(o.offload);
    ACCEL_CHECK(off == ACCEL_OFFLOAD_NONE || off == ACCEL_OFFLOAD_OPTIMIZER || off == ACCEL_OFFLOAD_PARAMETERS,
                Status::InvalidArgument,
                "offload must be ACCEL_OFFLOAD_NONE, ACCEL_OFFLOAD_OPTIMIZER or ACCEL_OFFLOAD_PARAMETERS, got ", off);
    c.offload = off;
    c.quantization = raw(o.quantization);
    c.double_quant = o.double_quant != 0;
    const accel::MemoryEstimate e = accel::estimate_memory(std::string(model), c);
    accel_memory_estimate r{};
    r.version = out->version;
    r.parameters = e.parameters;
    r.trainable_parameters = e.trainable_parameters;
    r.seq_len = e.seq_len;
    r.attention = e.fused_attention ? 2 : 1;
    auto bytes = [](double b) { return static_cast<uint64_t>(std::llround(b)); };
    r.weights = bytes(e.weights);
    r.gradients = bytes(e.gradients);
    r.optimizer_state = bytes(e.optimizer);
    r.activations = bytes(e.activations);
    r.temporaries = bytes(e.temporaries);
    r.total = bytes(e.total);
    r.host = bytes(e.host);
    r.transfer_bytes = bytes(e.transfer_bytes);
    r.gradient_transfer_bytes = bytes(e.gradient_transfer_bytes);
    std::memcpy(static_cast<void*>(out), &r, out_bytes);
  });
}

}  // extern "C"
