// Memory estimates for training a causal LM: see memory_estimate.h and docs/lm.md
// ("Memory estimates").
//
// The model state (weights, gradients, optimizer state) is exact arithmetic over the
// strategy's layout (runtime/strategy/: DDP's buckets, ZeRO's fp32 master shards and 16-bit
// working copies). The activations are what autograd saves, per token and per block, in
// bytes: the coefficients below were counted from accel's blocks (runtime/models/llama.cpp,
// gpt2.cpp) and measured on the simulator's per-rank budget (the MemoryEstimate tests), for
// each family, precision and attention kernel:
//   eager: libtorch < 2.1 (or attention dropout in training): the softmax probabilities,
//          B x H x T x T fp32, are saved, and the query and key are copied for the matmuls;
//   fused: scaled_dot_product_attention saves its output and log-sum-exp only.
// The peak is the larger of the backward's (everything saved, plus the logits' gradient or the
// gradient buffers the strategy allocates, plus one attention's T x T gradient or one block
// recomputed under checkpointing) and the optimizer step's (weights, gradients, state).
#include "runtime/models/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "runtime/models/transformer.h"
#include "base/status.h"
#include "runtime/compat.h"

namespace accel {

namespace {

// Bytes per token and per block that autograd keeps, by element class: E (hidden), HD
// (heads x head_dim), I (intermediate), per head, per head and key position (T x T scores).
struct BlockBytes {
  double e, hd, i, head, head_t;
};
// Bytes per token after the last block (the final norm's saved tensors, ids, labels).
struct FinalBytes {
  double e, constant;
};

enum Mode { kFP32 = 0, kMixed = 1, kPure = 2 };

// [family][fused][mode]; GPT-2's attention width is E (hd = 0).
const BlockBytes kBlock[2][2][3] = {
    // GPT-2
    {{{32, 0, 8, 0, 4}, {26, 0, 4, 0, 4}, {22, 0, 4, 0, 4}},          // eager
     {{32, 0, 8, 16, 0}, {30, 0, 4, 16, 0}, {26, 0, 4, 16, 0}}},      // fused
    // Llama
    {{{24, 24, 16, 0, 4}, {24, 24, 8, 0, 4}, {20, 19, 8, 0, 4}},      // eager
     {{24, 16, 16, 16, 0}, {24, 20, 8, 16, 0}, {20, 14, 8, 16, 0}}},  // fused
};
const FinalBytes kFinal[2][2][3] = {
    {{{8, 18}, {6, 18}, {4, 14}}, {{8, 18}, {6, 18}, {4, 14}}},
    {{{12, 366}, {12, 108}, {12, 12}}, {{12, 44}, {10, 12}, {8, 12}}},
};

struct Module {
  std::string name;   // as PEFT matches it ("self_attn.q_proj")
  int64_t in, out;    // features
  bool bias;
  int input;          // which saved input it reads (modules sharing one share the tensor)
  char input_class;   // 'E', 'H' (heads x head_dim) or 'I'
};

std::vector<Module> block_modules(const LMConfig& c) {
  const int64_t E = c.hidden_size, I = c.intermediate_size, HD = c.num_heads * c.head_dim,
                KV = c.num_kv_heads * c.head_dim;
  if (c.family == LMFamily::GPT2)
    return {{"attn.c_attn", E, 3 * E, true, 0, 'E'},
            {"attn.c_proj", E, E, true, 1, 'E'},
            {"mlp.c_fc", E, I, true, 2, 'E'},
            {"mlp.c_proj", I, E, true, 3, 'I'}};
  if (c.fused_projections)  // Phi-3
    return {{"self_attn.qkv_proj", E, HD + 2 * KV, false, 0, 'E'}, {"self_attn.o_proj", HD, E, false, 1, 'H'},
            {"mlp.gate_up_proj", E, 2 * I, false, 2, 'E'}, {"mlp.down_proj", I, E, false, 3, 'I'}};
  const bool llama = c.model_type == "llama" || c.model_type == "smollm3";  // their attention_bias and mlp_bias
  const bool ab = llama ? c.attention_bias : c.qkv_bias, ob = llama ? c.attention_bias : c.o_bias,
             mb = llama && c.mlp_bias;
  return {{"self_attn.q_proj", E, HD, ab, 0, 'E'}, {"self_attn.k_proj", E, KV, ab, 0, 'E'},
          {"self_attn.v_proj", E, KV, ab, 0, 'E'}, {"self_attn.o_proj", HD, E, ob, 1, 'H'},
          {"mlp.gate_proj", E, I, mb, 2, 'E'},     {"mlp.up_proj", E, I, mb, 2, 'E'},
          {"mlp.down_proj", I, E, mb, 3, 'I'}};
}

bool targeted(const std::string& module, const std::vector<std::string>& targets) {
  if (targets.size() == 1 && targets[0] == "all-linear") return true;
  const std::string full = "model.layers.0." + module;  // PEFT's rule: equal, or ends with "." + target
  for (const auto& t : targets)
    if (full == t || (full.size() > t.size() && full.compare(full.size() - t.size(), t.size(), t) == 0 &&
                      full[full.size() - t.size() - 1] == '.'))
      return true;
  return false;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ACCEL_CHECK(f.good(), Status::IO, "cannot read ", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const std::map<std::string, std::string>& shapes() {
  static const std::map<std::string, std::string> s = {
      {"gpt2", R"({"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024})"},
      {"gpt2-medium", R"({"model_type": "gpt2", "vocab_size": 50257, "n_embd": 1024, "n_layer": 24, "n_head": 16, "n_positions": 1024})"},
      {"gpt2-large", R"({"model_type": "gpt2", "vocab_size": 50257, "n_embd": 1280, "n_layer": 36, "n_head": 20, "n_positions": 1024})"},
      {"gpt2-xl", R"({"model_type": "gpt2", "vocab_size": 50257, "n_embd": 1600, "n_layer": 48, "n_head": 25, "n_positions": 1024})"},
      {"llama-7b", R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
          "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 4096,
          "rms_norm_eps": 1e-5})"},
      {"llama-13b", R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 5120, "intermediate_size": 13824,
          "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 40, "max_position_embeddings": 4096,
          "rms_norm_eps": 1e-5})"},
      {"llama-70b", R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 8192, "intermediate_size": 28672,
          "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "max_position_embeddings": 4096,
          "rms_norm_eps": 1e-5})"},
      // the published models' shapes (issue 36; their parameter counts, as transformers builds
      // them, in tests/scripts/check_estimate.sh)
      {"llama-3.2-1b", R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
          "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
          "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": true,
          "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})"},
      {"llama-3.2-3b", R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 3072, "intermediate_size": 8192,
          "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128,
          "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": true,
          "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})"},
      {"llama-3.1-8b", R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
          "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
          "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
          "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})"},
      {"qwen2.5-0.5b", R"({"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
          "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768,
          "tie_word_embeddings": true, "rope_theta": 1000000.0})"},
      {"qwen2.5-1.5b", R"({"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960,
          "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2, "max_position_embeddings": 32768,
          "tie_word_embeddings": true, "rope_theta": 1000000.0})"},
      {"qwen2.5-7b", R"({"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
          "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 32768,
          "rope_theta": 1000000.0})"},
      {"qwen3-0.6b", R"({"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
          "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
          "max_position_embeddings": 40960, "tie_word_embeddings": true, "rope_theta": 1000000.0})"},
      {"mistral-7b", R"({"model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
          "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 32768,
          "rms_norm_eps": 1e-5, "sliding_window": 4096})"},
      {"phi-3-mini", R"({"model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192,
          "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 4096,
          "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "sliding_window": 2047})"},
      {"gemma-2-2b", R"({"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
          "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
          "max_position_embeddings": 8192, "query_pre_attn_scalar": 256, "sliding_window": 4096})"},
      {"gemma-3-1b", R"({"model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 1152, "intermediate_size": 6912,
          "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
          "max_position_embeddings": 32768, "query_pre_attn_scalar": 256, "sliding_window": 512,
          "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0})"},
      {"smollm2-135m", R"({"model_type": "llama", "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
          "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "max_position_embeddings": 8192,
          "rms_norm_eps": 1e-5, "tie_word_embeddings": true, "rope_theta": 100000.0})"},
      {"smollm2-1.7b", R"({"model_type": "llama", "vocab_size": 49152, "hidden_size": 2048, "intermediate_size": 8192,
          "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 8192,
          "rms_norm_eps": 1e-5, "tie_word_embeddings": true, "rope_theta": 130000.0})"},
      {"smollm3-3b", R"({"model_type": "smollm3", "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 11008,
          "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 4, "max_position_embeddings": 65536,
          "tie_word_embeddings": true, "rope_theta": 5000000.0})"},
      {"tiny-llama", R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 256, "intermediate_size": 688,
          "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 256})"},  // examples/c/train_lm.c's
  };
  return s;
}

}  // namespace

std::string named_lm_config(const std::string& name) {
  auto it = shapes().find(name);
  return it == shapes().end() ? std::string() : it->second;
}

std::vector<std::string> named_lm_shapes() {
  return {"gpt2",         "gpt2-medium",  "gpt2-large",   "gpt2-xl",    "llama-7b",   "llama-13b",
          "llama-70b",    "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "qwen2.5-0.5b", "qwen2.5-1.5b",
          "qwen2.5-7b",   "qwen3-0.6b",   "mistral-7b",   "phi-3-mini", "gemma-2-2b",   "gemma-3-1b",
          "smollm2-135m", "smollm2-1.7b", "smollm3-3b",   "tiny-llama"};
}

MemoryEstimate estimate_memory(const LMConfig& c, const MemoryEstimateConfig& o) {
  ACCEL_CHECK(o.precision >= 0 && o.precision <= 2, Status::InvalidArgument,
              "mixed_precision must be 0 (no), 1 (bf16) or 2 (fp16), got ", o.precision,
              o.precision == 3 ? " (auto is decided by accel_init for the device at hand: estimate bf16 or no)" : "");
  ACCEL_CHECK(o.strategy >= 0 && o.strategy <= 4, Status::InvalidArgument,
              "strategy must be 0 (none), 1 (DDP) or 2-4 (ZeRO-1..3), got ", o.strategy);
  ACCEL_CHECK(static_cast<int>(o.optimizer) >= 0 && static_cast<int>(o.optimizer) <= 4, Status::InvalidArgument,
              "optimizer must be 0 (SGD), 1 (SGD with momentum), 2 (AdamW), 3 (Adafactor) or 4 (LAMB), got ",
              static_cast<int>(o.optimizer));
  ACCEL_CHECK(static_cast<int>(o.attention) >= 0 && static_cast<int>(o.attention) <= 2, Status::InvalidArgument,
              "attention must be 0 (this build's kernel), 1 (eager) or 2 (fused), got ", static_cast<int>(o.attention));
  ACCEL_CHECK(o.world_size >= 1, Status::InvalidArgument, "world_size must be >= 1, got ", o.world_size);
  ACCEL_CHECK(o.strategy != 0 || o.world_size == 1, Status::InvalidArgument,
              "world_size ", o.world_size, " needs a strategy (DDP or ZeRO): without one every process trains alone");
  ACCEL_CHECK(o.micro_batch >= 1, Status::InvalidArgument, "micro_batch must be >= 1, got ", o.micro_batch);
  ACCEL_CHECK(o.seq_len >= 0, Status::InvalidArgument, "seq_len must be >= 0 (0: the default), got ", o.seq_len);
  ACCEL_CHECK(o.lora_rank >= 0, Status::InvalidArgument, "lora_rank must be >= 0 (0: full fine-tuning), got ",
              o.lora_rank);
  ACCEL_CHECK(!(o.strategy >= 2 && o.optimizer == EstimateOptimizer::LAMB), Status::Unsupported,
              "ZeRO shards SGD, AdamW and Adafactor, not LAMB (its trust ratio needs whole tensors)");
  ACCEL_CHECK(!(o.strategy >= 2 && o.bf16_weights && o.lora_rank == 0), Status::Unsupported,
              "ZeRO shards fp32 parameters: with bf16 weights use mixed precision instead");
  ACCEL_CHECK(!(o.bf16_weights && o.precision != 0), Status::InvalidArgument,
              "bf16 weights train without autocast (mixed_precision 0): the weights are already 16-bit");
  ACCEL_CHECK(o.quantization >= 0 && o.quantization <= 3, Status::InvalidArgument,
              "quantization must be 0 (none), 1 (NF4), 2 (FP4) or 3 (int8), got ", o.quantization);
  ACCEL_CHECK(o.quantization == 0 || o.lora_rank > 0, Status::InvalidArgument,
              "a quantized base trains through LoRA adapters: set lora_rank (QLoRA)");
  ACCEL_CHECK(!o.double_quant || o.quantization == 1 || o.quantization == 2, Status::InvalidArgument,
              "double_quant quantizes NF4's or FP4's absmax: it needs quantization NF4 or FP4");
  ACCEL_CHECK(o.offload >= 0 && o.offload <= 2, Status::InvalidArgument,
              "offload must be 0 (none), 1 (optimizer) or 2 (parameters), got ", o.offload);
  ACCEL_CHECK(o.offload != 2 || o.strategy == 4, Status::InvalidArgument,
              "offload 2 (parameters) keeps each rank's shard of the weights in host memory, which only ZeRO-3 shards");
  ACCEL_CHECK(!(o.offload && o.optimizer == EstimateOptimizer::LAMB), Status::Unsupported,
              "offload steps SGD, AdamW and Adafactor in shards, not LAMB (its trust ratio needs whole tensors)");

  MemoryEstimate r;
  const int fam = c.family == LMFamily::GPT2 ? 0 : 1;
  const double V = static_cast<double>(c.vocab_size), E = static_cast<double>(c.hidden_size),
               I = static_cast<double>(c.intermediate_size), H = static_cast<double>(c.num_heads),
               HD = static_cast<double>(c.num_heads * c.head_dim), L = static_cast<double>(c.num_layers);
  const int64_t T = o.seq_len > 0 ? o.seq_len : std::min<int64_t>(1024, c.max_position_embeddings);
  ACCEL_CHECK(c.family == LMFamily::Llama || T <= c.max_position_embeddings, Status::InvalidArgument, "seq_len ", T,
              " is longer than the model's ", c.max_position_embeddings, " positions");
  r.seq_len = T;
  const double B = static_cast<double>(o.micro_batch), Tn = static_cast<double>(T), R = B * Tn;
  const int N = o.world_size;
  bool fused = o.attention == EstimateAttention::Fused;
  if (o.attention == EstimateAttention::Auto) {
    // libtorch's fused kernel where it has one; dropout runs the eager path
    fused = compat::kHasFusedAttention && !(c.attention_dropout > 0 || c.attn_pdrop > 0);
  }
  r.fused_attention = fused;
  const bool zero = o.strategy >= 2;
  const bool lora = o.lora_rank > 0;
  // ZeRO's working weights are 16-bit under autocast: the blocks then save what bf16 weights
  // do (measured: the same bytes); a LoRA base stays fp32 (ZeRO holds only the adapters)
  const Mode mode = o.bf16_weights || (o.precision != 0 && zero && !lora) ? kPure : o.precision != 0 ? kMixed : kFP32;

  // parameters
  const auto mods = block_modules(c);
  double block_linear = 0, block_params = 0, largest_param = 0;
  for (const auto& m : mods) {
    const double w = static_cast<double>(m.in * m.out), b = m.bias ? static_cast<double>(m.out) : 0.0;
    block_linear += w + b;
    largest_param = std::max(largest_param, w);
  }
  block_params = block_linear + (fam == 0 ? 4 * E : 2 * E);  // two norms (GPT-2: weight and bias)
  if (c.qk_norm) block_params += 2.0 * static_cast<double>(c.head_dim);  // Qwen3's and Gemma 3's q_norm and k_norm
  if (c.gemma) block_params += 2 * E;  // Gemma's pre_ and post_feedforward_layernorm
  const double embed = V * E + (fam == 0 ? static_cast<double>(c.max_position_embeddings) * E : 0.0);
  const double head = c.tie_word_embeddings ? 0.0 : V * E;
  const double final_norm = fam == 0 ? 2 * E : E;
  const double P = embed + L * block_params + final_norm + head;
  largest_param = std::max(largest_param, V * E);
  r.parameters = static_cast<int64_t>(P);

  // LoRA: the trainable parameters are the adapters (fp32), A [r, in] and B [out, r] per module
  std::vector<std::string> targets = o.lora_targets;
  ACCEL_CHECK(!(o.lora_rank > 0 && targets.empty() && c.fused_projections), Status::InvalidArgument,
              "LoRA: PEFT has no default target modules for model_type '", c.model_type,
              "': name them (--lora-targets qkv_proj,o_proj,gate_up_proj,down_proj or all-linear)");
  if (targets.empty()) targets = fam == 0 ? std::vector<std::string>{"c_attn"} : std::vector<std::string>{"q_proj", "v_proj"};
  double adapters_per_block = 0;
  std::vector<bool> hit(mods.size(), false);
  if (lora) {
    bool any = false;
    for (size_t k = 0; k < mods.size(); ++k)
      if (targeted(mods[k].name, targets)) {
        hit[k] = any = true;
        adapters_per_block += static_cast<double>(o.lora_rank * (mods[k].in + mods[k].out));
      }
    ACCEL_CHECK(any, Status::InvalidArgument, "LoRA targets match no module of this ", c.model_type, " model");
  }
  const double Pt = lora ? L * adapters_per_block : P;
  r.trainable_parameters = static_cast<int64_t>(Pt);

  // model state
  const double pbytes = o.bf16_weights ? 2.0 : 4.0;  // the parameters' dtype
  const double tbytes = lora ? 4.0 : pbytes;          // the trainable parameters' (adapters are fp32)
  const double work = o.precision != 0 ? 2.0 : 4.0;   // ZeRO's working copies and gradients
  // optimizer state elements: sharded by ZeRO, and (Adafactor) the matrices' row and column
  // factors, which every rank holds whole; LAMB and Adafactor keep theirs in fp32
  double state_elems = 0, factors = 0;
  switch (o.optimizer) {
    case EstimateOptimizer::SGD: state_elems = 0; break;
    case EstimateOptimizer::Momentum: state_elems = Pt; break;
    case EstimateOptimizer::AdamW:
    case EstimateOptimizer::LAMB: state_elems = 2 * Pt; break;
    case EstimateOptimizer::Adafactor: {  // without beta1 (transformers' default)
      if (lora) {
        for (size_t k = 0; k < mods.size(); ++k)
          if (hit[k]) factors += L * static_cast<double>(2 * o.lora_rank + mods[k].in + mods[k].out);
      } else {
        double per_block = 0, vectors = 0;
        for (const auto& m : mods) {
          per_block += static_cast<double>(m.in + m.out);
          vectors += m.bias ? static_cast<double>(m.out) : 0.0;
        }
        vectors += fam == 0 ? 4 * E : 2 * E;
        if (c.qk_norm) vectors += 2.0 * static_cast<double>(c.head_dim);
        if (c.gemma) vectors += 2 * E;
        factors = (V + E) + (fam == 0 ? static_cast<double>(c.max_position_embeddings) + E : 0.0) + L * per_block +
                  (head > 0 ? V + E : 0.0);
        state_elems = L * vectors + final_norm;
      }
      break;
    }
  }
  const double sbytes = o.optimizer == EstimateOptimizer::LAMB || o.optimizer == EstimateOptimizer::Adafactor ? 4.0 : tbytes;
  // a LoRA model's frozen base: whole on every rank; quantized, its blocks' linear weights
  // hold bitsandbytes' bytes (runtime/models/quant.h): NF4/FP4 half a byte a value and a
  // float32 absmax per 64 (double quantization: a byte per 64, a float32 per 256 blocks), int8
  // a byte a value and a float32 per row
  double base = lora ? P * pbytes : 0.0;
  double largest_linear = 0;  // the largest weight a quantized linear dequantizes at a time
  if (lora && o.quantization != 0) {
    for (const auto& m : mods) {
      const int64_t n = m.in * m.out, blocks = (n + 63) / 64;
      double q = 0;
      if (o.quantization == 3)
        q = static_cast<double>(n + 4 * m.out);
      else
        q = static_cast<double>((n + 1) / 2) +
            (o.double_quant ? static_cast<double>(blocks + 4 * ((blocks + 255) / 256)) : 4.0 * static_cast<double>(blocks));
      base += L * (q - static_cast<double>(n) * pbytes);
      largest_linear = std::max(largest_linear, static_cast<double>(n));
    }
  }
  double weights = 0, grads_kept = 0, grads_total = 0, opt = 0, grads_in_backward = 0;
  // ZeRO's units: the embeddings, each block, the final norm with the head (LoRA: each
  // block's adapters)
  const double unit = lora ? adapters_per_block : std::max({embed, block_params, final_norm + head});
  if (!zero) {
    weights = base + Pt * tbytes;
    grads_total = Pt * tbytes;
    grads_in_backward = grads_total;  // DDP's buckets (or p.grad) appear in backward, go at the step
    opt = (state_elems + factors) * sbytes;
  } else {
    const double n = static_cast<double>(N);
    const double master = Pt / n * 4.0;
    opt = state_elems / n * 4.0 + factors * 4.0;
    if (o.strategy == 2 || o.strategy == 3) {
      weights = base + Pt * work + (work != 4.0 ? master : 0.0);
      if (o.strategy == 2) {
        grads_total = grads_kept = Pt * work;  // the unit buffers, allocated at prepare
      } else {
        grads_total = grads_kept = Pt / n * work;
        grads_in_backward = 2 * unit * work + (lora ? 0.0 : largest_param * work);
      }
    } else {
      weights = base + master + (work != 4.0 ? Pt / n * work : 0.0);
      grads_total = grads_kept = Pt / n * work;
      // a unit gathered for its backward, two gradient buffers in flight, and the unsharded
      // gradients autograd has made before the hooks move them into the buffer (up to the
      // MLP's three matrices at once, measured)
      grads_in_backward = 3 * unit * work + (lora ? 0.0 : 3 * largest_param * work);
    }
  }
  // Offload (docs/memory.md, "Offload"): the optimizer's state, in fp32, and ZeRO's separate
  // fp32 master live in host memory; the gradients go there as they are reduced, in their
  // dtype (the rank's share under ZeRO), and each step copies a parameter's (ZeRO: a unit's
  // chunk's) gradient, and its weight where the master is the working weights, to fp32 host
  // buffers, steps there and copies the weight back in its dtype
  double host = 0, host_step = 0;
  if (o.offload) {
    const double host_state = opt * (sbytes == 4.0 ? 1.0 : 4.0 / sbytes);
    opt = 0;
    if (!zero) {
      double largest_trained = lora ? 0.0 : largest_param;
      if (lora)
        for (size_t k = 0; k < mods.size(); ++k)
          if (hit[k]) largest_trained = std::max(largest_trained, static_cast<double>(o.lora_rank * std::max(mods[k].in, mods[k].out)));
      host = host_state + Pt * tbytes;         // the state, the gradients' host copies
      host_step = 2 * 4.0 * largest_trained;  // the weight's and the gradient's fp32 copies
      r.transfer_bytes = Pt * 3 * tbytes;      // the gradient and the weight there, the weight back
      r.gradient_transfer_bytes = Pt * tbytes;
    } else {
      const double n = static_cast<double>(N), chunk = unit / n;
      // ZeRO-3's master is always its own tensor (a 16-bit working shard beside it, or the
      // gathers' source in fp32: then the gathers read host memory); stages 1-2 keep one
      // only with 16-bit working weights
      const bool separate = o.strategy == 4 || work != 4.0;
      if (separate) weights -= Pt / n * 4.0;
      host = host_state + (separate ? Pt / n * 4.0 : 0.0) + Pt / n * work;  // and the gradient shard's copy
      host_step = (separate ? 1.0 : 2.0) * 4.0 * chunk;
      r.transfer_bytes = Pt / n * (separate ? 2 * work : 8.0 + work);
      r.gradient_transfer_bytes = Pt / n * work;  // the reduced shard, as each unit's is complete
      // ZeRO-3 whose gathers read host memory (fp32: the master; offload 2: the 16-bit
      // working shard, moved there too): each unit's shard goes to the device for its
      // forward's and its backward's all-gather, and the step's update stays on the host
      if (o.strategy == 4 && (work == 4.0 || o.offload == 2)) {
        if (work != 4.0) {
          weights -= Pt / n * work;
          host += Pt / n * work;
        }
        r.transfer_bytes = Pt / n * work + 2 * Pt / n * work;
        // tied embeddings: the head reads the embedding's unit again, one more gather (measured)
        if (c.tie_word_embeddings && !lora) r.transfer_bytes += embed / n * work;
      }
    }
  }
  r.weights = weights;
  r.gradients = grads_total;
  r.optimizer = opt;

  // activations
  const BlockBytes& bb = kBlock[fam][fused ? 1 : 0][mode];
  const FinalBytes& fb = kFinal[fam][fused ? 1 : 0][mode];
  const double per_block = bb.e * E + bb.hd * HD + bb.i * I + bb.head * H + bb.head_t * H * Tn;  // per token
  double kept_block = per_block;
  double final_tok = fb.e * E + fb.constant;
  if (lora) {
    // frozen weights need no inputs saved for their gradients: a linear's input stays only
    // for its adapter's A (fp32: the same tensor for modules sharing it; under autocast or
    // with bf16 weights each adapter casts its own copy), and a norm's normalised value goes
    const double lin_in = mode == kFP32 ? 4.0 : 2.0;
    std::map<int, std::pair<double, bool>> inputs;  // input -> (width, read by an adapter)
    for (size_t k = 0; k < mods.size(); ++k) {
      const double width = mods[k].input_class == 'E' ? E : mods[k].input_class == 'H' ? HD : I;
      auto& in = inputs[mods[k].input];
      in.first = width;
      in.second = in.second || hit[k];
    }
    for (const auto& [index, in] : inputs) {
      kept_block -= lin_in * in.first;
      if (mode == kFP32 && in.second) kept_block += 4.0 * in.first;
    }
    for (size_t k = 0; k < mods.size(); ++k)
      if (hit[k])
        kept_block += 4.0 * static_cast<double>(o.lora_rank) +
                      (mode == kMixed ? 2.0 : mode == kPure ? 4.0 : 0.0) * static_cast<double>(mods[k].in);
    if (fam == 1) {
      const double y = mode == kPure ? 2.0 : 4.0;
      kept_block -= 2 * y * E;
      final_tok -= y * E + lin_in * E;
    }
  }
  const double resid = mode == kPure ? 2.0 : 4.0;
  const double saved_blocks = o.gradient_checkpointing ? L * resid * E * R : L * kept_block * R;
  // the loss's fp32 copy of the shifted logits (the logits themselves go once the loss is
  // computed, as accel_lm_forward without out_logits; keeping them adds B x T x V x 4)
  const double logits = R * V * ((mode == kMixed ? 1.0 : 0.0) + 4.0 * (Tn - 1) / Tn);
  // autocast's bf16 copies of fp32 weights, saved for backward (ZeRO's working weights are bf16 already)
  const bool copies = mode == kMixed;
  const double weight_copies = copies ? 2.0 * ((o.gradient_checkpointing ? 0.0 : L * block_linear) + V * E) : 0.0;
  r.activations = saved_blocks + R * final_tok + logits + weight_copies;

  // the peak
  const double head_grad = 2.0 * R * V * 4.0;                         // the logits' gradient and softmax's
  double layer_transient = fused ? 0.0 : B * H * Tn * Tn * 4.0;        // one attention's T x T gradient
  layer_transient += largest_linear * pbytes;  // a quantized weight dequantized for the input's gradient
  if (o.gradient_checkpointing) layer_transient += kept_block * R + (copies ? 2.0 * block_linear : 0.0);  // recomputed
  const double backward = weights + opt + grads_kept + r.activations +
                          std::max(head_grad, grads_in_backward + layer_transient);
  // the step's own temporaries: Adafactor's update (ZeRO: of the rank's elements; otherwise
  // a parameter at a time: its squared weight and gradient, the factors' product, the update
  // and its square, up to four alive at once, measured under offload, where the step's
  // host peak shows them)
  double step_temp = 0;
  if (o.optimizer == EstimateOptimizer::Adafactor)
    step_temp = zero ? 4.0 * Pt / static_cast<double>(N) : 4 * 4.0 * (lora ? 0.0 : largest_param);
  if (o.offload) {  // the step's temporaries are host memory too
    host += host_step + step_temp;
    step_temp = 0;
  }
  r.host = host;
  const double step = weights + grads_total + opt + step_temp;
  r.total = std::max(backward, step);
  r.largest = backward >= step ? "backward" : "optimizer step";
  r.temporaries = std::max(0.0, r.total - (r.weights + r.gradients + r.optimizer + r.activations));
  return r;
}

MemoryEstimate estimate_memory(const std::string& model, const MemoryEstimateConfig& opts) {
  ACCEL_CHECK(!model.empty(), Status::InvalidArgument, "model is empty (a named shape or a config.json)");
  std::string text = named_lm_config(model), what = model;
  if (text.empty()) {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::string path = model;
    if (fs::is_directory(path, ec)) path = (fs::path(path) / "config.json").string();
    if (!fs::exists(path, ec)) {
      std::string names;
      for (const auto& n : named_lm_shapes()) names += (names.empty() ? "" : ", ") + n;
      fail(Status::IO, "'", model, "' is neither a named shape (", names, ") nor a config.json or a directory holding one");
    }
    text = read_text(path);
    what = path;
  }
  return estimate_memory(parse_lm_config(text, what), opts);
}

}  // namespace accel
