// Llama (transformers' LlamaForCausalLM) and the families shaped like it (Mistral, Qwen2,
// Qwen3, Phi-3): RMSNorm, rotary embeddings (rotate-half layout; default, linear, dynamic,
// yarn, llama3 and longrope scaling: rope_frequencies below), SwiGLU MLP, grouped-query
// attention, optional biases, sliding-window layers, tied or untied lm_head. nn.Linear
// weights are [out, in] (y = x W^T + b).
#include <cmath>

#include "runtime/models/transformer.h"

namespace accel::lm_detail {

namespace {

// x * rsqrt(mean(x^2) + eps) in fp32, back to x's dtype, times the weight (as transformers).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  auto xf = x.to(torch::kFloat);
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return w * y.to(x.scalar_type());
}

// Gemma's: x * rsqrt(mean(x^2) + eps) times (1 + w), both in fp32, then x's dtype.
torch::Tensor gemma_rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  auto xf = x.to(torch::kFloat);
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (y * (1.0 + w.to(torch::kFloat))).to(x.scalar_type());
}

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// Where a block's parameters are in params_ (-1: the family has none).
struct BlockIndex {
  int64_t q = -1, k = -1, v = -1, o = -1, qkv = -1, gate = -1, up = -1, gate_up = -1, down = -1;
  int64_t q_bias = -1, k_bias = -1, v_bias = -1, o_bias = -1, gate_bias = -1, up_bias = -1, down_bias = -1;
  int64_t q_norm = -1, k_norm = -1, norm1 = -1, norm2 = -1;
  int64_t pre_ff_norm = -1, post_ff_norm = -1;  // Gemma
};

// The Llama-shaped families: Llama, and those that transformers writes as Llama with changes
// (docs/lm.md, "Families"): Mistral (sliding-window attention), Qwen2 (q/k/v biases, sliding
// layers), Qwen3 (q/k RMSNorm per head), Phi-3 (fused qkv and gate/up projections, residual
// dropout), Gemma 2 and 3 ((1 + w) norms, scaled embeddings, norms on both sub-layers'
// outputs, soft-capping, alternating sliding layers; Gemma 3: q/k norms and the sliding
// layers' own RoPE), SmolLM3 (layers without RoPE). Parameters in transformers' named_parameters() order, each family's own.
class Llama final : public TransformerLM {
 public:
  Llama(const LMConfig& cfg, torch::ScalarType dtype, const at::Generator* gen)
      : TransformerLM(cfg, gen ? *gen : at::Generator()) {
    const int64_t E = cfg.hidden_size, I = cfg.intermediate_size, H = cfg.num_heads, Hkv = cfg.num_kv_heads,
                  D = cfg.head_dim;
    const double s = cfg.initializer_range;
    const bool llama = cfg.model_type == "llama" || cfg.model_type == "smollm3";  // their attention_bias and mlp_bias
    const bool qkv_bias = llama ? cfg.attention_bias : cfg.qkv_bias, o_bias = llama ? cfg.attention_bias : cfg.o_bias;
    const bool mlp_bias = llama && cfg.mlp_bias;
    const int norm_init = cfg.gemma ? 1 : 2;  // Gemma's norm weights start at 0 (they scale by 1 + w)
    add("model.embed_tokens.weight", {cfg.vocab_size, E}, 0, 0, s, dtype, gen);
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      const std::string n = "model.layers." + std::to_string(l) + ".";
      const size_t u = static_cast<size_t>(l) + 1;
      BlockIndex b;
      auto next = [&] { return static_cast<int64_t>(names_.size()); };
      // transformers' named_parameters() order (the module order): attention, mlp, norms
      auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias, int64_t* w, int64_t* bi) {
        *w = next();
        add(n + name + ".weight", {out, in}, u, 0, s, dtype, gen);
        if (bias) {
          *bi = next();
          add(n + name + ".bias", {out}, u, 1, 0, dtype, gen);
        }
      };
      int64_t none = -1;
      if (cfg.fused_projections) {  // Phi-3 declares o_proj before qkv_proj
        linear("self_attn.o_proj", E, H * D, false, &b.o, &none);
        linear("self_attn.qkv_proj", H * D + 2 * Hkv * D, E, false, &b.qkv, &none);
        linear("mlp.gate_up_proj", 2 * I, E, false, &b.gate_up, &none);
        linear("mlp.down_proj", E, I, false, &b.down, &none);
      } else {
        linear("self_attn.q_proj", H * D, E, qkv_bias, &b.q, &b.q_bias);
        linear("self_attn.k_proj", Hkv * D, E, qkv_bias, &b.k, &b.k_bias);
        linear("self_attn.v_proj", Hkv * D, E, qkv_bias, &b.v, &b.v_bias);
        linear("self_attn.o_proj", E, H * D, o_bias, &b.o, &b.o_bias);
        if (cfg.qk_norm) {
          b.q_norm = next();
          add(n + "self_attn.q_norm.weight", {D}, u, norm_init, 0, dtype, gen);
          b.k_norm = next();
          add(n + "self_attn.k_norm.weight", {D}, u, norm_init, 0, dtype, gen);
        }
        linear("mlp.gate_proj", I, E, mlp_bias, &b.gate, &b.gate_bias);
        linear("mlp.up_proj", I, E, mlp_bias, &b.up, &b.up_bias);
        linear("mlp.down_proj", E, I, mlp_bias, &b.down, &b.down_bias);
      }
      b.norm1 = next();
      add(n + "input_layernorm.weight", {E}, u, norm_init, 0, dtype, gen);
      b.norm2 = next();
      add(n + "post_attention_layernorm.weight", {E}, u, norm_init, 0, dtype, gen);
      if (cfg.gemma) {
        b.pre_ff_norm = next();
        add(n + "pre_feedforward_layernorm.weight", {E}, u, norm_init, 0, dtype, gen);
        b.post_ff_norm = next();
        add(n + "post_feedforward_layernorm.weight", {E}, u, norm_init, 0, dtype, gen);
      }
      blocks_.push_back(b);
    }
    const size_t last = static_cast<size_t>(cfg.num_layers) + 1;
    final_norm_ = static_cast<int64_t>(names_.size());
    add("model.norm.weight", {E}, last, norm_init, 0, dtype, gen);
    if (!cfg.tie_word_embeddings) add("lm_head.weight", {cfg.vocab_size, E}, last, 0, s, dtype, gen);
    finish();
  }

  torch::Tensor forward(const std::vector<torch::Tensor>& inputs, const ForwardMode& mode) override {
    KVCache* cache = mode.cache;
    const int64_t past = cache ? cache->length : 0;
    torch::Tensor position_ids;
    const torch::Tensor mask = check_inputs(inputs, /*bounded=*/false, past, &position_ids);
    const torch::Tensor& ids = inputs[0];
    const int64_t B = ids.size(0), T = ids.size(1), H = cfg_.num_heads,
                  Hkv = cfg_.num_kv_heads, D = cfg_.head_dim;
    UnitGate* gate = mode.gate;
    const auto& P = params_;

    // rotary tables for positions past..past+T-1 (every row; see tests/fixtures/lm/README.md), fp32:
    // inv_freq[i] = 1 / theta^(2i / D) as the config's RoPE type scales it; dimension i pairs
    // with i + D/2; cos and sin times the type's attention factor (yarn, longrope)
    auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(ids.device());
    // (or each row's own position_ids [B, T]: a left-padded batch in generation)
    auto tables = [&](const std::pair<torch::Tensor, double>& rope) {
      const auto& [inv_freq, attention_factor] = rope;
      const bool rows = position_ids.defined();
      auto freqs = rows ? position_ids.to(torch::kFloat).unsqueeze(-1) * inv_freq.to(ids.device())  // [B, T, D/2]
                        : torch::outer(torch::arange(past, past + T, f32), inv_freq.to(ids.device()));
      auto emb = torch::cat({freqs, freqs}, -1);  // [T, D] or [B, T, D]
      auto cos = emb.cos(), sin = emb.sin();
      if (attention_factor != 1.0) {
        cos = cos * attention_factor;
        sin = sin * attention_factor;
      }
      const int64_t rb = rows ? B : 1;
      return std::make_pair(cos.view({rb, 1, T, D}), sin.view({rb, 1, T, D}));
    };
    // the RoPE types that depend on the length (dynamic) see the last position + 1
    const int64_t seq_len = position_ids.defined() ? position_ids.max().item<int64_t>() + 1 : past + T;
    const auto [cos, sin] = tables(rope_frequencies(cfg_, seq_len));
    // the sliding layers' (Gemma 3: their own RoPE)
    const auto [cos_local, sin_local] =
        cfg_.local_rope ? tables(rope_frequencies(cfg_, cfg_.sliding_rope, cfg_.sliding_rope_theta, seq_len))
                        : std::make_pair(cos, sin);

    gate_before(gate, 0);
    torch::Tensor h = torch::embedding(P[0], ids);
    if (cfg_.gemma)  // times sqrt(hidden_size), a float32 scalar in the weights' dtype (as transformers)
      h = h * torch::scalar_tensor(static_cast<float>(std::sqrt(static_cast<double>(cfg_.hidden_size))),
                                   torch::TensorOptions().dtype(torch::kFloat))
                  .to(h.scalar_type());
    gate_after(gate, 0, h);

    const double eps = cfg_.rms_norm_eps;
    const double scale = cfg_.gemma ? std::pow(cfg_.query_pre_attn_scalar, -0.5) : 1.0 / std::sqrt(static_cast<double>(D));
    const bool ckpt = checkpoint_now();
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      const size_t u = static_cast<size_t>(l) + 1;
      const int64_t window =
          !cfg_.sliding_layers.empty() && cfg_.sliding_layers[static_cast<size_t>(l)] ? cfg_.sliding_window : 0;
      const torch::Tensor& cos_l = window > 0 ? cos_local : cos;
      const torch::Tensor& sin_l = window > 0 ? sin_local : sin;
      auto block = [this, l, B, T, H, Hkv, D, eps, scale, mask, cos = cos_l, sin = sin_l, cache,
                    window](const torch::Tensor& hin) {
        const auto& P = params_;
        const BlockIndex& b = blocks_[static_cast<size_t>(l)];
        const bool gemma = cfg_.gemma;
        auto norm = [&](const torch::Tensor& x, int64_t w) {
          return gemma ? gemma_rms_norm(x, P[static_cast<size_t>(w)], eps) : rms_norm(x, P[static_cast<size_t>(w)], eps);
        };
        // a linear module: its weight, its bias if any, its LoRA slot (block_modules() order)
        auto lin = [&](const torch::Tensor& x, int64_t w, int64_t bias, size_t slot) {
          return with_lora(base_linear(x, w, bias), x, l, slot);
        };
        auto x = norm(hin, b.norm1);
        torch::Tensor q, k, v;
        const bool fused = b.qkv >= 0;
        if (fused) {  // Phi-3: [q; k; v] rows of one projection
          auto qkv = lin(x, b.qkv, -1, 0);
          q = qkv.narrow(-1, 0, H * D);
          k = qkv.narrow(-1, H * D, Hkv * D);
          v = qkv.narrow(-1, H * D + Hkv * D, Hkv * D);
        } else {
          q = lin(x, b.q, b.q_bias, 0);
          k = lin(x, b.k, b.k_bias, 1);
          v = lin(x, b.v, b.v_bias, 2);
        }
        q = q.view({B, T, H, D});
        k = k.view({B, T, Hkv, D});
        if (b.q_norm >= 0) {  // Qwen3, Gemma 3: per head, before RoPE
          q = norm(q, b.q_norm);
          k = norm(k, b.k_norm);
        }
        q = q.transpose(1, 2);
        k = k.transpose(1, 2);
        v = v.view({B, T, Hkv, D}).transpose(1, 2);
        const bool rope = cfg_.rope_layers.empty() || cfg_.rope_layers[static_cast<size_t>(l)];  // SmolLM3: NoPE layers
        auto qr = rope ? (q * cos.to(q.scalar_type())) + (rotate_half(q) * sin.to(q.scalar_type())) : q;
        auto kr = rope ? (k * cos.to(k.scalar_type())) + (rotate_half(k) * sin.to(k.scalar_type())) : k;
        if (cache) std::tie(kr, v) = cache_append(*cache, l, kr, v);
        auto att = attention(qr, kr, v, mask, scale, cfg_.attention_dropout, training_, gen_, window,
                             cfg_.attn_logit_softcapping);
        const double resid = cfg_.fused_projections ? cfg_.resid_pdrop : 0.0;  // Phi-3's residual dropout
        torch::Tensor a = lin(att, b.o, b.o_bias, fused ? 1 : 3);
        if (gemma) a = norm(a, b.norm2);  // Gemma: post_attention_layernorm on the attention's output
        torch::Tensor h = hin + dropout(a, resid, training_, gen_);
        x = norm(h, gemma ? b.pre_ff_norm : b.norm2);
        torch::Tensor act;
        if (fused) {  // Phi-3: [gate; up]
          auto gu = lin(x, b.gate_up, -1, 2);
          const int64_t I = gu.size(-1) / 2;
          act = gu.narrow(-1, I, I) * activate(cfg_.activation, gu.narrow(-1, 0, I));
        } else {
          auto g = lin(x, b.gate, b.gate_bias, 4);
          auto up = lin(x, b.up, b.up_bias, 5);
          act = activate(cfg_.activation, g) * up;
        }
        torch::Tensor m = lin(act, b.down, b.down_bias, fused ? 3 : 6);
        if (gemma) m = norm(m, b.post_ff_norm);
        return h + dropout(m, resid, training_, gen_);
      };
      gate_before(gate, u);
      const bool rng = training_ && (cfg_.attention_dropout > 0 || lora_dropout() > 0 ||
                                     (cfg_.fused_projections && cfg_.resid_pdrop > 0));
      h = ckpt && !cache ? checkpoint(block, h, block_trainables(l), &gen_, rng) : block(h);
      gate_after(gate, u, h);
    }
    const size_t last = static_cast<size_t>(cfg_.num_layers) + 1, f = static_cast<size_t>(final_norm_);
    gate_before(gate, last);
    h = cfg_.gemma ? gemma_rms_norm(h, P[f], eps) : rms_norm(h, P[f], eps);
    torch::Tensor logits;
    if (cfg_.tie_word_embeddings) {
      gate_before(gate, 0);  // the head is the embedding (unit 0)
      logits = torch::matmul(h, P[0].t());
    } else {
      logits = torch::matmul(h, P[f + 1].t());
    }
    logits = logits.to(torch::kFloat);
    if (cfg_.final_logit_softcapping > 0)  // Gemma 2
      logits = torch::tanh(logits / cfg_.final_logit_softcapping) * cfg_.final_logit_softcapping;
    if (cfg_.tie_word_embeddings) gate_after(gate, 0, logits);
    gate_after(gate, last, logits);
    return logits;
  }

 private:
  std::vector<BlockIndex> blocks_;
  int64_t final_norm_ = 0;
};

}  // namespace

std::unique_ptr<TransformerLM> make_llama(const LMConfig& cfg, torch::ScalarType dtype, const at::Generator* gen) {
  return std::make_unique<Llama>(cfg, dtype, gen);
}

}  // namespace accel::lm_detail

namespace accel {

// As transformers' modeling_rope_utils.py, operation for operation in float32 (its Python
// scalars are doubles, as here), so that the tables agree to the last bits.
std::pair<torch::Tensor, double> rope_frequencies(const LMConfig& cfg, int64_t seq_len) {
  return rope_frequencies(cfg, cfg.rope, cfg.rope_theta, seq_len);
}

std::pair<torch::Tensor, double> rope_frequencies(const LMConfig& cfg, const LMConfig::Rope& r, double rope_theta,
                                                  int64_t seq_len) {
  const int64_t dim = cfg.head_dim;
  const double D = static_cast<double>(dim);
  const double max_pos = static_cast<double>(cfg.max_position_embeddings);
  const double original = r.original_max_position_embeddings > 0 ? static_cast<double>(r.original_max_position_embeddings)
                                                                  : max_pos;
  auto exponents = [&] {  // arange(0, dim, 2, int64).float() / dim
    return torch::arange(0, dim, 2, torch::TensorOptions().dtype(torch::kLong)).to(torch::kFloat) / D;
  };
  auto plain = [&](double base) { return 1.0 / torch::pow(base, exponents()); };
  const std::string& t = r.type;
  if (t == "linear") return {plain(rope_theta) / r.factor, 1.0};
  if (t == "dynamic") {
    // (transformers computes the rescaled base in float32 tensors when a forward passes
    // max_position_embeddings, in doubles here: within 1e-7 relative of it)
    const double len = std::max(static_cast<double>(seq_len), max_pos);
    const double base = rope_theta * std::pow((r.factor * len / max_pos) - (r.factor - 1), D / (D - 2));
    return {plain(base), 1.0};
  }
  if (t == "llama3") {
    torch::Tensor inv = plain(rope_theta);
    const double low_wavelen = original / r.low_freq_factor, high_wavelen = original / r.high_freq_factor;
    // Python's `scalar / tensor` is tensor.reciprocal() * scalar (two roundings), ATen's C++
    // operator a fill and a division (one): written as Python computes it
    torch::Tensor wavelen = inv.reciprocal() * (2 * M_PI);
    torch::Tensor scaled = torch::where(wavelen > low_wavelen, inv / r.factor, inv);
    torch::Tensor smooth = (wavelen.reciprocal() * original - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    torch::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
    torch::Tensor medium = torch::logical_not(wavelen < high_wavelen) * torch::logical_not(wavelen > low_wavelen);
    return {torch::where(medium, smoothed, scaled), 1.0};
  }
  if (t == "yarn") {
    const double base = rope_theta;
    const double factor = std::isnan(r.factor) ? max_pos / original : r.factor;
    auto mscale_of = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
    double attention = r.attention_factor;
    if (std::isnan(attention)) {
      const bool both = !std::isnan(r.mscale) && r.mscale != 0 && !std::isnan(r.mscale_all_dim) && r.mscale_all_dim != 0;
      attention = both ? mscale_of(factor, r.mscale) / mscale_of(factor, r.mscale_all_dim) : mscale_of(factor, 1);
    }
    const double fast = std::isnan(r.beta_fast) || r.beta_fast == 0 ? 32 : r.beta_fast;
    const double slow = std::isnan(r.beta_slow) || r.beta_slow == 0 ? 1 : r.beta_slow;
    auto correction_dim = [&](double rotations) {
      return (D * std::log(original / (rotations * 2 * M_PI))) / (2 * std::log(base));
    };
    double low = correction_dim(fast), high = correction_dim(slow);
    if (r.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, D - 1);
    if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
    torch::Tensor pos_freqs = torch::pow(base, torch::arange(0, dim, 2).to(torch::kFloat) / D);
    torch::Tensor extrapolation = 1.0 / pos_freqs, interpolation = 1.0 / (factor * pos_freqs);
    torch::Tensor ramp = torch::clamp((torch::arange(dim / 2, torch::kFloat) - low) / (high - low), 0, 1);
    torch::Tensor extra = 1 - ramp;
    return {interpolation * (1 - extra) + extrapolation * extra, attention};
  }
  if (t == "longrope") {
    const double factor = std::isnan(r.factor) ? max_pos / original : r.factor;
    double attention = r.attention_factor;
    if (std::isnan(attention)) attention = factor <= 1.0 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(original));
    const std::vector<double>& ext = static_cast<double>(seq_len) > original ? r.long_factor : r.short_factor;
    torch::Tensor e = torch::tensor(ext, torch::TensorOptions().dtype(torch::kDouble)).to(torch::kFloat);
    return {1.0 / (e * torch::pow(rope_theta, exponents())), attention};
  }
  return {plain(rope_theta), 1.0};
}

}  // namespace accel
