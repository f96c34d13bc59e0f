// Memory estimates for training a causal LM (issue 16, `accel estimate-memory`): the bytes
// per GPU for weights, gradients, optimizer state, activations and the peak, for a
// config.json or a named shape, under a precision, optimizer, strategy, world size, batch,
// sequence length, gradient checkpointing and LoRA rank. docs/lm.md ("Memory estimates")
// gives the model and how it was validated against the simulator's per-rank peak.
//
// Light on purpose (no libtorch): the tool and the C ABI include it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel {

struct LMConfig;

enum class EstimateOptimizer { SGD = 0, Momentum = 1, AdamW = 2, Adafactor = 3, LAMB = 4 };
enum class EstimateAttention { Auto = 0, Eager = 1, Fused = 2 };

struct MemoryEstimateConfig {
  int precision = 0;            // 0 fp32, 1 bf16 autocast, 2 fp16 autocast (fp32 master weights)
  bool bf16_weights = false;    // parameters stored in bf16 (accel_lm_options.dtype), no autocast copies
  EstimateOptimizer optimizer = EstimateOptimizer::AdamW;
  int strategy = 0;             // accel_strategy: 0 none, 1 DDP, 2-4 ZeRO-1..3
  int world_size = 1;
  int64_t micro_batch = 1;
  int64_t seq_len = 0;          // 0: min(1024, max_position_embeddings)
  bool gradient_checkpointing = false;
  int64_t lora_rank = 0;        // 0: full fine-tuning
  std::vector<std::string> lora_targets;  // PEFT's names; empty: PEFT's default; {"all-linear"}
  EstimateAttention attention = EstimateAttention::Auto;  // Auto: the kernel this build runs
  int offload = 0;              // 1: the optimizer's state (and ZeRO's fp32 master) in host memory;
                                // 2 (ZeRO-3): and its working shard (Offload)
  int quantization = 0;         // the LoRA base's linear weights: 0 none, 1 NF4, 2 FP4, 3 int8 (QuantType)
  bool double_quant = false;    // NF4/FP4's absmax quantized again
};

struct MemoryEstimate {
  int64_t parameters = 0, trainable_parameters = 0;
  int64_t seq_len = 0;
  bool fused_attention = false;  // the attention kernel assumed (after Auto)
  // bytes per GPU (rank)
  double weights = 0;      // parameters (working copies, master shards, a LoRA model's frozen base)
  double gradients = 0;    // the gradients the strategy keeps (a DDP bucket, a ZeRO shard)
  double optimizer = 0;    // optimizer state
  double activations = 0;  // what autograd holds at the end of the forward (and autocast's weight copies)
  double temporaries = 0;  // the rest of the peak: backward's transients (the logits' gradient, a
                           // block recomputed under checkpointing, ZeRO's gathered units and buffers)
  double total = 0;        // the per-rank peak of a training step (device memory)
  double host = 0;         // the per-rank peak of host memory (offload; 0 without)
  double transfer_bytes = 0;  // bytes between device and host per optimizer step (offload)
  double gradient_transfer_bytes = 0;  // of which the gradients' copies, beside the backward
  std::string largest = "backward";  // the phase of the peak: "backward" or "optimizer step"
};

// A named shape's config.json text: gpt2, gpt2-medium, gpt2-large, gpt2-xl (OpenAI's GPT-2),
// llama-7b, llama-13b, llama-70b (Llama 2); tiny-llama (the example's). "" when unknown.
std::string named_lm_config(const std::string& name);
// The names named_lm_config knows, in order.
std::vector<std::string> named_lm_shapes();

// Throws Status::InvalidArgument naming the field for bad options, Status::Unsupported for a
// combination accel refuses at prepare (LAMB or Adafactor under ZeRO, bf16 weights under ZeRO).
MemoryEstimate estimate_memory(const LMConfig& cfg, const MemoryEstimateConfig& opts);
// `model`: a named shape, a config.json path, or a directory holding config.json.
MemoryEstimate estimate_memory(const std::string& model, const MemoryEstimateConfig& opts);

}  // namespace accel
