// Causal language models (issue 16): GPT-2 and Llama as built-in models, created from a
// Hugging Face config.json, loaded from and saved to Hugging Face's safetensors format and
// names, and the causal-LM loss. docs/lm.md describes the formats and conventions.
//
// Files: transformer.{h,cpp} (config parsing, loading, saving, the loss, the attention core
// both families share), gpt2.cpp, llama.cpp (one family each).
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model.h"
#include "runtime/models/quant.h"

namespace accel {

enum class LMFamily { GPT2 = 0, Llama = 1 };

// Every field the two families read from config.json, with transformers' defaults.
struct LMConfig {
  LMFamily family = LMFamily::Llama;
  std::string model_type = "llama";  // "gpt2", or a Llama-shaped one: "llama", "mistral", "qwen2", "qwen3", "phi3",
                                     // "gemma2", "gemma3_text", "smollm3"

  // shared
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;           // GPT-2: n_embd
  int64_t num_layers = 32;              // GPT-2: n_layer; Llama: num_hidden_layers
  int64_t num_heads = 32;               // GPT-2: n_head; Llama: num_attention_heads
  int64_t num_kv_heads = 32;            // Llama: num_key_value_heads (GPT-2: = num_heads)
  int64_t head_dim = 128;               // Llama: head_dim or hidden/heads (GPT-2: n_embd/n_head)
  int64_t intermediate_size = 11008;    // GPT-2: n_inner or 4 * n_embd
  int64_t max_position_embeddings = 2048;  // GPT-2: n_positions
  double initializer_range = 0.02;
  bool tie_word_embeddings = false;
  std::string activation = "silu";      // GPT-2: activation_function; Llama: hidden_act
  std::string dtype;                    // "dtype" (transformers 5) or "torch_dtype" (4); "" if absent

  // GPT-2
  double layer_norm_epsilon = 1e-5;
  bool scale_attn_weights = true;
  bool scale_attn_by_inverse_layer_idx = false;
  double embd_pdrop = 0.0, attn_pdrop = 0.0, resid_pdrop = 0.0;

  // Llama
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // RoPE scaling, as transformers' rope_parameters (5) or rope_scaling (4) give it (docs/lm.md):
  // its rope_type, "default", "linear", "dynamic", "yarn", "llama3" or "longrope", and the
  // parameters of that type; NaN, 0 or empty where the config leaves them out (transformers'
  // defaults then apply, as rope_frequencies computes them).
  struct Rope {
    std::string type = "default";
    double factor = NAN;                             // all but default (yarn, longrope: optional)
    int64_t original_max_position_embeddings = 0;    // llama3, yarn, longrope (0: max_position_embeddings)
    double low_freq_factor = NAN, high_freq_factor = NAN;  // llama3
    double attention_factor = NAN;                   // yarn, longrope (NaN: from the factor)
    double mscale = NAN, mscale_all_dim = NAN;       // yarn
    double beta_fast = NAN, beta_slow = NAN;         // yarn (NaN: 32 and 1)
    bool truncate = true;                            // yarn
    std::vector<double> short_factor, long_factor;   // longrope: head_dim / 2 each
    nlohmann::json raw;  // the object as read, written back by lm_config_json
  } rope;
  bool attention_bias = false;
  bool mlp_bias = false;
  double attention_dropout = 0.0;

  // The Llama-shaped families (model_type llama, mistral, qwen2, qwen3, phi3; family Llama):
  // what sets each apart, read with its transformers defaults (docs/lm.md, "Families").
  bool qkv_bias = false;        // q, k and v projections have biases (llama, qwen3: attention_bias; qwen2: always)
  bool o_bias = false;          // o_proj has one (llama, qwen3: attention_bias)
  bool qk_norm = false;         // qwen3: an RMSNorm over each head of q and of k, before RoPE
  bool fused_projections = false;  // phi3: qkv_proj ([q; k; v]) and gate_up_proj ([gate; up])
  int64_t sliding_window = 0;   // the window of the sliding layers (0: none)
  std::vector<uint8_t> sliding_layers;  // per layer: 1 when it attends within sliding_window
                                        // (transformers' layer_types: "sliding_attention")
  std::vector<uint8_t> rope_layers;     // per layer: 0 when it has no RoPE (SmolLM3's no_rope_layers); empty: all have it

  // Gemma 2 and 3 (model_type gemma2, gemma3_text; family Llama): RMSNorms of (1 + w) computed
  // in fp32, embeddings times sqrt(hidden_size), norms on the attention's and the MLP's
  // outputs (post_attention_layernorm, pre_ and post_feedforward_layernorm).
  bool gemma = false;
  double query_pre_attn_scalar = 0;   // the attention scale is its -1/2 power (0: head_dim's)
  double attn_logit_softcapping = 0;  // scores -> cap tanh(scores / cap) (0: none; Gemma 2)
  double final_logit_softcapping = 0; // the same on the logits (0: none)
  // Gemma 3: the sliding layers' RoPE (rope_parameters["sliding_attention"], 4.x's
  // rope_local_base_freq); `rope` and rope_theta are the full-attention layers'.
  bool local_rope = false;
  Rope sliding_rope;
  double sliding_rope_theta = 10000.0;

  // The config.json it came from (empty when made in code): save_pretrained writes it back
  // with the fields above updated, so fields accel does not read survive a round trip.
  nlohmann::json raw;
};

// RoPE's inverse frequencies (float32, head_dim / 2 of them) and the factor by which cos and
// sin are scaled, for a forward whose positions reach `seq_len` - 1, as transformers computes
// them (modeling_rope_utils.py's ROPE_INIT_FUNCTIONS and its rotary embeddings' updates):
// dynamic NTK rescales the base for seq_len above max_position_embeddings (transformers keeps
// the largest seq_len seen in its module; here each forward uses its own), longrope takes its
// long factors above original_max_position_embeddings.
std::pair<torch::Tensor, double> rope_frequencies(const LMConfig& cfg, int64_t seq_len);
// The same for a RoPE of the config's head shape other than its own (Gemma 3's sliding layers').
std::pair<torch::Tensor, double> rope_frequencies(const LMConfig& cfg, const LMConfig::Rope& rope, double theta,
                                                  int64_t seq_len);

// Whether model_type names one of the Llama-shaped families (family Llama): llama, mistral,
// qwen2, qwen3, phi3, gemma2, gemma3_text, smollm3.
bool is_llama_shaped(const std::string& model_type);

// Parses a config.json's text; `what` names the file in errors (Status::Format naming the
// field; Status::Unsupported for a model_type, activation or rope type accel lacks).
LMConfig parse_lm_config(const std::string& text, const std::string& what);
LMConfig read_lm_config(const std::string& path);
// The config.json transformers reads for this config (architectures, model_type, fields).
nlohmann::json lm_config_json(const LMConfig& cfg);

// A GPT-2 or Llama model with random weights drawn from `gen` as transformers initialises
// them: normal(0, initializer_range) for weights and embeddings (GPT-2's c_proj weights with
// std initializer_range / sqrt(2 n_layer)), zeros for biases, ones for norms.
std::unique_ptr<Model> make_causal_lm(const LMConfig& cfg, at::Generator gen,
                                      torch::ScalarType dtype = torch::kFloat);

// Loads a Hugging Face directory: config.json and model.safetensors, or
// model.safetensors.index.json with its shards. Parameters are `dtype` (kFloat or
// kBFloat16). Every tensor is checked (Status::Format naming the tensor and the file).
std::unique_ptr<Model> load_pretrained(const std::string& dir, torch::ScalarType dtype = torch::kFloat);

// Writes config.json + model.safetensors (Hugging Face's names and layouts, in the weights'
// dtype) to `dir` atomically. `weights` are the model's full parameters in model order (as
// the Accelerator's unwrapped weights); empty: the model's own parameters. Refuses (Status::
// InvalidArgument) to replace anything but nothing, an empty directory or an earlier
// pretrained directory.
void save_pretrained(const Model& model, const std::vector<torch::Tensor>& weights, const std::string& dir);

// The causal-LM loss: the logits at t predict labels[t + 1]; targets of -100 are ignored;
// the mean over the real targets, in fp32 (0 when there are none). logits [B, T, V],
// labels int64 [B, T].
torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels);
// The sum of the per-token losses (fp32 scalar) and the number of real targets, for means
// across micro-batches and ranks.
std::pair<torch::Tensor, int64_t> causal_lm_loss_sum(const torch::Tensor& logits, const torch::Tensor& labels);

// LoRA (docs/lm.md, "LoRA"): low-rank adapters y = W x + (alpha / r) B A dropout(x) on chosen
// linear modules, the base weights frozen. PEFT's names and formats.
struct LoraConfig {
  int64_t r = 8;
  double alpha = 8.0;
  double dropout = 0.0;
  // module names matched as PEFT does (a module's full name equals one or ends with "." +
  // one), or {"all-linear"}: every linear module of the blocks; empty: PEFT's default for the
  // family (Llama: q_proj, v_proj; GPT-2: c_attn)
  std::vector<std::string> target_modules;
  bool use_rslora = false;  // scale alpha / sqrt(r) instead of alpha / r
};

// Adds LoRA adapters to a causal LM (InvalidArgument for another model, a second call, bad
// values or targets that match no module). A = U(-1/sqrt(in), 1/sqrt(in)) from `gen`, B = 0,
// as PEFT's default. The model's parameters become the adapters (A, B per module, named
// "<module>.lora_A.weight"): optimizers, strategies and checkpoints see only them; the base
// weights are frozen (no gradients, no optimizer state).
void add_lora(Model& model, const LoraConfig& cfg, at::Generator gen);
// The adapters' config, or nullptr without LoRA.
const LoraConfig* lora_config_of(const Model& model);
// Loads a PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors) onto a
// causal LM without adapters: add_lora with its config, then its tensors (Format naming the
// file and tensor for a missing, extra or misshapen one; Unsupported for DoRA, biases,
// modules_to_save, rank or alpha patterns, layers_to_transform).
void load_adapter(Model& model, const std::string& dir);
// Writes `lora` (the adapter values in parameter order; empty: the model's own) as a PEFT
// adapter directory that peft.PeftModel.from_pretrained loads. The same rules as
// save_pretrained for what it may replace.
void save_adapter(const Model& model, const std::vector<torch::Tensor>& lora, const std::string& dir);
// The base weights (base order, fp32 copies) with the adapters `lora` merged in:
// W + scale B A (GPT-2's Conv1D: its transpose). Without LoRA: the base weights.
std::vector<torch::Tensor> merged_weights(const Model& model, const std::vector<torch::Tensor>& lora);

// A quantized frozen base for LoRA (docs/memory.md, "Quantized bases"): every linear module
// of the blocks (what transformers' BitsAndBytesConfig quantizes: not the embeddings, norms
// or head) becomes NF4, FP4 (blocks of 64, optionally double-quantized) or int8 (row-wise),
// byte for byte as bitsandbytes; the forward dequantizes one weight at a time. Before LoRA
// (InvalidArgument for another model, a model with adapters, an already quantized one,
// double quantization with int8). Such a model runs forward and generation; training needs
// LoRA adapters (an optimizer refuses it without: InvalidState).
void quantize_base(Model& model, QuantType type, bool double_quant);
// The base's quantization (None for other models).
QuantType quant_type_of(const Model& model);

// Text generation (docs/lm.md, "Generation"): greedy or sampled continuations of prompts.
struct GenerateConfig {
  int64_t max_new_tokens = 32;
  double temperature = 0.0;  // 0: greedy; > 0: sampling from softmax(logits / temperature)
  int64_t top_k = 0;         // sampling among the k most likely tokens (0: all)
  int64_t eos_token_id = -1; // a row that emits it is finished (it then repeats it); -1: none
  uint64_t seed = 0;         // the sampling generator's seed
  bool use_cache = true;     // the KV cache (off: every step runs the whole sequence again)
};
// `forward(ids, cache)` runs the model on ids [B, t] after the positions `cache` holds (nullptr:
// from position 0) and returns the logits [B, t, V]. Returns the prompts `ids` [B, T] (int64,
// no padding) followed by the new tokens: [B, T + n], n <= max_new_tokens (fewer when every
// row has emitted eos_token_id).
torch::Tensor generate(const std::function<torch::Tensor(const torch::Tensor&, lm_detail::KVCache*)>& forward,
                       const torch::Tensor& ids, const GenerateConfig& cfg, const LMConfig& model_cfg);
// ... from a padded batch: `forward(inputs, cache)` takes {ids} or, with `attention_mask`
// ([B, T], padding on the left only), {ids, mask over the cache and ids, position_ids}:
// each row's positions count its own tokens (cumsum(mask) - 1, as transformers' generate),
// so a row continues as its prompt alone would.
using LMForward = std::function<torch::Tensor(const std::vector<torch::Tensor>&, lm_detail::KVCache*)>;
torch::Tensor generate(const LMForward& forward, const torch::Tensor& ids, const torch::Tensor& attention_mask,
                       const GenerateConfig& cfg, const LMConfig& model_cfg);

// The config of a model made here; nullptr for other models.
const LMConfig* lm_config_of(const Model& model);
// The dtype its parameters were made in (kFloat or kBFloat16).
torch::ScalarType lm_weights_dtype(const Model& model);

// Turns gradient checkpointing per transformer block on or off (InvalidArgument for a model
// that is not a causal LM made here). Gradients are the same; activations are recomputed.
void set_gradient_checkpointing(Model& model, bool on);
bool gradient_checkpointing(const Model& model);

// ---------------------------------------------------------------------------------------
// What the family files share (not an API)
namespace lm_detail {

// The keys and values of every layer for the positions seen so far ([B, Hkv, length, D]).
struct KVCache {
  std::vector<torch::Tensor> k, v;
  int64_t length = 0;
};

// The base of both families: parameters, training flag, units.
class TransformerLM : public Model {
 public:
  explicit TransformerLM(LMConfig cfg, at::Generator gen) : cfg_(std::move(cfg)), gen_(std::move(gen)) {}
  TransformerLM* as_lm() override { return this; }
  const TransformerLM* as_lm() const override { return this; }
  const LMConfig& config() const { return cfg_; }
  torch::ScalarType weights_dtype() const { return dtype_; }
  bool sequence_inputs() const override { return true; }
  void to(const torch::Device& device) override;
  void train(bool on) override { training_ = on; }
  bool is_training() const override { return training_; }
  std::vector<std::vector<size_t>> units() const override { return lora_ ? lora_->units : units_; }
  bool gates_units() const override { return true; }
  bool casts_weights() const override { return true; }
  // The same family and configuration, the base weights copied, the adapters (if any) made
  // anew with LoRA's configuration: parameters() line up with this model's.
  std::unique_ptr<Model> clone() const override;
  // Gradient checkpointing: each block's activations are recomputed in backward instead of
  // kept (when training with autograd on).
  void set_checkpointing(bool on) { checkpointing_ = on; }
  bool checkpointing() const { return checkpointing_; }
  // The base weights and their Hugging Face names (the parameters unless LoRA is on).
  // A quantized weight's entry is an empty placeholder (its values: quantized(i)).
  const std::vector<torch::Tensor>& base_weights() const { return params_; }
  const std::vector<std::string>& base_names() const { return names_; }
  // Quantized base (quantize_base): base weight i's quantized form, or nullptr.
  const QuantizedWeight* quantized(size_t i) const { return i < quant_.size() ? quant_[i].get() : nullptr; }
  QuantType quant_type() const { return quant_type_; }
  bool double_quant() const { return double_quant_; }
  void quantize_base(QuantType type, bool double_quant);
  // Base weight i's shape (a quantized one's as it was loaded; GPT-2's Conv1D: [in, out]).
  std::vector<int64_t> base_shape(size_t i) const;
  // Base weight i as float32 on the CPU (a quantized one dequantized), its layout as loaded.
  torch::Tensor base_weight_float(size_t i) const;
  std::string untrainable() const override;

  // LoRA (add_lora): per block, one slot per linear module in block_modules() order.
  struct Lora {
    LoraConfig cfg;
    double scale = 1.0;
    std::vector<std::string> targets;  // the resolved target_modules
    std::vector<torch::Tensor> A, B;   // per slot (layer * modules + module); undefined: not adapted
    std::vector<std::string> names;    // the parameters: "<module>.lora_A.weight", "<module>.lora_B.weight"
    std::vector<torch::Tensor> params;
    std::vector<std::vector<size_t>> units;  // one per block
    size_t per_block = 0;                    // block_modules().size()
  };
  const Lora* lora() const { return lora_ ? &*lora_ : nullptr; }
  void enable_lora(const LoraConfig& cfg, at::Generator& gen);
  void disable_lora();  // drops the adapters, the base weights trainable again
  // The block's linear modules (relative to block_prefix) and whether they are GPT-2's
  // Conv1D (weights [in, out]).
  std::vector<std::string> block_modules() const;
  std::string block_prefix(int64_t layer) const;
  bool conv1d() const { return cfg_.family == LMFamily::GPT2; }

 protected:
  // Adds a parameter of `shape` in `dtype` to unit `unit`; `init`: 0 normal(0, std),
  // 1 zeros, 2 ones; no generator: left uninitialised (a loader fills it).
  void add(const std::string& name, std::vector<int64_t> shape, size_t unit, int init, double std,
           torch::ScalarType dtype, const at::Generator* gen);
  void finish() { set_parameters(names_, params_); }
  const torch::Tensor& p(size_t i) const { return parameters()[i]; }
  // Checks inputs = {input_ids [B, T]} or {input_ids, attention_mask [B, T]} (int64,
  // ids < vocab, T <= max positions when `bounded`) and returns the mask (undefined if none).
  // The attention mask (inputs[1], [batch, past + seq]; undefined without one) after checking
  // the inputs; *positions gets inputs[2] (position_ids [batch, seq]) or stays undefined
  // (positions past..past+seq-1 in every row).
  torch::Tensor check_inputs(const std::vector<torch::Tensor>& inputs, bool bounded, int64_t past = 0,
                             torch::Tensor* positions = nullptr) const;
  // Appends layer `layer`'s new keys and values to the cache and returns all of them.
  static std::pair<torch::Tensor, torch::Tensor> cache_append(KVCache& cache, int64_t layer, const torch::Tensor& k,
                                                              const torch::Tensor& v);
  // The trainable parameters of block `layer` (its weights, or its adapters under LoRA).
  std::vector<torch::Tensor> block_trainables(int64_t layer) const;
  // The ZeRO-3 gate around base unit u (0 embeddings, 1..L blocks, L+1 final norm and head);
  // under LoRA the units are the blocks' adapters (block l: unit l) and the rest is frozen.
  void gate_before(UnitGate* g, size_t u) const;
  void gate_after(UnitGate* g, size_t u, const torch::Tensor& out) const;
  // x W^T + b for base weight `w` (a Linear's layout) and bias `bias` (-1: none), the weight
  // dequantized if quantized; x is cast to the weights' dtype.
  torch::Tensor base_linear(const torch::Tensor& x, int64_t w, int64_t bias) const;
  // y plus the LoRA term of module `module` of block `layer` for input x (y unchanged without one).
  torch::Tensor with_lora(const torch::Tensor& y, const torch::Tensor& x, int64_t layer, size_t module);
  double lora_dropout() const { return lora_ ? lora_->cfg.dropout : 0.0; }
  // Whether this forward checkpoints its blocks.
  bool checkpoint_now() const { return checkpointing_ && training_ && torch::GradMode::is_enabled(); }

  LMConfig cfg_;
  at::Generator gen_;
  bool training_ = true;
  bool checkpointing_ = false;
  torch::ScalarType dtype_ = torch::kFloat;
  std::optional<Lora> lora_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> params_;
  std::vector<std::vector<size_t>> units_;
  std::vector<std::shared_ptr<const QuantizedWeight>> quant_;  // per base weight (empty: none quantized)
  QuantType quant_type_ = QuantType::None;
  bool double_quant_ = false;
};

// Scaled dot-product attention in fp32: q [B, H, T, D], k and v [B, Hkv, S, D] with S >= T
// (the last T keys are the queries' own positions, the first S - T cached ones; query head h
// uses key-value head h / (H / Hkv)); query i sees key j iff j <= i + S - T and mask[b, j] != 0
// (mask int64 [B, S], or undefined: causal only), and with a `window` > 0 only if also
// j > i + S - T - window (transformers' sliding window). Returns [B, T, H * D] in v's dtype.
// libtorch's scaled_dot_product_attention where it exists (2.1+), else matmul + softmax.
// `dropout` applies to the attention probabilities (training only); `softcap` > 0 caps the
// scores to softcap tanh(scores / softcap) (Gemma 2; always the matmul path).
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& mask, double scale, double dropout, bool training, at::Generator& gen,
                        int64_t window = 0, double softcap = 0.0);

// The activation named by config.json (gelu_new, gelu_pytorch_tanh, gelu_fast: GELU's tanh
// approximation; gelu, relu, silu, swish).
torch::Tensor activate(const std::string& act, const torch::Tensor& x);

// Inverted dropout with masks drawn from `gen` (identity when prob is 0 or not training).
torch::Tensor dropout(const torch::Tensor& x, double prob, bool training, at::Generator& gen);

// Gradient checkpointing of one block: returns fn(x) recording no activations; backward runs
// fn(x) again (under the forward's autocast and, when `uses_rng`, gen's state at the forward,
// so dropout masks repeat) and yields the gradients of x and of `params` (those requiring
// grad; the block's parameters fn reads).
torch::Tensor checkpoint(std::function<torch::Tensor(const torch::Tensor&)> fn, const torch::Tensor& x,
                         const std::vector<torch::Tensor>& params, at::Generator* gen, bool uses_rng);

// The families' constructors (gen nullptr: uninitialised weights for a loader).
std::unique_ptr<TransformerLM> make_gpt2(const LMConfig& cfg, torch::ScalarType dtype, const at::Generator* gen);
std::unique_ptr<TransformerLM> make_llama(const LMConfig& cfg, torch::ScalarType dtype, const at::Generator* gen);

}  // namespace lm_detail

}  // namespace accel
