// Causal language models: config.json, loading and saving Hugging Face directories, LoRA
// adapters in PEFT's format (see transformer.h). The model itself is in transformer.cpp.
#include "runtime/models/transformer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "base/files.h"
#include "runtime/safetensors.h"
#include "base/status.h"

namespace accel {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A safetensors header's shape as shape_str (options.h) writes a tensor's.
std::string dims(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// A config.json field with a default; Format naming the file and the field when the type is wrong.
struct Fields {
  const json& j;
  const std::string& what;

  bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }
  int64_t integer(const char* k, int64_t def, bool required = false) const {
    if (!has(k)) {
      ACCEL_CHECK(!required, Status::Format, what, ": the field '", k, "' is missing");
      return def;
    }
    const json& v = j[k];
    ACCEL_CHECK(v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()),
                Status::Format, what, ": the field '", k, "' must be an integer, got ", v.dump());
    const int64_t x = v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
    return x;
  }
  int64_t positive(const char* k, int64_t def, bool required = false) const {
    const int64_t x = integer(k, def, required);
    ACCEL_CHECK(x >= 1 && x <= (int64_t{1} << 40), Status::Format, what, ": the field '", k,
                "' must be a positive integer, got ", x);
    return x;
  }
  double number(const char* k, double def) const {
    if (!has(k)) return def;
    ACCEL_CHECK(j[k].is_number(), Status::Format, what, ": the field '", k, "' must be a number, got ", j[k].dump());
    return j[k].get<double>();
  }
  bool boolean(const char* k, bool def) const {
    if (!has(k)) return def;
    ACCEL_CHECK(j[k].is_boolean(), Status::Format, what, ": the field '", k, "' must be true or false, got ",
                j[k].dump());
    return j[k].get<bool>();
  }
  std::string string(const char* k, const std::string& def) const {
    if (!has(k)) return def;
    ACCEL_CHECK(j[k].is_string(), Status::Format, what, ": the field '", k, "' must be a string, got ", j[k].dump());
    return j[k].get<std::string>();
  }
  double probability(const char* k) const {
    const double p = number(k, 0.0);
    ACCEL_CHECK(p >= 0.0 && p < 1.0, Status::Format, what, ": the field '", k, "' must be in [0, 1), got ", p);
    return p;
  }
};

const std::set<std::string> kActivations = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu", "relu", "silu",
                                            "swish"};

std::string st_dtype(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return "F32";
    case torch::kBFloat16: return "BF16";
    case torch::kHalf: return "F16";
    default: return "";
  }
}

torch::ScalarType torch_dtype(const std::string& st) {
  if (st == "F32") return torch::kFloat;
  if (st == "BF16") return torch::kBFloat16;
  if (st == "F16") return torch::kHalf;
  return torch::kFloat;
}

// config.json's dtype names
std::string st_of_config(const std::string& d) {
  if (d == "float32") return "F32";
  if (d == "bfloat16") return "BF16";
  if (d == "float16") return "F16";
  return "";
}

std::string config_of_st(const std::string& st) {
  if (st == "F32") return "float32";
  if (st == "BF16") return "bfloat16";
  if (st == "F16") return "float16";
  return "";
}

// transformers' class for the model_type (what save_pretrained writes in "architectures")
std::string architecture_of(const LMConfig& c) {
  const std::string& mt = c.model_type;
  if (c.family == LMFamily::GPT2) return "GPT2LMHeadModel";
  return mt == "mistral" ? "MistralForCausalLM" : mt == "qwen2" ? "Qwen2ForCausalLM" : mt == "qwen3" ? "Qwen3ForCausalLM"
         : mt == "phi3" ? "Phi3ForCausalLM" : mt == "gemma2" ? "Gemma2ForCausalLM" : mt == "gemma3_text" ? "Gemma3ForCausalLM"
         : mt == "smollm3" ? "SmolLM3ForCausalLM" : "LlamaForCausalLM";
}

}  // namespace

bool is_llama_shaped(const std::string& model_type) {
  return model_type == "llama" || model_type == "mistral" || model_type == "qwen2" || model_type == "qwen3" ||
         model_type == "phi3" || model_type == "gemma2" || model_type == "gemma3_text" || model_type == "smollm3";
}

// ---------------------------------------------------------------------------------------
// config.json

LMConfig parse_lm_config(const std::string& text, const std::string& what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  ACCEL_CHECK(!j.is_discarded(), Status::Format, what, ": not valid JSON");
  ACCEL_CHECK(j.is_object(), Status::Format, what, ": a config must be a JSON object");
  Fields f{j, what};
  LMConfig c;
  c.raw = j;
  ACCEL_CHECK(f.has("model_type"), Status::Format, what, ": the field 'model_type' is missing");
  c.model_type = f.string("model_type", "");
  if (c.model_type == "gpt2") {
    c.family = LMFamily::GPT2;
    c.vocab_size = f.positive("vocab_size", 50257, true);
    c.max_position_embeddings = f.positive("n_positions", 1024, true);
    c.hidden_size = f.positive("n_embd", 768, true);
    c.num_layers = f.positive("n_layer", 12, true);
    c.num_heads = f.positive("n_head", 12, true);
    ACCEL_CHECK(c.hidden_size % c.num_heads == 0, Status::Format, what, ": 'n_embd' (", c.hidden_size,
                ") must be a multiple of 'n_head' (", c.num_heads, ")");
    c.num_kv_heads = c.num_heads;
    c.head_dim = c.hidden_size / c.num_heads;
    c.intermediate_size = f.has("n_inner") ? f.positive("n_inner", 0) : 4 * c.hidden_size;
    c.activation = f.string("activation_function", "gelu_new");
    c.layer_norm_epsilon = f.number("layer_norm_epsilon", 1e-5);
    c.initializer_range = f.number("initializer_range", 0.02);
    c.scale_attn_weights = f.boolean("scale_attn_weights", true);
    c.scale_attn_by_inverse_layer_idx = f.boolean("scale_attn_by_inverse_layer_idx", false);
    c.tie_word_embeddings = f.boolean("tie_word_embeddings", true);
    c.embd_pdrop = f.probability("embd_pdrop");
    c.attn_pdrop = f.probability("attn_pdrop");
    c.resid_pdrop = f.probability("resid_pdrop");
    ACCEL_CHECK(!f.boolean("add_cross_attention", false), Status::Unsupported, what,
                ": 'add_cross_attention' true (an encoder-decoder GPT-2) is not supported");
  } else if (is_llama_shaped(c.model_type)) {
    const std::string& mt = c.model_type;
    const bool qwen = mt == "qwen2" || mt == "qwen3", phi3 = mt == "phi3", gemma2 = mt == "gemma2",
               gemma3 = mt == "gemma3_text", gemma = gemma2 || gemma3, smollm3 = mt == "smollm3";
    c.family = LMFamily::Llama;
    c.vocab_size = f.positive("vocab_size", 32000, true);
    c.hidden_size = f.positive("hidden_size", 4096, true);
    c.intermediate_size = f.positive("intermediate_size", 11008, true);
    c.num_layers = f.positive("num_hidden_layers", 32, true);
    c.num_heads = f.positive("num_attention_heads", 32, true);
    c.num_kv_heads = f.has("num_key_value_heads") ? f.positive("num_key_value_heads", 0) : c.num_heads;
    ACCEL_CHECK(c.num_heads % c.num_kv_heads == 0, Status::Format, what, ": 'num_attention_heads' (", c.num_heads,
                ") must be a multiple of 'num_key_value_heads' (", c.num_kv_heads, ")");
    if (f.has("head_dim")) {
      c.head_dim = f.positive("head_dim", 0);
    } else if (mt == "qwen3" || gemma) {
      c.head_dim = gemma ? 256 : 128;  // Qwen3Config's and Gemma's defaults, not hidden / heads
    } else {
      ACCEL_CHECK(c.hidden_size % c.num_heads == 0, Status::Format, what, ": 'hidden_size' (", c.hidden_size,
                  ") must be a multiple of 'num_attention_heads' (", c.num_heads, ") when 'head_dim' is absent");
      c.head_dim = c.hidden_size / c.num_heads;
    }
    ACCEL_CHECK(c.head_dim % 2 == 0, Status::Format, what, ": the head dimension (", c.head_dim,
                ") must be even for rotary embeddings");
    c.activation = gemma ? f.string("hidden_activation", f.string("hidden_act", "gelu_pytorch_tanh"))
                         : f.string("hidden_act", "silu");
    c.max_position_embeddings = f.positive("max_position_embeddings", mt == "mistral" || gemma3 ? 131072
                                                                      : qwen ? 32768 : phi3 ? 4096 : gemma2 ? 8192 : 2048);
    c.initializer_range = f.number("initializer_range", 0.02);
    c.rms_norm_eps = f.number("rms_norm_eps", phi3 ? 1e-5 : 1e-6);
    c.tie_word_embeddings = f.boolean("tie_word_embeddings", gemma || smollm3);
    c.attention_dropout = f.probability("attention_dropout");
    // each family's projections: Llama's biases are configurable, Qwen2's q/k/v always have
    // them, Qwen3 adds norms on q and k, Phi-3 fuses q/k/v and gate/up
    if (mt == "llama" || smollm3) {
      c.attention_bias = f.boolean("attention_bias", false);
      c.mlp_bias = f.boolean("mlp_bias", false);
      ACCEL_CHECK(f.integer("pretraining_tp", 1) == 1, Status::Unsupported, what,
                  ": 'pretraining_tp' other than 1 is not supported");
    } else if (mt == "qwen3" || gemma) {
      c.attention_bias = f.boolean("attention_bias", false);
    }
    if (gemma) {
      // Gemma 2 and 3: (1 + w) norms, scaled embeddings, norms around both sub-layers, the
      // attention scale from query_pre_attn_scalar, soft-capping (Gemma 3's attention takes
      // none: transformers does not pass it to its attention)
      c.gemma = true;
      c.query_pre_attn_scalar = f.number("query_pre_attn_scalar", 256);
      ACCEL_CHECK(c.query_pre_attn_scalar > 0, Status::Format, what, ": 'query_pre_attn_scalar' must be positive");
      c.final_logit_softcapping = f.has("final_logit_softcapping") ? f.number("final_logit_softcapping", 0)
                                  : gemma2 && !j.contains("final_logit_softcapping") ? 30.0 : 0.0;
      c.attn_logit_softcapping = !gemma2 ? 0.0 : f.has("attn_logit_softcapping") ? f.number("attn_logit_softcapping", 0)
                                 : !j.contains("attn_logit_softcapping") ? 50.0 : 0.0;
      ACCEL_CHECK(c.final_logit_softcapping >= 0 && c.attn_logit_softcapping >= 0, Status::Format, what,
                  ": the soft-capping values must be positive or null");
      ACCEL_CHECK(!f.boolean("use_bidirectional_attention", false), Status::Unsupported, what,
                  ": 'use_bidirectional_attention' true (Gemma as an encoder) is not supported");
    }
    c.qkv_bias = mt == "qwen2" || c.attention_bias;
    c.o_bias = c.attention_bias;
    c.qk_norm = mt == "qwen3" || gemma3;
    c.fused_projections = phi3;
    if (phi3) c.resid_pdrop = f.probability("resid_pdrop");
    // sliding-window attention: transformers 5 writes layer_types; older configs say it by
    // family (Mistral and Phi-3: every layer when sliding_window is set; Qwen2/3: the layers
    // from max_window_layers on, when use_sliding_window)
    {
      int64_t window = f.has("sliding_window") ? f.positive("sliding_window", 0)
                       : gemma && !j.contains("sliding_window") ? 4096 : 0;
      if ((qwen || smollm3) && !f.boolean("use_sliding_window", false)) window = 0;
      if (smollm3) {
        // SmolLM3's layers without RoPE: no_rope_layers (1: RoPE, 0: none), or every
        // no_rope_layer_interval-th (4) layer; its sliding layers are those without RoPE
        c.rope_layers.assign(static_cast<size_t>(c.num_layers), 1);
        if (f.has("no_rope_layers")) {
          const json& nr = j["no_rope_layers"];
          ACCEL_CHECK(nr.is_array() && static_cast<int64_t>(nr.size()) == c.num_layers, Status::Format, what,
                      ": 'no_rope_layers' must list 0 or 1 per layer (", c.num_layers, "), got ", nr.dump());
          for (size_t i = 0; i < nr.size(); ++i) {
            ACCEL_CHECK(nr[i].is_number_integer() && (nr[i].get<int64_t>() == 0 || nr[i].get<int64_t>() == 1),
                        Status::Format, what, ": no_rope_layers[", i, "] must be 0 or 1, got ", nr[i].dump());
            c.rope_layers[i] = static_cast<uint8_t>(nr[i].get<int64_t>());
          }
        } else {
          const int64_t every = f.positive("no_rope_layer_interval", 4);
          for (int64_t i = 0; i < c.num_layers; ++i) c.rope_layers[static_cast<size_t>(i)] = (i + 1) % every != 0;
        }
      }
      c.sliding_layers.assign(static_cast<size_t>(c.num_layers), 0);
      if (f.has("layer_types")) {
        const json& lt = j["layer_types"];
        ACCEL_CHECK(lt.is_array() && static_cast<int64_t>(lt.size()) == c.num_layers, Status::Format, what,
                    ": 'layer_types' must list one type per layer (", c.num_layers, "), got ", lt.dump());
        for (size_t i = 0; i < lt.size(); ++i) {
          const std::string t = lt[i].is_string() ? lt[i].get<std::string>() : "";
          ACCEL_CHECK(t == "full_attention" || t == "sliding_attention", Status::Unsupported, what, ": layer_types[", i,
                      "] is ", lt[i].dump(), "; accel supports \"full_attention\" and \"sliding_attention\"");
          c.sliding_layers[i] = t == "sliding_attention";
        }
      } else if (gemma) {  // every layer slides but each pattern-th (Gemma 2: 2; Gemma 3: sliding_window_pattern, 6)
        const int64_t pattern = gemma2 ? 2 : f.positive("sliding_window_pattern", 6);
        for (int64_t i = 0; i < c.num_layers; ++i) c.sliding_layers[static_cast<size_t>(i)] = (i + 1) % pattern != 0;
      } else if (smollm3) {
        for (int64_t i = 0; i < c.num_layers; ++i)
          c.sliding_layers[static_cast<size_t>(i)] = window > 0 && !c.rope_layers[static_cast<size_t>(i)];
      } else if (window > 0) {
        const int64_t from = qwen ? f.integer("max_window_layers", 28) : 0;
        for (int64_t i = std::max<int64_t>(from, 0); i < c.num_layers; ++i) c.sliding_layers[static_cast<size_t>(i)] = 1;
      }
      if (smollm3 && window == 0) c.sliding_layers.assign(static_cast<size_t>(c.num_layers), 0);  // as its attention reads them
      bool any = false;
      for (uint8_t x : c.sliding_layers) any = any || x;
      ACCEL_CHECK(!any || window > 0, Status::Format, what,
                  ": 'layer_types' has sliding_attention layers but 'sliding_window' is not set");
      c.sliding_window = any ? window : 0;
    }
    // RoPE: transformers 5 writes "rope_parameters", 4 a top-level "rope_theta" and
    // "rope_scaling"; as transformers 5 reads them, rope_scaling wins over rope_parameters,
    // the object's rope_theta over the top-level one, and a top-level
    // original_max_position_embeddings (Phi-3's) over the object's. Gemma 3 has one RoPE per
    // layer type: rope_parameters {"full_attention": {...}, "sliding_attention": {...}}
    // (4.x: rope_theta and rope_scaling for the full layers, rope_local_base_freq for the
    // sliding ones).
    // partial_rotary_factor, in the RoPE object (transformers 5) or at the top (4.x): only 1
    auto no_partial_rotary = [&](const Fields& fields) {
      const double partial = fields.number("partial_rotary_factor", 1.0);
      ACCEL_CHECK(partial == 1.0, Status::Unsupported, what, ": 'partial_rotary_factor' ", partial,
                  " (rotary embeddings on part of each head) is not supported");
    };
    auto read_rope = [&](const json& r, const std::string& key, LMConfig::Rope& rope, double& theta) {
      ACCEL_CHECK(r.is_object(), Status::Format, what, ": the field '", key, "' must be an object, got ", r.dump());
      Fields rf{r, what};
      rope.raw = r;
      rope.type = rf.string("rope_type", rf.string("type", "default"));
      if (phi3 && (rope.type == "su" || rope.type == "yarn")) rope.type = "longrope";  // as Phi3Config reads them
      ACCEL_CHECK(rope.type == "default" || rope.type == "linear" || rope.type == "dynamic" || rope.type == "yarn" ||
                      rope.type == "llama3" || rope.type == "longrope",
                  Status::Unsupported, what, ": '", key, "' has rope_type '", rope.type,
                  "'; accel supports \"default\", \"linear\", \"dynamic\", \"yarn\", \"llama3\" and \"longrope\"");
      if (rf.has("rope_theta")) theta = rf.number("rope_theta", theta);
      no_partial_rotary(rf);
      rope.factor = rf.number("factor", NAN);
      if (rf.has("original_max_position_embeddings"))
        rope.original_max_position_embeddings = rf.positive("original_max_position_embeddings", 0);
      rope.low_freq_factor = rf.number("low_freq_factor", NAN);
      rope.high_freq_factor = rf.number("high_freq_factor", NAN);
      rope.attention_factor = rf.number("attention_factor", NAN);
      rope.mscale = rf.number("mscale", NAN);
      rope.mscale_all_dim = rf.number("mscale_all_dim", NAN);
      rope.beta_fast = rf.number("beta_fast", NAN);
      rope.beta_slow = rf.number("beta_slow", NAN);
      rope.truncate = rf.boolean("truncate", true);
      for (auto [name, out] : {std::pair<const char*, std::vector<double>*>{"short_factor", &rope.short_factor},
                               {"long_factor", &rope.long_factor}}) {
        if (!rf.has(name)) continue;
        const json& a = r[name];
        ACCEL_CHECK(a.is_array(), Status::Format, what, ": '", key, "." , name, "' must be a list of numbers");
        for (const json& x : a) {
          ACCEL_CHECK(x.is_number() && x.get<double>() > 0, Status::Format, what, ": '", key, ".", name,
                      "' must hold positive numbers, got ", x.dump());
          out->push_back(x.get<double>());
        }
      }
    };
    auto check_rope = [&](const LMConfig::Rope& rope, double theta) {
      const std::string& t = rope.type;
      auto need = [&](double v, const char* name) {
        ACCEL_CHECK(std::isfinite(v) && v > 0, Status::Format, what, ": RoPE type '", t, "' needs a positive '", name,
                    "'", std::isnan(v) ? " (missing)" : "");
      };
      if (t == "linear" || t == "dynamic" || t == "llama3") need(rope.factor, "factor");
      if (t == "llama3") {
        need(rope.low_freq_factor, "low_freq_factor");
        need(rope.high_freq_factor, "high_freq_factor");
        ACCEL_CHECK(rope.high_freq_factor != rope.low_freq_factor, Status::Format, what,
                    ": RoPE type 'llama3' needs 'high_freq_factor' other than 'low_freq_factor'");
      }
      if (t == "yarn" || t == "longrope") {
        if (!std::isnan(rope.factor)) need(rope.factor, "factor");
        if (!std::isnan(rope.attention_factor)) need(rope.attention_factor, "attention_factor");
      }
      if (t == "longrope")
        for (const auto* v : {&rope.short_factor, &rope.long_factor})
          ACCEL_CHECK(static_cast<int64_t>(v->size()) == c.head_dim / 2, Status::Format, what,
                      ": RoPE type 'longrope' needs 'short_factor' and 'long_factor' of head_dim / 2 = ", c.head_dim / 2,
                      " numbers each, got ", v->size());
      ACCEL_CHECK(theta > 0, Status::Format, what, ": 'rope_theta' must be positive, got ", theta);
    };
    const bool per_type = gemma3 && f.has("rope_parameters") && j["rope_parameters"].is_object() &&
                          j["rope_parameters"].contains("full_attention");
    c.rope_theta = f.number("rope_theta", gemma3 ? 1000000.0 : 10000.0);
    if (per_type) {
      const json& rp = j["rope_parameters"];
      read_rope(rp["full_attention"], "rope_parameters.full_attention", c.rope, c.rope_theta);
      c.sliding_rope_theta = 10000.0;
      if (rp.contains("sliding_attention") && !rp["sliding_attention"].is_null())
        read_rope(rp["sliding_attention"], "rope_parameters.sliding_attention", c.sliding_rope, c.sliding_rope_theta);
    } else {
      const char* key = f.has("rope_scaling") ? "rope_scaling" : f.has("rope_parameters") ? "rope_parameters" : nullptr;
      if (key) read_rope(j[key], key, c.rope, c.rope_theta);
      if (gemma3) c.sliding_rope_theta = f.number("rope_local_base_freq", 10000.0);
    }
    c.local_rope = gemma3;
    if (f.has("original_max_position_embeddings"))
      c.rope.original_max_position_embeddings = f.positive("original_max_position_embeddings", 0);
    no_partial_rotary(f);
    check_rope(c.rope, c.rope_theta);
    if (c.local_rope) check_rope(c.sliding_rope, c.sliding_rope_theta);
  } else {
    fail(Status::Unsupported, what, ": model_type '", c.model_type,
         "' is not supported (supported: \"gpt2\", \"llama\", \"mistral\", \"qwen2\", \"qwen3\", \"phi3\", "
         "\"gemma2\", \"gemma3_text\", \"smollm3\")");
  }
  ACCEL_CHECK(kActivations.count(c.activation), Status::Unsupported, what, ": activation '", c.activation,
              "' is not supported (supported: gelu_new, gelu_pytorch_tanh, gelu_fast, gelu, relu, silu, swish)");
  ACCEL_CHECK(c.initializer_range >= 0, Status::Format, what, ": 'initializer_range' must be >= 0");
  c.dtype = f.string("dtype", f.string("torch_dtype", ""));
  ACCEL_CHECK(c.dtype.empty() || !st_of_config(c.dtype).empty(), Status::Unsupported, what, ": dtype '", c.dtype,
              "' is not supported (float32, bfloat16, float16)");
  return c;
}

LMConfig read_lm_config(const std::string& path) {
  return parse_lm_config(safetensors::read_file(path), path);
}

json lm_config_json(const LMConfig& c) {
  json j = c.raw.is_object() ? c.raw : json::object();
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["initializer_range"] = c.initializer_range;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.family == LMFamily::GPT2) {
    if (!j.contains("architectures")) j["architectures"] = {architecture_of(c)};
    j["n_positions"] = c.max_position_embeddings;
    j["n_embd"] = c.hidden_size;
    j["n_layer"] = c.num_layers;
    j["n_head"] = c.num_heads;
    j["n_inner"] = c.intermediate_size;
    j["activation_function"] = c.activation;
    j["layer_norm_epsilon"] = c.layer_norm_epsilon;
    j["scale_attn_weights"] = c.scale_attn_weights;
    j["scale_attn_by_inverse_layer_idx"] = c.scale_attn_by_inverse_layer_idx;
    j["embd_pdrop"] = c.embd_pdrop;
    j["attn_pdrop"] = c.attn_pdrop;
    j["resid_pdrop"] = c.resid_pdrop;
  } else {
    const std::string& mt = c.model_type;
    if (!j.contains("architectures")) j["architectures"] = {architecture_of(c)};
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.intermediate_size;
    j["num_hidden_layers"] = c.num_layers;
    j["num_attention_heads"] = c.num_heads;
    j["num_key_value_heads"] = c.num_kv_heads;
    // (Qwen2's and Phi-3's configs have no head_dim: theirs is hidden / heads)
    if ((mt != "qwen2" && mt != "phi3") || j.contains("head_dim") || c.head_dim * c.num_heads != c.hidden_size)
      j["head_dim"] = c.head_dim;
    const bool gemma = mt == "gemma2" || mt == "gemma3_text";
    j[gemma ? "hidden_activation" : "hidden_act"] = c.activation;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["rms_norm_eps"] = c.rms_norm_eps;
    if (mt == "llama" || mt == "qwen3" || gemma || mt == "smollm3") j["attention_bias"] = c.attention_bias;
    if (gemma) {
      // an int in transformers' configs (its dataclass refuses 16.0), written as one when whole
      const double q = c.query_pre_attn_scalar;
      j["query_pre_attn_scalar"] = std::floor(q) == q && q < 9e15 ? json(static_cast<int64_t>(q)) : json(q);
      j["final_logit_softcapping"] = c.final_logit_softcapping > 0 ? json(c.final_logit_softcapping) : json(nullptr);
      if (mt == "gemma2" || j.contains("attn_logit_softcapping"))
        j["attn_logit_softcapping"] = c.attn_logit_softcapping > 0 ? json(c.attn_logit_softcapping) : json(nullptr);
    }
    if (mt == "llama" || mt == "smollm3") j["mlp_bias"] = c.mlp_bias;
    if (mt == "smollm3") {
      json nr = json::array();
      for (uint8_t x : c.rope_layers) nr.push_back(static_cast<int>(x));
      j["no_rope_layers"] = nr;
    }
    if (mt == "phi3") j["resid_pdrop"] = c.resid_pdrop;
    j["attention_dropout"] = c.attention_dropout;
    if (mt != "llama") {
      // the sliding layers as read (transformers 5's layer_types, kept where the config had them)
      json window = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
      if (mt == "qwen2" || mt == "qwen3" || mt == "smollm3") {
        j["use_sliding_window"] = c.sliding_window > 0;
        if (c.sliding_window > 0 || !j.contains("sliding_window")) j["sliding_window"] = window;
      } else {
        j["sliding_window"] = window;
      }
      if (j.contains("layer_types") || mt == "qwen2" || mt == "qwen3" || gemma || mt == "smollm3") {
        json lt = json::array();
        for (uint8_t x : c.sliding_layers) lt.push_back(x ? "sliding_attention" : "full_attention");
        j["layer_types"] = lt;
      }
    }
    // both spellings: transformers 5 reads rope_parameters (or rope_scaling, when present),
    // 4 the top-level rope_theta and rope_scaling; the parameters are kept as read
    json r = c.rope.raw.is_object() ? c.rope.raw : json::object();
    r["rope_type"] = c.rope.type;
    r["rope_theta"] = c.rope_theta;
    j.erase("rope_scaling");
    if (c.local_rope) {  // Gemma 3: one per layer type (4.x: rope_local_base_freq for the sliding layers)
      json local = c.sliding_rope.raw.is_object() ? c.sliding_rope.raw : json::object();
      local["rope_type"] = c.sliding_rope.type;
      local["rope_theta"] = c.sliding_rope_theta;
      j["rope_parameters"] = {{"full_attention", r}, {"sliding_attention", local}};
      j["rope_local_base_freq"] = c.sliding_rope_theta;
    } else {
      j["rope_parameters"] = r;
    }
    if (c.rope.type != "default") j["rope_scaling"] = r;
    j["rope_theta"] = c.rope_theta;
  }
  if (!c.dtype.empty()) j["dtype"] = c.dtype;
  return j;
}

// ---------------------------------------------------------------------------------------
// Creating, loading, saving

namespace {

std::unique_ptr<lm_detail::TransformerLM> build(const LMConfig& cfg, torch::ScalarType dtype, const at::Generator* gen) {
  ACCEL_CHECK(dtype == torch::kFloat || dtype == torch::kBFloat16, Status::InvalidArgument,
              "a causal LM's parameters must be float32 or bfloat16, got ", c10::toString(dtype));
  // a config made in code gets the checks parse_lm_config makes
  const bool gpt2 = cfg.family == LMFamily::GPT2;
  ACCEL_CHECK(gpt2 ? cfg.model_type == "gpt2" : is_llama_shaped(cfg.model_type), Status::InvalidArgument,
              "LMConfig: model_type '", cfg.model_type, "' does not match the family (",
              gpt2 ? "gpt2" : "llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text or smollm3", ")");
  ACCEL_CHECK(gpt2 || cfg.sliding_layers.empty() || static_cast<int64_t>(cfg.sliding_layers.size()) == cfg.num_layers,
              Status::InvalidArgument, "LMConfig: sliding_layers must have one entry per layer (", cfg.num_layers,
              "), got ", cfg.sliding_layers.size());
  ACCEL_CHECK(cfg.sliding_window >= 0, Status::InvalidArgument, "LMConfig: sliding_window must be >= 0");
  ACCEL_CHECK(gpt2 || cfg.rope_layers.empty() || static_cast<int64_t>(cfg.rope_layers.size()) == cfg.num_layers,
              Status::InvalidArgument, "LMConfig: rope_layers must have one entry per layer (", cfg.num_layers, "), got ",
              cfg.rope_layers.size());
  for (auto [v, n] : {std::pair<int64_t, const char*>{cfg.vocab_size, "vocab_size"}, {cfg.hidden_size, "hidden_size"},
                      {cfg.num_layers, "num_layers"}, {cfg.num_heads, "num_heads"}, {cfg.num_kv_heads, "num_kv_heads"},
                      {cfg.head_dim, "head_dim"}, {cfg.intermediate_size, "intermediate_size"},
                      {cfg.max_position_embeddings, "max_position_embeddings"}})
    ACCEL_CHECK(v >= 1 && v <= (int64_t{1} << 40), Status::InvalidArgument, "LMConfig: ", n, " must be positive, got ", v);
  ACCEL_CHECK(cfg.num_heads % cfg.num_kv_heads == 0, Status::InvalidArgument, "LMConfig: num_heads (", cfg.num_heads,
              ") must be a multiple of num_kv_heads (", cfg.num_kv_heads, ")");
  ACCEL_CHECK(!gpt2 || (cfg.num_kv_heads == cfg.num_heads && cfg.head_dim * cfg.num_heads == cfg.hidden_size),
              Status::InvalidArgument, "LMConfig: GPT-2 needs num_kv_heads = num_heads and head_dim * num_heads = hidden_size");
  ACCEL_CHECK(gpt2 || cfg.head_dim % 2 == 0, Status::InvalidArgument, "LMConfig: head_dim must be even (rotary), got ",
              cfg.head_dim);
  ACCEL_CHECK(kActivations.count(cfg.activation), Status::Unsupported, "LMConfig: activation '", cfg.activation,
              "' is not supported");
  return cfg.family == LMFamily::GPT2 ? lm_detail::make_gpt2(cfg, dtype, gen) : lm_detail::make_llama(cfg, dtype, gen);
}

// Tensors that checkpoints may hold beside the parameters and that are not weights:
// GPT-2's causal-mask buffers, Llama's rotary frequencies (older transformers saved them).
// (No std::regex: GCC 12 reports false maybe-uninitialized warnings inside it under ASan.)
// True when `s` is `prefix` + decimal digits + `suffix`.
bool digits_between(const std::string& s, const std::string& prefix, const std::string& suffix) {
  if (s.size() <= prefix.size() + suffix.size() || s.compare(0, prefix.size(), prefix) != 0 ||
      s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  for (size_t i = prefix.size(); i < s.size() - suffix.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

bool is_ignored_buffer(const std::string& name) {
  for (const char* pre : {"h.", "transformer.h."})
    for (const char* suf : {".attn.bias", ".attn.masked_bias"})
      if (digits_between(name, pre, suf)) return true;
  for (const char* pre : {"layers.", "model.layers."})
    if (digits_between(name, pre, ".self_attn.rotary_emb.inv_freq")) return true;
  return false;
}

std::string config_summary(const LMConfig& c) {
  std::ostringstream os;
  os << c.model_type << ", hidden " << c.hidden_size << ", " << c.num_layers << " layers, " << c.num_heads << " heads";
  if (c.family == LMFamily::Llama) os << " (" << c.num_kv_heads << " key-value), intermediate " << c.intermediate_size;
  os << ", vocab " << c.vocab_size;
  return os.str();
}

}  // namespace

std::unique_ptr<Model> make_causal_lm(const LMConfig& cfg, at::Generator gen, torch::ScalarType dtype) {
  ACCEL_CHECK(gen.defined(), Status::InvalidArgument, "make_causal_lm needs a generator");
  ACCEL_CHECK(dtype == torch::kFloat || dtype == torch::kBFloat16, Status::InvalidArgument,
              "a causal LM's parameters are float32 or bfloat16, not ", c10::toString(dtype));
  return build(cfg, dtype, &gen);
}

std::unique_ptr<Model> load_pretrained(const std::string& dir, torch::ScalarType dtype) {
  ACCEL_CHECK(!dir.empty(), Status::InvalidArgument, "dir is empty");
  std::error_code ec;
  ACCEL_CHECK(fs::is_directory(dir, ec), Status::IO, "'", dir, "' is not a directory (a pretrained model is a directory "
              "with config.json and model.safetensors)");
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  ACCEL_CHECK(fs::exists(cfg_path, ec), Status::IO, "'", dir, "' has no config.json");
  const LMConfig cfg = read_lm_config(cfg_path);
  auto model = build(cfg, dtype, nullptr);
  const std::string want_st = st_of_config(cfg.dtype);

  // which file holds which tensor
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> files;                  // in order
  std::map<std::string, std::string> listed;       // tensor -> file (sharded only)
  if (fs::exists(single, ec)) {
    files.push_back("model.safetensors");
  } else if (fs::exists(index, ec)) {
    json j = json::parse(safetensors::read_file(index.string()), nullptr, false);
    ACCEL_CHECK(!j.is_discarded() && j.is_object(), Status::Format, index.string(), ": not a JSON object");
    ACCEL_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), Status::Format, index.string(),
                ": the field 'weight_map' is missing or not an object");
    std::set<std::string> seen;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      ACCEL_CHECK(it.value().is_string(), Status::Format, index.string(), ": weight_map['", it.key(),
                  "'] must be a file name");
      const std::string f = it.value().get<std::string>();
      ACCEL_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..", Status::Format,
                  index.string(), ": weight_map['", it.key(), "'] = '", f, "' is not a file name in the directory");
      listed[it.key()] = f;
      if (seen.insert(f).second) files.push_back(f);
    }
  } else {
    fail(Status::IO, "'", dir, "' has neither model.safetensors nor model.safetensors.index.json");
  }

  std::map<std::string, size_t> slot;
  const auto& names = model->parameter_names();
  for (size_t i = 0; i < names.size(); ++i) slot[names[i]] = i;
  const bool gpt2 = cfg.family == LMFamily::GPT2;
  const std::string embed = gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight";
  std::vector<std::string> loaded_from(names.size());
  torch::Tensor stored_head;  // a tied lm_head present in the files
  std::string head_file;

  torch::NoGradGuard ng;
  for (const std::string& file : files) {
    const std::string path = (fs::path(dir) / file).string();
    ACCEL_CHECK(fs::exists(path, ec), Status::IO, index.string(), " lists '", file, "', which is missing from '", dir, "'");
    const std::string bytes = safetensors::read_file(path);
    const auto header = safetensors::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
    for (const auto& t : header.tensors) {
      std::string name = t.name;
      if (gpt2 && !slot.count(name) && slot.count("transformer." + name)) name = "transformer." + name;  // the hub's bare names
      if (is_ignored_buffer(name)) continue;
      if (!listed.empty()) {
        auto it = listed.find(t.name);
        ACCEL_CHECK(it != listed.end() && it->second == file, Status::Format, path, ": tensor '", t.name,
                    "' is not listed for this file in ", index.string(),
                    it == listed.end() ? std::string(" (not listed at all)") : " (listed in '" + it->second + "')");
      }
      const bool tied_head = cfg.tie_word_embeddings && name == "lm_head.weight";
      auto it = slot.find(tied_head ? embed : name);
      ACCEL_CHECK(it != slot.end(), Status::Format, path, ": unexpected tensor '", t.name, "' (", config_summary(cfg),
                  " has no such parameter)");
      const torch::Tensor& param = model->parameters()[it->second];
      ACCEL_CHECK(t.shape == param.sizes().vec(), Status::Format, path, ": tensor '", t.name, "' has shape ", dims(t.shape),
                  ", the config (", config_summary(cfg), ") needs ", shape_str(param));
      ACCEL_CHECK(t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16", Status::Format, path, ": tensor '", t.name,
                  "' has dtype ", t.dtype, "; weights must be F32, BF16 or F16");
      ACCEL_CHECK(want_st.empty() || t.dtype == want_st, Status::Format, path, ": tensor '", t.name, "' has dtype ",
                  t.dtype, ", config.json says \"dtype\": \"", cfg.dtype, "\" (", want_st, ")");
      auto src = torch::from_blob(const_cast<char*>(bytes.data()) + header.data_start + t.begin, t.shape,
                                  torch::TensorOptions().dtype(torch_dtype(t.dtype)));
      if (tied_head) {
        stored_head = src.to(torch::kFloat).clone();
        head_file = path;
        continue;
      }
      ACCEL_CHECK(loaded_from[it->second].empty(), Status::Format, path, ": tensor '", t.name, "' is also in '",
                  loaded_from[it->second], "'");
      param.copy_(src.to(param.scalar_type()));
      loaded_from[it->second] = path;
    }
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (!loaded_from[i].empty()) continue;
    const std::string where = listed.count(names[i]) ? (fs::path(dir) / listed[names[i]]).string()
                              : files.size() == 1 && files[0] == "model.safetensors" ? single.string()
                                                                                     : index.string();
    fail(Status::Format, where, ": missing tensor '", names[i], "' (", config_summary(cfg), ")");
  }
  if (stored_head.defined()) {
    const torch::Tensor& e = model->parameters()[slot[embed]];
    ACCEL_CHECK(torch::equal(stored_head.to(e.scalar_type()), e.detach()), Status::Format, head_file,
                ": 'lm_head.weight' differs from '", embed, "', but config.json has \"tie_word_embeddings\": true");
  }
  return model;
}

namespace {

bool is_pretrained_file(const std::string& name) {
  // model-NNNNN-of-NNNNN.safetensors
  const bool shard = name.size() == 32 && digits_between(name.substr(0, 11), "model-", "") &&
                     digits_between(name.substr(11), "-of-", ".safetensors");
  return name == "config.json" || name == "generation_config.json" || name == "model.safetensors" ||
         name == "model.safetensors.index.json" || shard;
}

// A directory that holds only regular files `file_ok` accepts (and writers' ".NAME.tmp.*"
// leftovers) and, unless empty is enough, `required`.
bool holds_only(const fs::path& dir, bool allow_empty, bool (*file_ok)(const std::string&), const char* required) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return false;
  bool found = false, any = false;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool tmp = name.rfind(".", 0) == 0 && name.find(".tmp.") != std::string::npos;  // a writer's leftover
    if (!fs::is_regular_file(it->symlink_status(ec)) || (!file_ok(name) && !tmp)) return false;
    any = true;
    found = found || name == required;
  }
  return !ec && (found || (allow_empty && !any));
}

// A directory of a pretrained model's files only (and, unless empty is enough, config.json).
bool is_pretrained_dir(const fs::path& dir, bool allow_empty) {
  return holds_only(dir, allow_empty, is_pretrained_file, "config.json");
}

}  // namespace

namespace {

// Writes a directory atomically: `write(tmp)` fills a hidden temporary directory beside it,
// which then replaces `dir`. Only nothing, an empty directory or an earlier directory of this
// kind (`ours`) is replaced, and the temporary paths may hold only such leftovers: anything
// else is refused (InvalidArgument), so a save never deletes what it did not write.
void write_dir_atomically(const std::string& dir, const std::string& fn, const std::string& kind,
                          bool (*ours)(const fs::path&, bool), const std::function<void(const fs::path&)>& write) {
  ACCEL_CHECK(!dir.empty(), Status::InvalidArgument, "dir is empty");
  fs::path target = fs::absolute(fs::path(dir)).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "out/"
  const fs::path parent = target.parent_path();
  const std::string base = target.filename().string();
  ACCEL_CHECK(!base.empty() && base != "." && base != "..", Status::InvalidArgument, "dir '", dir,
              "' does not name a directory to write");
  std::error_code ec;
  const auto st_target = fs::symlink_status(target, ec);
  if (st_target.type() != fs::file_type::not_found)
    ACCEL_CHECK(ours(target, /*allow_empty=*/true), Status::InvalidArgument, "dir '", dir, "' is ",
                st_target.type() == fs::file_type::directory ? "a directory that is not a " + kind + " (it holds other files)"
                                                             : std::string("a non-directory"),
                ": refusing to replace it; choose a new path, or an earlier ", fn, " directory");
  ACCEL_CHECK(fs::is_directory(parent, ec), Status::IO, "dir '", dir, "': the parent directory '", parent.string(),
              "' does not exist");
  const fs::path tmp = parent / ("." + base + ".tmp"), old = parent / ("." + base + ".old");
  for (const fs::path& p : {tmp, old}) {
    if (fs::symlink_status(p, ec).type() == fs::file_type::not_found) continue;
    ACCEL_CHECK(ours(p, /*allow_empty=*/true), Status::InvalidArgument, fn, " to '", dir, "' uses the temporary path '",
                p.string(), "', where there is something an accel save did not leave: refusing to delete it; move it away");
    fs::remove_all(p, ec);
  }
  fs::create_directory(tmp, ec);
  ACCEL_CHECK(!ec, Status::IO, "cannot create '", tmp.string(), "': ", ec.message());
  try {
    write(tmp);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  const files::Result r = files::publish_dir(tmp.string(), target.string(), old.string());  // one step
  ACCEL_CHECK(r, Status::IO, r.message);
}

// A directory of a PEFT adapter's files as accel writes them only (and, unless empty is
// enough, adapter_config.json).
bool is_adapter_file(const std::string& name) {
  return name == "adapter_config.json" || name == "adapter_model.safetensors";
}
bool is_adapter_dir(const fs::path& dir, bool allow_empty) {
  return holds_only(dir, allow_empty, is_adapter_file, "adapter_config.json");
}

void write_safetensors_file(const fs::path& path, const std::vector<std::string>& names,
                            const std::vector<torch::Tensor>& host, const std::string& st) {
  std::vector<safetensors::TensorView> views;
  for (size_t i = 0; i < host.size(); ++i)
    views.push_back({names[i], st, host[i].sizes().vec(), host[i].data_ptr(),
                     static_cast<size_t>(host[i].numel()) * host[i].element_size()});
  safetensors::write_tensors_atomic(path.string(), safetensors::serialize_header(views, {{"format", "pt"}}), views);
}

const lm_detail::TransformerLM& lm_of(const Model& model, const char* fn) {
  auto* m = model.as_lm();
  ACCEL_CHECK(m, Status::InvalidArgument, fn, ": the model is not a causal LM (GPT-2 or Llama)");
  return *m;
}

}  // namespace

void save_pretrained(const Model& model, const std::vector<torch::Tensor>& weights, const std::string& dir) {
  const auto& lm = lm_of(model, "save_pretrained");
  ACCEL_CHECK(lm.quant_type() == QuantType::None, Status::InvalidArgument, "the model's base is "
              "quantized (", quant_name(lm.quant_type()), ") and stays as it was loaded; save the trained adapters "
              "(accel_save_adapter, PEFT's format) and load them onto the base with accel_model_load_adapter");
  const LMConfig* cfg = &lm.config();
  ACCEL_CHECK(!dir.empty(), Status::InvalidArgument, "dir is empty");
  const auto& names = lm.base_names();
  const std::vector<torch::Tensor>& base = lm.base_weights();
  const std::vector<torch::Tensor>& src = weights.empty() ? base : weights;
  ACCEL_CHECK(src.size() == names.size(), Status::InvalidArgument, "save_pretrained: ", src.size(),
              " weights for a model of ", names.size(), " weights");
  std::vector<torch::Tensor> host;
  std::string st;
  for (size_t i = 0; i < src.size(); ++i) {
    const torch::Tensor& p = base[i];
    ACCEL_CHECK(src[i].defined() && src[i].sizes() == p.sizes(), Status::InvalidArgument, "save_pretrained: weight ",
                i, " ('", names[i], "') has shape ", src[i].defined() ? shape_str(src[i]) : std::string("none"),
                ", the parameter ", shape_str(p));
    const std::string d = st_dtype(src[i].scalar_type());
    ACCEL_CHECK(!d.empty(), Status::InvalidArgument, "save_pretrained: weight '", names[i], "' is ",
                c10::toString(src[i].scalar_type()), "; float32, bfloat16 or float16 are saved");
    ACCEL_CHECK(st.empty() || d == st, Status::InvalidArgument, "save_pretrained: the weights mix ", st, " and ", d,
                " ('", names[i], "'); config.json records one dtype");
    st = d;
    host.push_back(src[i].detach().to(torch::kCPU).contiguous());
  }
  LMConfig out = *cfg;
  out.dtype = config_of_st(st);
  json cj = lm_config_json(out);
  cj["architectures"] = {architecture_of(*cfg)};
  write_dir_atomically(dir, "save_pretrained", "pretrained model", is_pretrained_dir, [&](const fs::path& tmp) {
    write_safetensors_file(tmp / "model.safetensors", names, host, st);
    safetensors::write_file_atomic((tmp / "config.json").string(), cj.dump(2) + "\n");
  });
}

// ---------------------------------------------------------------------------------------
// LoRA adapters in PEFT's format

namespace {
const std::string kPeftPrefix = "base_model.model.";
}  // namespace

void save_adapter(const Model& model, const std::vector<torch::Tensor>& lora, const std::string& dir) {
  const auto& lm = lm_of(model, "save_adapter");
  const auto* L = lm.lora();
  ACCEL_CHECK(L, Status::InvalidArgument, "save_adapter: the model has no LoRA adapters (add them first)");
  const std::vector<torch::Tensor>& vals = lora.empty() ? L->params : lora;
  ACCEL_CHECK(vals.size() == L->params.size(), Status::InvalidArgument, "save_adapter: ", vals.size(),
              " adapter tensors for ", L->params.size());
  std::vector<std::string> keys;
  std::vector<torch::Tensor> host;
  for (size_t i = 0; i < vals.size(); ++i) {
    ACCEL_CHECK(vals[i].sizes() == L->params[i].sizes(), Status::InvalidArgument, "save_adapter: '", L->names[i],
                "' has shape ", shape_str(vals[i]), ", the adapter ", shape_str(L->params[i]));
    keys.push_back(kPeftPrefix + L->names[i]);
    host.push_back(vals[i].detach().to(torch::kCPU, torch::kFloat).contiguous());
  }
  // the targets as PEFT writes them after resolving "all-linear": the adapted modules' names
  std::vector<std::string> targets = L->targets;
  if (targets.size() == 1 && targets[0] == "all-linear") {
    targets.clear();
    for (const auto& m : lm.block_modules()) {
      const std::string shortname = m.substr(m.find('.') + 1);
      if (std::find(targets.begin(), targets.end(), shortname) == targets.end()) targets.push_back(shortname);
    }
  }
  json cfg = {{"peft_type", "LORA"},
              {"task_type", "CAUSAL_LM"},
              {"r", L->cfg.r},
              {"lora_alpha", L->cfg.alpha},
              {"lora_dropout", L->cfg.dropout},
              {"target_modules", targets},
              {"fan_in_fan_out", lm.conv1d()},
              {"bias", "none"},
              {"use_rslora", L->cfg.use_rslora},
              {"use_dora", false},
              {"modules_to_save", nullptr},
              {"layers_to_transform", nullptr},
              {"rank_pattern", json::object()},
              {"alpha_pattern", json::object()},
              {"init_lora_weights", true},
              {"inference_mode", true},
              {"base_model_name_or_path", nullptr}};
  write_dir_atomically(dir, "save_adapter", "PEFT adapter", is_adapter_dir, [&](const fs::path& tmp) {
    write_safetensors_file(tmp / "adapter_model.safetensors", keys, host, "F32");
    safetensors::write_file_atomic((tmp / "adapter_config.json").string(), cfg.dump(2) + "\n");
  });
}

void load_adapter(Model& model, const std::string& dir) {
  auto* lm = model.as_lm();
  ACCEL_CHECK(lm, Status::InvalidArgument, "load_adapter: the model is not a causal LM (GPT-2 or Llama)");
  ACCEL_CHECK(!lm->lora(), Status::InvalidArgument, "load_adapter: the model has LoRA adapters already");
  ACCEL_CHECK(!dir.empty(), Status::InvalidArgument, "dir is empty");
  std::error_code ec;
  ACCEL_CHECK(fs::is_directory(dir, ec), Status::IO, "'", dir, "' is not a directory (a PEFT adapter is a directory "
              "with adapter_config.json and adapter_model.safetensors)");
  const std::string cpath = (fs::path(dir) / "adapter_config.json").string();
  const std::string wpath = (fs::path(dir) / "adapter_model.safetensors").string();
  ACCEL_CHECK(fs::exists(cpath, ec), Status::IO, "'", dir, "' has no adapter_config.json");
  ACCEL_CHECK(fs::exists(wpath, ec), Status::IO, "'", dir, "' has no adapter_model.safetensors");
  json j = json::parse(safetensors::read_file(cpath), nullptr, false);
  ACCEL_CHECK(!j.is_discarded() && j.is_object(), Status::Format, cpath, ": not a JSON object");
  auto str = [&](const char* k, const std::string& dflt) {
    if (!j.contains(k) || j[k].is_null()) return dflt;
    ACCEL_CHECK(j[k].is_string(), Status::Format, cpath, ": the field '", k, "' must be a string");
    return j[k].get<std::string>();
  };
  auto num = [&](const char* k, double dflt) {
    if (!j.contains(k) || j[k].is_null()) return dflt;
    ACCEL_CHECK(j[k].is_number(), Status::Format, cpath, ": the field '", k, "' must be a number");
    return j[k].get<double>();
  };
  auto flag = [&](const char* k) {
    if (!j.contains(k) || j[k].is_null()) return false;
    ACCEL_CHECK(j[k].is_boolean(), Status::Format, cpath, ": the field '", k, "' must be true or false");
    return j[k].get<bool>();
  };
  auto empty = [&](const char* k) {
    return !j.contains(k) || j[k].is_null() || ((j[k].is_object() || j[k].is_array()) && j[k].empty());
  };
  const std::string type = str("peft_type", "");
  ACCEL_CHECK(type == "LORA", Status::Unsupported, cpath, ": peft_type '", type, "' is not supported (LORA is)");
  ACCEL_CHECK(!flag("use_dora"), Status::Unsupported, cpath, ": use_dora (DoRA) is not supported");
  ACCEL_CHECK(str("bias", "none") == "none", Status::Unsupported, cpath, ": bias '", str("bias", "none"),
              "' is not supported (none is)");
  for (const char* k : {"modules_to_save", "rank_pattern", "alpha_pattern", "layers_to_transform"})
    ACCEL_CHECK(empty(k), Status::Unsupported, cpath, ": '", k, "' is not supported (it must be null or empty)");
  LoraConfig c;
  const double r = num("r", 8);
  ACCEL_CHECK(r >= 1 && r == std::floor(r), Status::Format, cpath, ": r must be a positive integer, got ", r);
  c.r = static_cast<int64_t>(r);
  c.alpha = num("lora_alpha", 8);
  c.dropout = num("lora_dropout", 0.0);
  c.use_rslora = flag("use_rslora");
  if (j.contains("target_modules") && !j["target_modules"].is_null()) {
    const json& t = j["target_modules"];
    if (t.is_string()) {
      ACCEL_CHECK(t.get<std::string>() == "all-linear", Status::Unsupported, cpath,
                  ": target_modules as a regular expression is not supported (a list of names, or \"all-linear\")");
      c.target_modules = {"all-linear"};
    } else {
      ACCEL_CHECK(t.is_array(), Status::Format, cpath, ": target_modules must be a list of module names");
      for (const auto& v : t) {
        ACCEL_CHECK(v.is_string(), Status::Format, cpath, ": target_modules must be a list of module names");
        c.target_modules.push_back(v.get<std::string>());
      }
    }
  }
  // the tensors, checked before the model changes
  const std::string bytes = safetensors::read_file(wpath);
  const auto header = safetensors::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), wpath);
  auto gen = at::detail::createCPUGenerator(0);  // A's initial values are replaced below
  lm->enable_lora(c, gen);
  try {
    const auto* L = lm->lora();
    std::map<std::string, size_t> slot;
    for (size_t i = 0; i < L->names.size(); ++i) slot[kPeftPrefix + L->names[i]] = i;
    std::vector<bool> seen(L->names.size(), false);
    torch::NoGradGuard ng;
    for (const auto& t : header.tensors) {
      auto it = slot.find(t.name);
      ACCEL_CHECK(it != slot.end(), Status::Format, wpath, ": unexpected tensor '", t.name,
                  "' (the config's target_modules give no such adapter)");
      const torch::Tensor& p = L->params[it->second];
      ACCEL_CHECK(t.shape == p.sizes().vec(), Status::Format, wpath, ": tensor '", t.name, "' has shape ", dims(t.shape),
                  ", r = ", c.r, " and the model need ", shape_str(p));
      ACCEL_CHECK(t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16", Status::Format, wpath, ": tensor '",
                  t.name, "' has dtype ", t.dtype, "; adapters must be F32, BF16 or F16");
      auto src = torch::from_blob(const_cast<char*>(bytes.data()) + header.data_start + t.begin, t.shape,
                                  torch::TensorOptions().dtype(torch_dtype(t.dtype)));
      p.copy_(src.to(p.scalar_type()));
      seen[it->second] = true;
    }
    for (size_t i = 0; i < seen.size(); ++i)
      ACCEL_CHECK(seen[i], Status::Format, wpath, ": missing tensor '", kPeftPrefix + L->names[i], "'");
  } catch (...) {
    lm->disable_lora();
    throw;
  }
}

}  // namespace accel
