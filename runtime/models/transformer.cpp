// Causal language models: the shared model parts (the attention core), gradient
// checkpointing, generation, the LM capability wrappers and the causal-LM loss (see
// transformer.h). config.json, loading and saving Hugging Face directories and PEFT adapters
// are in hf_io.cpp.
#include "runtime/models/transformer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "runtime/compat.h"
#include "base/status.h"

namespace accel {

// ---------------------------------------------------------------------------------------
// Generation and the LM capability wrappers

torch::Tensor generate(const std::function<torch::Tensor(const torch::Tensor&, lm_detail::KVCache*)>& forward,
                       const torch::Tensor& ids, const GenerateConfig& c, const LMConfig& model_cfg) {
  return generate([&](const std::vector<torch::Tensor>& in, lm_detail::KVCache* cache) { return forward(in[0], cache); },
                  ids, torch::Tensor(), c, model_cfg);
}

torch::Tensor generate(const LMForward& forward, const torch::Tensor& ids, const torch::Tensor& attention_mask,
                       const GenerateConfig& c, const LMConfig& model_cfg) {
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
  torch::NoGradGuard ng;
  // A padded batch: padding on the left only (each row's new tokens follow its last token),
  // positions counted over each row's tokens (transformers' generate: cumsum(mask) - 1).
  torch::Tensor mask;
  int64_t longest = ids.size(1);
  if (attention_mask.defined()) {
    ACCEL_CHECK(attention_mask.sizes() == ids.sizes(), Status::InvalidArgument, "attention_mask must have input_ids' shape ",
                shape_str(ids), ", got ", shape_str(attention_mask));
    ACCEL_CHECK(attention_mask.scalar_type() == torch::kLong || attention_mask.scalar_type() == torch::kInt ||
                    attention_mask.scalar_type() == torch::kBool,
                Status::InvalidArgument, "attention_mask must be int64, int32 or bool, got ",
                c10::toString(attention_mask.scalar_type()));
    mask = attention_mask.to(torch::kCPU).ne(0).to(torch::kLong);
    const torch::Tensor lengths = mask.sum(1);
    const int64_t shortest = lengths.min().item<int64_t>();
    ACCEL_CHECK(shortest >= 1, Status::InvalidArgument, "attention_mask: row ", lengths.argmin().item<int64_t>(),
                " has no token");
    // left padding: in each row, once a 1 is seen every later position is 1
    const torch::Tensor after_token = mask.cumsum(1).gt(0);
    const torch::Tensor holes = after_token.logical_and(mask.eq(0));
    ACCEL_CHECK(!holes.any().item<bool>(), Status::InvalidArgument, "attention_mask: row ",
                holes.any(1).to(torch::kLong).argmax().item<int64_t>(),
                " has padding after a token: generation needs the padding on the left (padding_side LEFT)");
    longest = lengths.max().item<int64_t>();
  }
  if (model_cfg.family == LMFamily::GPT2)
    ACCEL_CHECK(longest + c.max_new_tokens <= model_cfg.max_position_embeddings, Status::InvalidArgument,
                "the prompt's ", longest, " tokens and max_new_tokens ", c.max_new_tokens, " exceed n_positions ",
                model_cfg.max_position_embeddings);
  auto gen = at::detail::createCPUGenerator(c.seed);
  torch::Tensor out = ids.to(torch::kCPU).contiguous();
  torch::Tensor done = torch::zeros({ids.size(0)}, torch::kBool);
  lm_detail::KVCache cache;
  torch::Tensor next_input = out;
  const auto positions_of = [](const torch::Tensor& m) { return (m.cumsum(1) - 1).masked_fill(m.eq(0), 1); };
  torch::Tensor positions = mask.defined() ? positions_of(mask) : torch::Tensor();
  const auto dev = [&](const torch::Tensor& t) { return t.to(ids.device()); };
  for (int64_t step = 0; step < c.max_new_tokens; ++step) {
    torch::Tensor logits;
    if (!mask.defined()) {
      logits = c.use_cache ? forward({next_input}, &cache) : forward({out}, nullptr);
    } else if (c.use_cache) {
      const torch::Tensor pos = step == 0 ? positions : positions.narrow(1, positions.size(1) - 1, 1);
      logits = forward({next_input, dev(mask), dev(pos)}, &cache);
    } else {
      logits = forward({dev(out), dev(mask), dev(positions)}, nullptr);
    }
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
    if (mask.defined()) {
      mask = torch::cat({mask, torch::ones({mask.size(0), 1}, torch::kLong)}, 1);
      positions = torch::cat({positions, positions.select(1, positions.size(1) - 1).unsqueeze(1) + 1}, 1);
    }
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

void quantize_base(Model& model, QuantType type, bool double_quant) {
  auto* m = model.as_lm();
  ACCEL_CHECK(m, Status::InvalidArgument, "only a causal LM (GPT-2 or Llama) has a base to quantize");
  m->quantize_base(type, double_quant);
}

QuantType quant_type_of(const Model& model) {
  auto* m = model.as_lm();
  return m ? m->quant_type() : QuantType::None;
}

const LoraConfig* lora_config_of(const Model& model) {
  auto* m = model.as_lm();
  return m && m->lora() ? &m->lora()->cfg : nullptr;
}

std::vector<torch::Tensor> merged_weights(const Model& model, const std::vector<torch::Tensor>& lora) {
  auto* m = model.as_lm();
  ACCEL_CHECK(m, Status::InvalidArgument, "the model is not a causal LM (GPT-2 or Llama)");
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < m->base_weights().size(); ++i) out.push_back(m->base_weight_float(i));
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
  if (lora_ || !quant_.empty()) {  // the frozen base weights are not published: copied (accel_inference_create
                                   // refuses them sharded); quantized ones shared (they never change)
    {
      torch::NoGradGuard ng;
      for (size_t i = 0; i < params_.size(); ++i) c->params_[i] = params_[i].detach().clone();
    }
    c->quant_ = quant_;
    c->quant_type_ = quant_type_;
    c->double_quant_ = double_quant_;
    c->finish();
  }
  if (lora_) {
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
  for (size_t i = 0; i < params_.size(); ++i) move(params_[i], !lora_ && !quantized(i));
  for (auto& q : quant_)
    if (q && q->data.device() != device) {
      auto moved = std::make_shared<QuantizedWeight>(*q);
      for (auto* t : {&moved->data, &moved->absmax, &moved->absmax2})
        if (t->defined()) *t = t->to(device);
      q = std::move(moved);
    }
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

torch::Tensor TransformerLM::check_inputs(const std::vector<torch::Tensor>& inputs, bool bounded, int64_t past,
                                          torch::Tensor* positions) const {
  ACCEL_CHECK(inputs.size() >= 1 && inputs.size() <= 3, Status::InvalidArgument,
              "num_inputs must be 1 (input_ids), 2 (input_ids, attention_mask) or 3 (input_ids, attention_mask, "
              "position_ids) for a causal LM, got ", inputs.size());
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
  const int64_t B = ids.size(0), T = ids.size(1);
  int64_t last_position = past + T - 1;
  if (positions) *positions = torch::Tensor();
  if (inputs.size() == 3 && inputs[2].defined()) {
    const torch::Tensor& p = inputs[2];
    ACCEL_CHECK(p.sizes() == ids.sizes() && p.scalar_type() == torch::kLong, Status::InvalidArgument,
                "inputs[2] (position_ids) must be int64 with input_ids' shape ", shape_str(ids), ", got ",
                shape_str(p), " ", c10::toString(p.scalar_type()));
    auto pm = torch::aminmax(p);
    const int64_t plo = std::get<0>(pm).item<int64_t>();
    last_position = std::get<1>(pm).item<int64_t>();
    ACCEL_CHECK(plo >= 0, Status::InvalidArgument, "inputs[2] (position_ids): position ", plo, " is negative");
    if (positions) *positions = p.to(ids.device());
  }
  if (bounded)
    ACCEL_CHECK(last_position < cfg_.max_position_embeddings, Status::InvalidArgument, "inputs[0] (input_ids): ",
                last_position + 1, " positions, the model has ", cfg_.max_position_embeddings);
  if (inputs.size() == 1 || !inputs[1].defined()) return {};
  const torch::Tensor& mask = inputs[1];
  // with a KV cache the mask covers the cached positions too: [batch, past + seq]
  ACCEL_CHECK(mask.dim() == 2 && mask.size(0) == B && mask.size(1) == past + T, Status::InvalidArgument,
              "inputs[1] (attention_mask) must have input_ids' shape ", shape_str(ids),
              past > 0 ? " (with the cached positions: [batch, past + seq])" : "", ", got ", shape_str(mask));
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
                        const torch::Tensor& mask, double scale, double drop, bool training, at::Generator& gen,
                        int64_t window, double softcap) {
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
  // a sliding window: query i (position i + S - T) sees key j only if j > i + S - T - window
  if (window > 0 && window < S) allowed = allowed.triu(S - T - window + 1);
  allowed = allowed.view({1, 1, T, S});
  if (mask.defined()) allowed = allowed.logical_and(mask.ne(0).view({B, 1, 1, S}));
  // the float minimum, as transformers' eager attention: a query that sees no key attends
  // uniformly instead of producing NaN
  const float lowest = std::numeric_limits<float>::lowest();
  if (compat::kHasFusedAttention && (!training || drop <= 0.0) && softcap <= 0.0) {  // libtorch's fused kernel (its dropout would not use `gen`)
    auto bias = torch::zeros(allowed.sizes(), q.options().dtype(torch::kFloat)).masked_fill(allowed.logical_not(), lowest);
    auto out = compat::scaled_dot_product_attention(q.to(torch::kFloat), kk.to(torch::kFloat), vv.to(torch::kFloat), bias,
                                                    scale);
    return out.transpose(1, 2).reshape({B, T, H * D}).to(v.scalar_type());
  }
  auto scores = torch::matmul(q.to(torch::kFloat), kk.to(torch::kFloat).transpose(-1, -2)) * scale;
  if (softcap > 0.0) scores = torch::tanh(scores / softcap) * softcap;  // Gemma 2's soft-capping, before the mask
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
  if (cfg_.fused_projections) return {"self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"};
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
  for (size_t i = 0; i < params_.size(); ++i) params_[i].requires_grad_(!quantized(i));
  set_parameters(names_, params_);
}

torch::Tensor TransformerLM::base_linear(const torch::Tensor& x, int64_t w, int64_t bias) const {
  const torch::Tensor b = bias >= 0 ? params_[static_cast<size_t>(bias)] : torch::Tensor();
  if (const QuantizedWeight* q = quantized(static_cast<size_t>(w)))
    return quantized_linear(x.scalar_type() == q->dtype ? x : x.to(q->dtype), *q, b);
  const torch::Tensor& W = params_[static_cast<size_t>(w)];
  return torch::linear(x.scalar_type() == W.scalar_type() ? x : x.to(W.scalar_type()), W, b);
}

std::vector<int64_t> TransformerLM::base_shape(size_t i) const {
  if (const QuantizedWeight* q = quantized(i))
    return conv1d() ? std::vector<int64_t>{q->cols, q->rows} : std::vector<int64_t>{q->rows, q->cols};
  return params_.at(i).sizes().vec();
}

torch::Tensor TransformerLM::base_weight_float(size_t i) const {
  torch::NoGradGuard ng;
  if (const QuantizedWeight* q = quantized(i)) {
    torch::Tensor w = dequantize_weight(*q).to(torch::kCPU, torch::kFloat);
    return conv1d() ? w.t().contiguous() : w;
  }
  return params_.at(i).detach().to(torch::kCPU, torch::kFloat, false, true);
}

std::string TransformerLM::untrainable() const {
  if (quant_type_ == QuantType::None || lora_) return {};
  return std::string("the model's base is quantized (") + quant_name(quant_type_) +
         "): its weights cannot be trained; add LoRA adapters (accel_model_add_lora or accel_model_load_adapter) "
         "and train those";
}

void TransformerLM::quantize_base(QuantType type, bool dq) {
  ACCEL_CHECK(type != QuantType::None, Status::InvalidArgument, "quantize_base: no quantization type");
  ACCEL_CHECK(quant_type_ == QuantType::None, Status::InvalidArgument, "the model's base is quantized already (",
              quant_name(quant_type_), ")");
  ACCEL_CHECK(!lora_, Status::InvalidArgument, "quantize the base before adding LoRA adapters");
  ACCEL_CHECK(type != QuantType::Int8 || !dq, Status::InvalidArgument,
              "double quantization applies to NF4 and FP4, not int8");
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < names_.size(); ++i) index[names_[i]] = i;
  std::vector<std::shared_ptr<const QuantizedWeight>> quant(params_.size());
  std::vector<size_t> done;
  const std::vector<std::string> mods = block_modules();
  torch::NoGradGuard ng;
  for (int64_t l = 0; l < cfg_.num_layers; ++l)
    for (const auto& m : mods) {
      const size_t i = index.at(block_prefix(l) + m + ".weight");
      const torch::Tensor& w = params_[i];
      quant[i] = std::make_shared<const QuantizedWeight>(
          quantize_weight(conv1d() ? w.detach().t() : w.detach(), type, dq, w.scalar_type()));
      done.push_back(i);
    }
  // only now that every weight is quantized: the full weights go (nothing changes on an error)
  for (size_t i : done) params_[i] = torch::empty({0}, torch::TensorOptions().dtype(dtype_).device(params_[i].device()));
  quant_ = std::move(quant);
  quant_type_ = type;
  double_quant_ = dq;
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
  // PEFT's defaults per model_type; it has none for Phi-3 (and refuses), as here
  ACCEL_CHECK(!targets.empty() || !cfg_.fused_projections, Status::InvalidArgument, "LoRA: PEFT has no default "
              "target_modules for model_type '", cfg_.model_type, "': name them (its linear modules: qkv_proj, o_proj, "
              "gate_up_proj, down_proj; or all-linear)");
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
      const size_t wi = index.at(full + ".weight");
      const std::vector<int64_t> ws = base_shape(wi);
      const torch::Device wdev = params_[wi].device();
      const int64_t in = conv1d() ? ws[0] : ws[1], out = conv1d() ? ws[1] : ws[0];
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));  // kaiming_uniform(a=sqrt(5)), as nn.Linear
      const size_t slot = l * mods.size() + m;
      L.A[slot] = torch::empty({c.r, in}, torch::kFloat).uniform_(-bound, bound, gen).to(wdev).requires_grad_(true);
      L.B[slot] = torch::zeros({out, c.r}, torch::TensorOptions().dtype(torch::kFloat).device(wdev)).requires_grad_(true);
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
