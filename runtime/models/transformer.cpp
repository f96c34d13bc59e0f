// Causal language models: config.json, loading and saving Hugging Face directories, the
// causal-LM loss, the attention core (see transformer.h).
#include "runtime/models/transformer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "base/files.h"
#include "runtime/compat.h"
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

}  // namespace

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
  } else if (c.model_type == "llama") {
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
    } else {
      ACCEL_CHECK(c.hidden_size % c.num_heads == 0, Status::Format, what, ": 'hidden_size' (", c.hidden_size,
                  ") must be a multiple of 'num_attention_heads' (", c.num_heads, ") when 'head_dim' is absent");
      c.head_dim = c.hidden_size / c.num_heads;
    }
    ACCEL_CHECK(c.head_dim % 2 == 0, Status::Format, what, ": the head dimension (", c.head_dim,
                ") must be even for rotary embeddings");
    c.activation = f.string("hidden_act", "silu");
    c.max_position_embeddings = f.positive("max_position_embeddings", 2048);
    c.initializer_range = f.number("initializer_range", 0.02);
    c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
    c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
    c.attention_bias = f.boolean("attention_bias", false);
    c.mlp_bias = f.boolean("mlp_bias", false);
    c.attention_dropout = f.probability("attention_dropout");
    ACCEL_CHECK(f.integer("pretraining_tp", 1) == 1, Status::Unsupported, what,
                ": 'pretraining_tp' other than 1 is not supported");
    // RoPE: transformers 5 writes "rope_parameters", 4 a top-level "rope_theta" and "rope_scaling"
    c.rope_theta = f.number("rope_theta", 10000.0);
    for (const char* key : {"rope_parameters", "rope_scaling"}) {
      if (!f.has(key)) continue;
      const json& r = j[key];
      ACCEL_CHECK(r.is_object(), Status::Format, what, ": the field '", key, "' must be an object, got ", r.dump());
      Fields rf{r, what};
      std::string type = rf.string("rope_type", rf.string("type", "default"));
      ACCEL_CHECK(type == "default", Status::Unsupported, what, ": '", key, "' has rope_type '", type,
                  "'; accel supports only the \"default\" RoPE (no scaling)");
      if (rf.has("rope_theta")) c.rope_theta = rf.number("rope_theta", c.rope_theta);
    }
    ACCEL_CHECK(c.rope_theta > 0, Status::Format, what, ": 'rope_theta' must be positive, got ", c.rope_theta);
  } else {
    fail(Status::Unsupported, what, ": model_type '", c.model_type, "' is not supported (supported: \"gpt2\", \"llama\")");
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
    if (!j.contains("architectures")) j["architectures"] = {"GPT2LMHeadModel"};
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
    if (!j.contains("architectures")) j["architectures"] = {"LlamaForCausalLM"};
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.intermediate_size;
    j["num_hidden_layers"] = c.num_layers;
    j["num_attention_heads"] = c.num_heads;
    j["num_key_value_heads"] = c.num_kv_heads;
    j["head_dim"] = c.head_dim;
    j["hidden_act"] = c.activation;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["attention_bias"] = c.attention_bias;
    j["mlp_bias"] = c.mlp_bias;
    j["attention_dropout"] = c.attention_dropout;
    // both spellings: transformers 5 reads rope_parameters, 4 the top-level rope_theta
    j.erase("rope_scaling");
    j["rope_parameters"] = {{"rope_theta", c.rope_theta}, {"rope_type", "default"}};
    j["rope_theta"] = c.rope_theta;
  }
  if (!c.dtype.empty()) j["dtype"] = c.dtype;
  return j;
}

torch::Tensor generate(const std::function<torch::Tensor(const torch::Tensor&, lm_detail::KVCache*)>& forward,
                       const torch::Tensor& ids, const GenerateConfig& c, const LMConfig& model_cfg) {
  ACCEL_CHECK(ids.defined() && ids.dim() == 2 && ids.size(0) >= 1 && ids.size(1) >= 1, Status::InvalidArgument,
              "input_ids must be [batch, seq] with batch, seq >= 1, got ", ids.defined() ? shape_str(ids) : "none");
  ACCEL_CHECK(ids.scalar_type() == torch::kLong, Status::InvalidArgument, "input_ids must be int64, got ",
              c10::toString(ids.scalar_type()));
  ACCEL_CHECK(c.max_new_tokens >= 1, Status::InvalidArgument, "max_new_tokens must be >= 1, got ", c.max_new_tokens);
  ACCEL_CHECK(std::isfinite(c.temperature) && c.temperature >= 0, Status::InvalidArgument,
              "temperature must be finite and >= 0 (0: greedy), got ", c.temperature);
  ACCEL_CHECK(c.top_k >= 0, Status::InvalidArgument, "top_k must be >= 0 (0: every token), got ", c.top_k);
  ACCEL_CHECK(c.eos_token_id >= -1 && c.eos_token_id < model_cfg.vocab_size, Status::InvalidArgument,
              "eos_token_id must be -1 (none) or a token id below ", model_cfg.vocab_size, ", got ", c.eos_token_id);
  if (model_cfg.family == LMFamily::GPT2)
    ACCEL_CHECK(ids.size(1) + c.max_new_tokens <= model_cfg.max_position_embeddings, Status::InvalidArgument,
                "the prompt's ", ids.size(1), " tokens and max_new_tokens ", c.max_new_tokens, " exceed n_positions ",
                model_cfg.max_position_embeddings);
  torch::NoGradGuard ng;
  auto gen = at::detail::createCPUGenerator(c.seed);
  torch::Tensor out = ids.to(torch::kCPU).contiguous();
  torch::Tensor done = torch::zeros({ids.size(0)}, torch::kBool);
  lm_detail::KVCache cache;
  torch::Tensor next_input = out;
  for (int64_t step = 0; step < c.max_new_tokens; ++step) {
    torch::Tensor logits = c.use_cache ? forward(next_input, &cache) : forward(out, nullptr);
    if (c.use_cache) cache.length += next_input.size(1);
    torch::Tensor last = logits.select(1, logits.size(1) - 1).to(torch::kCPU, torch::kFloat);  // [B, V]
    torch::Tensor tok;
    if (c.temperature == 0) {
      tok = last.argmax(-1);
    } else {
      torch::Tensor l = last / c.temperature;
      if (c.top_k > 0 && c.top_k < l.size(-1)) {
        auto kth = std::get<0>(l.topk(c.top_k, -1)).select(-1, c.top_k - 1).unsqueeze(-1);
        l = l.masked_fill(l < kth, -std::numeric_limits<float>::infinity());
      }
      tok = torch::multinomial(torch::softmax(l, -1), 1, false, gen).squeeze(-1);
    }
    if (c.eos_token_id >= 0) {
      tok = torch::where(done, torch::full_like(tok, c.eos_token_id), tok);
      done = done.logical_or(tok.eq(c.eos_token_id));
    }
    out = torch::cat({out, tok.unsqueeze(1)}, 1);
    next_input = tok.unsqueeze(1).to(ids.device());
    if (c.eos_token_id >= 0 && done.all().item<bool>()) break;
  }
  return out;
}

const LMConfig* lm_config_of(const Model& model) {
  auto* m = model.as_lm();
  return m ? &m->config() : nullptr;
}

void add_lora(Model& model, const LoraConfig& cfg, at::Generator gen) {
  auto* m = model.as_lm();
  ACCEL_CHECK(m, Status::InvalidArgument, "LoRA adapters go on the causal LMs (GPT-2, Llama), not on this model");
  m->enable_lora(cfg, gen);
}

const LoraConfig* lora_config_of(const Model& model) {
  auto* m = model.as_lm();
  return m && m->lora() ? &m->lora()->cfg : nullptr;
}

std::vector<torch::Tensor> merged_weights(const Model& model, const std::vector<torch::Tensor>& lora) {
  auto* m = model.as_lm();
  ACCEL_CHECK(m, Status::InvalidArgument, "the model is not a causal LM (GPT-2 or Llama)");
  std::vector<torch::Tensor> out;
  for (const auto& w : m->base_weights()) out.push_back(w.detach().to(torch::kCPU, torch::kFloat, false, true));
  const auto* L = m->lora();
  if (!L) return out;
  const std::vector<torch::Tensor>& vals = lora.empty() ? L->params : lora;
  ACCEL_CHECK(vals.size() == L->params.size(), Status::InvalidArgument, "merged_weights: ", vals.size(),
              " adapter tensors for ", L->params.size());
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < m->base_names().size(); ++i) index[m->base_names()[i]] = i;
  const std::string suffix = ".lora_A.weight";
  torch::NoGradGuard ng;
  for (size_t k = 0; k + 1 < vals.size(); k += 2) {
    const std::string& an = L->names[k];
    const std::string module = an.substr(0, an.size() - suffix.size());
    auto A = vals[k].detach().to(torch::kCPU, torch::kFloat), B = vals[k + 1].detach().to(torch::kCPU, torch::kFloat);
    auto delta = torch::matmul(B, A) * L->scale;  // [out, in]
    torch::Tensor& w = out[index.at(module + ".weight")];
    w.add_(m->conv1d() ? delta.t() : delta);
  }
  return out;
}

void set_gradient_checkpointing(Model& model, bool on) {
  auto* m = model.as_lm();
  ACCEL_CHECK(m, Status::InvalidArgument,
              "gradient checkpointing is an option of the causal LMs (GPT-2, Llama), not of this model");
  m->set_checkpointing(on);
}

torch::ScalarType lm_weights_dtype(const Model& model) {
  auto* m = model.as_lm();
  ACCEL_CHECK(m, Status::InvalidArgument, "the model is not a causal LM (GPT-2 or Llama)");
  return m->weights_dtype();
}

bool gradient_checkpointing(const Model& model) {
  auto* m = model.as_lm();
  return m && m->checkpointing();
}

// ---------------------------------------------------------------------------------------
// The shared model parts

namespace lm_detail {

void TransformerLM::add(const std::string& name, std::vector<int64_t> shape, size_t unit, int init, double std,
                        torch::ScalarType dtype, const at::Generator* gen) {
  torch::Tensor t;
  {
    torch::NoGradGuard ng;
    if (!gen) {
      t = torch::empty(shape, torch::TensorOptions().dtype(dtype));
    } else if (init == 0) {
      t = torch::empty(shape, torch::kFloat).normal_(0.0, std, *gen).to(dtype);
    } else {
      t = (init == 1 ? torch::zeros(shape, torch::kFloat) : torch::ones(shape, torch::kFloat)).to(dtype);
    }
  }
  dtype_ = dtype;
  if (units_.size() <= unit) units_.resize(unit + 1);
  units_[unit].push_back(params_.size());
  names_.push_back(name);
  params_.push_back(t.requires_grad_(true));
}

std::unique_ptr<Model> TransformerLM::clone() const {
  std::unique_ptr<TransformerLM> c =
      cfg_.family == LMFamily::GPT2 ? make_gpt2(cfg_, dtype_, nullptr) : make_llama(cfg_, dtype_, nullptr);
  ACCEL_CHECK(c->params_.size() == params_.size(), Status::Internal, "the copy of the LM has ", c->params_.size(),
              " base weights, the model ", params_.size());
  if (lora_) {  // the frozen base weights are not published: copied (accel_inference_create refuses them sharded)
    {
      torch::NoGradGuard ng;
      for (size_t i = 0; i < params_.size(); ++i) c->params_[i] = params_[i].detach().clone();
    }
    c->finish();
    at::Generator g = at::detail::createCPUGenerator(0);  // the adapters' values are replaced by the caller's
    c->enable_lora(lora_->cfg, g);
  }
  c->training_ = training_;
  return c;
}

void TransformerLM::to(const torch::Device& device) {
  auto move = [&](torch::Tensor& t, bool trainable) {
    if (t.defined() && t.device() != device) t = t.detach().to(device).requires_grad_(trainable);
  };
  for (auto& t : params_) move(t, !lora_);
  if (!lora_) {
    set_parameters(names_, params_);
    return;
  }
  for (auto& t : lora_->A) move(t, true);
  for (auto& t : lora_->B) move(t, true);
  lora_->params.clear();
  for (size_t k = 0; k < lora_->A.size(); ++k)
    if (lora_->A[k].defined()) {
      lora_->params.push_back(lora_->A[k]);
      lora_->params.push_back(lora_->B[k]);
    }
  set_parameters(lora_->names, lora_->params);
}

std::pair<torch::Tensor, torch::Tensor> TransformerLM::cache_append(KVCache& cache, int64_t layer, const torch::Tensor& k,
                                                                     const torch::Tensor& v) {
  const size_t l = static_cast<size_t>(layer);
  if (cache.k.size() <= l) {
    cache.k.resize(l + 1);
    cache.v.resize(l + 1);
  }
  if (cache.k[l].defined()) {
    cache.k[l] = torch::cat({cache.k[l], k}, 2);
    cache.v[l] = torch::cat({cache.v[l], v}, 2);
  } else {
    cache.k[l] = k.contiguous();
    cache.v[l] = v.contiguous();
  }
  return {cache.k[l], cache.v[l]};
}

torch::Tensor TransformerLM::check_inputs(const std::vector<torch::Tensor>& inputs, bool bounded, int64_t past) const {
  ACCEL_CHECK(inputs.size() == 1 || inputs.size() == 2, Status::InvalidArgument,
              "num_inputs must be 1 (input_ids) or 2 (input_ids, attention_mask) for a causal LM, got ", inputs.size());
  const torch::Tensor& ids = inputs[0];
  ACCEL_CHECK(ids.defined() && ids.dim() == 2 && ids.size(0) >= 1 && ids.size(1) >= 1, Status::InvalidArgument,
              "inputs[0] (input_ids) must be [batch, seq] with batch, seq >= 1, got ",
              ids.defined() ? shape_str(ids) : std::string("none"));
  ACCEL_CHECK(ids.scalar_type() == torch::kLong, Status::InvalidArgument, "inputs[0] (input_ids) must be int64, got ",
              c10::toString(ids.scalar_type()));
  auto mm = torch::aminmax(ids);
  const int64_t lo = std::get<0>(mm).item<int64_t>(), hi = std::get<1>(mm).item<int64_t>();
  ACCEL_CHECK(lo >= 0 && hi < cfg_.vocab_size, Status::InvalidArgument, "inputs[0] (input_ids): token id ",
              lo < 0 ? lo : hi, " is out of range for vocab_size ", cfg_.vocab_size);
  if (bounded)
    ACCEL_CHECK(past + ids.size(1) <= cfg_.max_position_embeddings, Status::InvalidArgument, "inputs[0] (input_ids): ",
                past + ids.size(1), " positions, the model has ", cfg_.max_position_embeddings);
  if (inputs.size() == 1) return {};
  const torch::Tensor& mask = inputs[1];
  ACCEL_CHECK(mask.defined() && mask.sizes() == ids.sizes(), Status::InvalidArgument,
              "inputs[1] (attention_mask) must have input_ids' shape ", shape_str(ids), ", got ",
              mask.defined() ? shape_str(mask) : std::string("none"));
  ACCEL_CHECK(mask.scalar_type() == torch::kLong || mask.scalar_type() == torch::kInt ||
                  mask.scalar_type() == torch::kBool,
              Status::InvalidArgument, "inputs[1] (attention_mask) must be int64, int32 or bool, got ",
              c10::toString(mask.scalar_type()));
  return mask.to(ids.device());
}

torch::Tensor activate(const std::string& act, const torch::Tensor& x) {
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") return torch::gelu(x, "tanh");
  if (act == "gelu") return torch::gelu(x);
  if (act == "relu") return torch::relu(x);
  return torch::silu(x);  // silu, swish (parse_lm_config refuses any other)
}

torch::Tensor dropout(const torch::Tensor& x, double prob, bool training, at::Generator& gen) {
  if (!training || prob <= 0.0) return x;
  auto keep = torch::empty_like(x).bernoulli_(1.0 - prob, gen);
  return x * keep / (1.0 - prob);
}

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& mask, double scale, double drop, bool training, at::Generator& gen) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1), S = k.size(2);
  torch::Tensor kk = k, vv = v;
  if (Hkv != H) {  // grouped-query attention: query head h uses key-value head h / (H / Hkv)
    kk = k.repeat_interleave(H / Hkv, 1);
    vv = v.repeat_interleave(H / Hkv, 1);
  }
  // fp32 math whatever the weights, with autocast off (it would cast the matmuls down)
  struct NoAutocast {
    c10::DeviceType type;
    bool was;
    explicit NoAutocast(c10::DeviceType t) : type(t), was(compat::autocast_enabled(t)) {
      if (was) compat::set_autocast_enabled(type, false);
    }
    ~NoAutocast() {
      if (was) compat::set_autocast_enabled(type, true);
    }
  } no_autocast(q.device().type());
  auto allowed = torch::ones({T, S}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).tril(S - T);
  allowed = allowed.view({1, 1, T, S});
  if (mask.defined()) allowed = allowed.logical_and(mask.ne(0).view({B, 1, 1, S}));
  // the float minimum, as transformers' eager attention: a query that sees no key attends
  // uniformly instead of producing NaN
  const float lowest = std::numeric_limits<float>::lowest();
  if (compat::kHasFusedAttention && (!training || drop <= 0.0)) {  // libtorch's fused kernel (its dropout would not use `gen`)
    auto bias = torch::zeros(allowed.sizes(), q.options().dtype(torch::kFloat)).masked_fill(allowed.logical_not(), lowest);
    auto out = compat::scaled_dot_product_attention(q.to(torch::kFloat), kk.to(torch::kFloat), vv.to(torch::kFloat), bias,
                                                    scale);
    return out.transpose(1, 2).reshape({B, T, H * D}).to(v.scalar_type());
  }
  auto scores = torch::matmul(q.to(torch::kFloat), kk.to(torch::kFloat).transpose(-1, -2)) * scale;
  scores = scores.masked_fill(allowed.logical_not(), lowest);
  auto probs = torch::softmax(scores, -1, torch::kFloat);
  probs = dropout(probs, drop, training, gen);
  auto out = torch::matmul(probs, vv.to(torch::kFloat));  // [B, H, T, D]
  return out.transpose(1, 2).reshape({B, T, H * D}).to(v.scalar_type());
}


// ---------------------------------------------------------------------------------------
// Gradient checkpointing

namespace {

// What a checkpointed block's backward needs to run its forward again.
struct Recomputable : torch::CustomClassHolder {
  std::function<torch::Tensor(const torch::Tensor&)> fn;
  std::vector<torch::Tensor> params;  // the block's trainable parameters, in input order
  at::Generator* gen = nullptr;       // the model's generator (dropout), restored for the rerun
  torch::Tensor rng_state;            // its state before the forward (undefined: no dropout)
  c10::DeviceType device_type = c10::DeviceType::CPU;
  bool autocast = false;
  c10::ScalarType autocast_dtype = torch::kBFloat16;
};

// Forward: fn(x) without a graph, keeping x. Backward: fn(x) again with a graph, under the
// forward's autocast and random state, and its gradients with respect to x and the block's
// parameters, returned as this node's input gradients, so they accumulate into the
// parameters through autograd's ordinary path (DDP's and ZeRO's hooks see them as usual).
class Recompute : public torch::autograd::Function<Recompute> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, at::TensorList params,
                               const c10::intrusive_ptr<Recomputable>& r) {
    (void)params;
    ctx->save_for_backward({x});
    ctx->saved_data["r"] = c10::IValue::make_capsule(r);
    return r->fn(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto r = c10::static_intrusive_pointer_cast<Recomputable>(ctx->saved_data["r"].toCapsule());
    const torch::Tensor x0 = ctx->get_saved_variables()[0];
    const bool x_grad = x0.requires_grad();
    torch::Tensor x = x0.detach().requires_grad_(x_grad);
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);
      std::optional<compat::AutocastGuard> ac;
      if (r->autocast) ac.emplace(r->device_type, r->autocast_dtype);
      torch::Tensor now;
      if (r->rng_state.defined()) {
        now = r->gen->get_state();
        r->gen->set_state(r->rng_state);
      }
      y = r->fn(x);
      if (now.defined()) r->gen->set_state(now);
    }
    std::vector<torch::Tensor> wrt;
    if (x_grad) wrt.push_back(x);
    for (const auto& p : r->params) wrt.push_back(p);
    torch::autograd::variable_list out(2 + r->params.size());  // x, params..., the Recomputable
    if (wrt.empty() || !y.requires_grad()) return out;
    auto g = torch::autograd::grad({y}, wrt, {grads[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                                   /*allow_unused=*/true);
    size_t i = 0;
    if (x_grad) out[0] = g[i++];
    for (size_t k = 0; k < r->params.size(); ++k) out[1 + k] = g[i++];
    return out;
  }
};

}  // namespace

torch::Tensor checkpoint(std::function<torch::Tensor(const torch::Tensor&)> fn, const torch::Tensor& x,
                         const std::vector<torch::Tensor>& params, at::Generator* gen, bool uses_rng) {
  auto r = c10::make_intrusive<Recomputable>();
  r->fn = std::move(fn);
  for (const auto& p : params)
    if (p.requires_grad()) r->params.push_back(p);
  r->device_type = x.device().type();
  r->autocast = compat::autocast_enabled(r->device_type);
  if (r->autocast) r->autocast_dtype = compat::autocast_dtype(r->device_type);
  if (uses_rng && gen) {
    r->gen = gen;
    r->rng_state = gen->get_state();
  }
  return Recompute::apply(x, at::TensorList(r->params), r);
}

std::vector<torch::Tensor> TransformerLM::block_trainables(int64_t layer) const {
  std::vector<torch::Tensor> out;
  if (lora_) {
    for (size_t i : lora_->units.at(static_cast<size_t>(layer))) out.push_back(lora_->params[i]);
  } else {
    for (size_t i : units_.at(static_cast<size_t>(layer) + 1)) out.push_back(params_[i]);
  }
  return out;
}

void TransformerLM::gate_before(UnitGate* g, size_t u) const {
  if (!g) return;
  if (!lora_) return g->before(u);
  if (u >= 1 && u <= static_cast<size_t>(cfg_.num_layers)) g->before(u - 1);
}

void TransformerLM::gate_after(UnitGate* g, size_t u, const torch::Tensor& out) const {
  if (!g) return;
  if (!lora_) return g->after(u, out);
  if (u >= 1 && u <= static_cast<size_t>(cfg_.num_layers)) g->after(u - 1, out);
}

std::vector<std::string> TransformerLM::block_modules() const {
  if (cfg_.family == LMFamily::GPT2) return {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
  return {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
          "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
}

std::string TransformerLM::block_prefix(int64_t layer) const {
  return (cfg_.family == LMFamily::GPT2 ? "transformer.h." : "model.layers.") + std::to_string(layer) + ".";
}

torch::Tensor TransformerLM::with_lora(const torch::Tensor& y, const torch::Tensor& x, int64_t layer, size_t module) {
  if (!lora_) return y;
  const size_t slot = static_cast<size_t>(layer) * lora_->per_block + module;
  const torch::Tensor& A = lora_->A[slot];
  if (!A.defined()) return y;
  // as PEFT: x in the adapter's dtype, dropout, B(A(x)) * scale, back to the result's dtype
  torch::Tensor xin = x.scalar_type() == A.scalar_type() ? x : x.to(A.scalar_type());
  xin = dropout(xin, lora_->cfg.dropout, training_, gen_);
  torch::Tensor d = torch::matmul(torch::matmul(xin, A.t()), lora_->B[slot].t()) * lora_->scale;
  return y + (d.scalar_type() == y.scalar_type() ? d : d.to(y.scalar_type()));
}

void TransformerLM::disable_lora() {
  lora_.reset();
  for (auto& p : params_) p.requires_grad_(true);
  set_parameters(names_, params_);
}

void TransformerLM::enable_lora(const LoraConfig& c, at::Generator& gen) {
  ACCEL_CHECK(!lora_, Status::InvalidArgument, "the model has LoRA adapters already");
  ACCEL_CHECK(c.r >= 1, Status::InvalidArgument, "LoRA r must be >= 1, got ", c.r);
  ACCEL_CHECK(std::isfinite(c.alpha) && c.alpha > 0, Status::InvalidArgument, "LoRA alpha must be finite and > 0, got ",
              c.alpha);
  ACCEL_CHECK(std::isfinite(c.dropout) && c.dropout >= 0 && c.dropout < 1, Status::InvalidArgument,
              "LoRA dropout must be in [0, 1), got ", c.dropout);
  const std::vector<std::string> mods = block_modules();
  std::vector<std::string> targets = c.target_modules;
  if (targets.empty())
    targets = cfg_.family == LMFamily::GPT2 ? std::vector<std::string>{"c_attn"}
                                            : std::vector<std::string>{"q_proj", "v_proj"};
  const bool all_linear = targets.size() == 1 && targets[0] == "all-linear";
  for (const auto& t : targets)
    ACCEL_CHECK(!t.empty(), Status::InvalidArgument, "LoRA target_modules holds an empty name");
  Lora L;
  L.cfg = c;
  L.cfg.target_modules = targets;
  L.targets = targets;
  L.per_block = mods.size();
  L.scale = c.use_rslora ? c.alpha / std::sqrt(static_cast<double>(c.r)) : c.alpha / static_cast<double>(c.r);
  const size_t nl = static_cast<size_t>(cfg_.num_layers);
  L.A.resize(nl * mods.size());
  L.B.resize(nl * mods.size());
  L.units.resize(nl);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < names_.size(); ++i) index[names_[i]] = i;
  std::set<std::string> used;
  torch::NoGradGuard ng;
  for (size_t l = 0; l < nl; ++l)
    for (size_t m = 0; m < mods.size(); ++m) {
      const std::string full = block_prefix(static_cast<int64_t>(l)) + mods[m];
      bool hit = all_linear;
      for (const auto& t : targets)
        if (full == t || (full.size() > t.size() && full.compare(full.size() - t.size(), t.size(), t) == 0 &&
                          full[full.size() - t.size() - 1] == '.')) {
          hit = true;
          used.insert(t);
        }
      if (!hit) continue;
      const torch::Tensor& w = params_[index.at(full + ".weight")];
      const int64_t in = conv1d() ? w.size(0) : w.size(1), out = conv1d() ? w.size(1) : w.size(0);
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));  // kaiming_uniform(a=sqrt(5)), as nn.Linear
      const size_t slot = l * mods.size() + m;
      L.A[slot] = torch::empty({c.r, in}, torch::kFloat).uniform_(-bound, bound, gen).to(w.device()).requires_grad_(true);
      L.B[slot] = torch::zeros({out, c.r}, torch::TensorOptions().dtype(torch::kFloat).device(w.device())).requires_grad_(true);
      L.units[l].push_back(L.params.size());
      L.names.push_back(full + ".lora_A.weight");
      L.params.push_back(L.A[slot]);
      L.units[l].push_back(L.params.size());
      L.names.push_back(full + ".lora_B.weight");
      L.params.push_back(L.B[slot]);
    }
  if (!all_linear)
    for (const auto& t : targets) {
      std::string known;
      for (const auto& m : mods) known += (known.empty() ? "" : ", ") + m.substr(m.find('.') + 1);
      ACCEL_CHECK(used.count(t), Status::InvalidArgument, "LoRA target module '", t, "' matches no module of this ",
                  cfg_.model_type, " model (its linear modules: ", known, ", or all-linear)");
    }
  for (auto& p : params_) p.requires_grad_(false);
  lora_ = std::move(L);
  set_parameters(lora_->names, lora_->params);
}

}  // namespace lm_detail

// ---------------------------------------------------------------------------------------
// Creating, loading, saving

namespace {

std::unique_ptr<lm_detail::TransformerLM> build(const LMConfig& cfg, torch::ScalarType dtype, const at::Generator* gen) {
  ACCEL_CHECK(dtype == torch::kFloat || dtype == torch::kBFloat16, Status::InvalidArgument,
              "a causal LM's parameters must be float32 or bfloat16, got ", c10::toString(dtype));
  // a config made in code gets the checks parse_lm_config makes
  const bool gpt2 = cfg.family == LMFamily::GPT2;
  ACCEL_CHECK(cfg.model_type == (gpt2 ? "gpt2" : "llama"), Status::InvalidArgument, "LMConfig: model_type '",
              cfg.model_type, "' does not match the family (", gpt2 ? "gpt2" : "llama", ")");
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
  cj["architectures"] = {cfg->family == LMFamily::GPT2 ? "GPT2LMHeadModel" : "LlamaForCausalLM"};
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

// ---------------------------------------------------------------------------------------
// The loss

std::pair<torch::Tensor, int64_t> causal_lm_loss_sum(const torch::Tensor& logits, const torch::Tensor& labels) {
  ACCEL_CHECK(logits.defined() && logits.dim() == 3 && logits.size(1) >= 1, Status::InvalidArgument,
              "causal-LM logits must be [batch, seq, vocab], got ", logits.defined() ? shape_str(logits) : "none");
  ACCEL_CHECK(logits.is_floating_point(), Status::InvalidArgument, "causal-LM logits must be floating-point, got ",
              c10::toString(logits.scalar_type()));
  ACCEL_CHECK(labels.defined() && labels.dim() == 2 && labels.size(0) == logits.size(0) &&
                  labels.size(1) == logits.size(1),
              Status::InvalidArgument, "causal-LM labels must be [batch, seq] = [", logits.size(0), ", ",
              logits.size(1), "], got ", labels.defined() ? shape_str(labels) : "none");
  ACCEL_CHECK(labels.scalar_type() == torch::kLong, Status::InvalidArgument, "causal-LM labels must be int64, got ",
              c10::toString(labels.scalar_type()));
  const int64_t V = logits.size(2);
  auto targets = labels.to(logits.device()).narrow(1, 1, labels.size(1) - 1).reshape({-1});
  auto real = targets.ne(-100);
  const int64_t count = real.sum().item<int64_t>();
  if (count > 0) {
    auto r = targets.masked_select(real);
    auto mm = torch::aminmax(r);
    const int64_t lo = std::get<0>(mm).item<int64_t>(), hi = std::get<1>(mm).item<int64_t>();
    ACCEL_CHECK(lo >= 0 && hi < V, Status::InvalidArgument, "labels: token id ", lo < 0 ? lo : hi,
                " is out of range for ", V, " classes (and not -100, the ignored label)");
  }
  auto x = logits.narrow(1, 0, logits.size(1) - 1).reshape({-1, V}).to(torch::kFloat);
  auto sum = torch::nn::functional::cross_entropy(
      x, targets, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum));
  return {sum, count};
}

torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  auto [sum, count] = causal_lm_loss_sum(logits, labels);
  return sum / static_cast<double>(std::max<int64_t>(count, 1));
}

}  // namespace accel
