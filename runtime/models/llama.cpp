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

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// Where a block's parameters are in params_ (-1: the family has none).
struct BlockIndex {
  int64_t q = -1, k = -1, v = -1, o = -1, qkv = -1, gate = -1, up = -1, gate_up = -1, down = -1;
  int64_t q_bias = -1, k_bias = -1, v_bias = -1, o_bias = -1, gate_bias = -1, up_bias = -1, down_bias = -1;
  int64_t q_norm = -1, k_norm = -1, norm1 = -1, norm2 = -1;
};

// The Llama-shaped families: Llama, and those that transformers writes as Llama with changes
// (docs/lm.md, "Families"): Mistral (sliding-window attention), Qwen2 (q/k/v biases, sliding
// layers), Qwen3 (q/k RMSNorm per head), Phi-3 (fused qkv and gate/up projections, residual
// dropout). Parameters in transformers' named_parameters() order, each family's own.
class Llama final : public TransformerLM {
 public:
  Llama(const LMConfig& cfg, torch::ScalarType dtype, const at::Generator* gen)
      : TransformerLM(cfg, gen ? *gen : at::Generator()) {
    const int64_t E = cfg.hidden_size, I = cfg.intermediate_size, H = cfg.num_heads, Hkv = cfg.num_kv_heads,
                  D = cfg.head_dim;
    const double s = cfg.initializer_range;
    const bool llama = cfg.model_type == "llama";
    const bool qkv_bias = llama ? cfg.attention_bias : cfg.qkv_bias, o_bias = llama ? cfg.attention_bias : cfg.o_bias;
    const bool mlp_bias = llama && cfg.mlp_bias;
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
          add(n + "self_attn.q_norm.weight", {D}, u, 2, 0, dtype, gen);
          b.k_norm = next();
          add(n + "self_attn.k_norm.weight", {D}, u, 2, 0, dtype, gen);
        }
        linear("mlp.gate_proj", I, E, mlp_bias, &b.gate, &b.gate_bias);
        linear("mlp.up_proj", I, E, mlp_bias, &b.up, &b.up_bias);
        linear("mlp.down_proj", E, I, mlp_bias, &b.down, &b.down_bias);
      }
      b.norm1 = next();
      add(n + "input_layernorm.weight", {E}, u, 2, 0, dtype, gen);
      b.norm2 = next();
      add(n + "post_attention_layernorm.weight", {E}, u, 2, 0, dtype, gen);
      blocks_.push_back(b);
    }
    const size_t last = static_cast<size_t>(cfg.num_layers) + 1;
    final_norm_ = static_cast<int64_t>(names_.size());
    add("model.norm.weight", {E}, last, 2, 0, dtype, gen);
    if (!cfg.tie_word_embeddings) add("lm_head.weight", {cfg.vocab_size, E}, last, 0, s, dtype, gen);
    finish();
  }

  torch::Tensor forward(const std::vector<torch::Tensor>& inputs, const ForwardMode& mode) override {
    const torch::Tensor mask = check_inputs(inputs, /*bounded=*/false);
    const torch::Tensor& ids = inputs[0];
    const int64_t B = ids.size(0), T = ids.size(1), H = cfg_.num_heads,
                  Hkv = cfg_.num_kv_heads, D = cfg_.head_dim;
    KVCache* cache = mode.cache;
    const int64_t past = cache ? cache->length : 0;
    UnitGate* gate = mode.gate;
    const auto& P = params_;

    // rotary tables for positions past..past+T-1 (every row; see tests/fixtures/lm/README.md), fp32:
    // inv_freq[i] = 1 / theta^(2i / D) as the config's RoPE type scales it; dimension i pairs
    // with i + D/2; cos and sin times the type's attention factor (yarn, longrope)
    auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(ids.device());
    auto [inv_freq, attention_factor] = rope_frequencies(cfg_, past + T);
    auto freqs = torch::outer(torch::arange(past, past + T, f32), inv_freq.to(ids.device()));
    auto emb = torch::cat({freqs, freqs}, -1);  // [T, D]
    auto cos = emb.cos(), sin = emb.sin();
    if (attention_factor != 1.0) {
      cos = cos * attention_factor;
      sin = sin * attention_factor;
    }
    cos = cos.view({1, 1, T, D});
    sin = sin.view({1, 1, T, D});

    gate_before(gate, 0);
    torch::Tensor h = torch::embedding(P[0], ids);
    gate_after(gate, 0, h);

    const double eps = cfg_.rms_norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(D));
    const bool ckpt = checkpoint_now();
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      const size_t u = static_cast<size_t>(l) + 1;
      const int64_t window =
          !cfg_.sliding_layers.empty() && cfg_.sliding_layers[static_cast<size_t>(l)] ? cfg_.sliding_window : 0;
      auto block = [this, l, B, T, H, Hkv, D, eps, scale, mask, cos, sin, cache, window](const torch::Tensor& hin) {
        const auto& P = params_;
        const BlockIndex& b = blocks_[static_cast<size_t>(l)];
        // a linear module: its weight, its bias if any, its LoRA slot (block_modules() order)
        auto lin = [&](const torch::Tensor& x, int64_t w, int64_t bias, size_t slot) {
          const torch::Tensor& W = P[static_cast<size_t>(w)];
          torch::Tensor y = torch::linear(x.scalar_type() == W.scalar_type() ? x : x.to(W.scalar_type()), W,
                                          bias >= 0 ? P[static_cast<size_t>(bias)] : torch::Tensor());
          return with_lora(y, x, l, slot);
        };
        auto x = rms_norm(hin, P[static_cast<size_t>(b.norm1)], eps);
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
        if (b.q_norm >= 0) {  // Qwen3: per head, before RoPE
          q = rms_norm(q, P[static_cast<size_t>(b.q_norm)], eps);
          k = rms_norm(k, P[static_cast<size_t>(b.k_norm)], eps);
        }
        q = q.transpose(1, 2);
        k = k.transpose(1, 2);
        v = v.view({B, T, Hkv, D}).transpose(1, 2);
        auto qr = (q * cos.to(q.scalar_type())) + (rotate_half(q) * sin.to(q.scalar_type()));
        auto kr = (k * cos.to(k.scalar_type())) + (rotate_half(k) * sin.to(k.scalar_type()));
        if (cache) std::tie(kr, v) = cache_append(*cache, l, kr, v);
        auto att = attention(qr, kr, v, mask, scale, cfg_.attention_dropout, training_, gen_, window);
        const double resid = cfg_.fused_projections ? cfg_.resid_pdrop : 0.0;  // Phi-3's residual dropout
        torch::Tensor h = hin + dropout(lin(att, b.o, b.o_bias, fused ? 1 : 3), resid, training_, gen_);
        x = rms_norm(h, P[static_cast<size_t>(b.norm2)], eps);
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
        return h + dropout(lin(act, b.down, b.down_bias, fused ? 3 : 6), resid, training_, gen_);
      };
      gate_before(gate, u);
      const bool rng = training_ && (cfg_.attention_dropout > 0 || lora_dropout() > 0 ||
                                     (cfg_.fused_projections && cfg_.resid_pdrop > 0));
      h = ckpt && !cache ? checkpoint(block, h, block_trainables(l), &gen_, rng) : block(h);
      gate_after(gate, u, h);
    }
    const size_t last = static_cast<size_t>(cfg_.num_layers) + 1, f = static_cast<size_t>(final_norm_);
    gate_before(gate, last);
    h = rms_norm(h, P[f], eps);
    torch::Tensor logits;
    if (cfg_.tie_word_embeddings) {
      gate_before(gate, 0);  // the head is the embedding (unit 0)
      logits = torch::matmul(h, P[0].t());
    } else {
      logits = torch::matmul(h, P[f + 1].t());
    }
    logits = logits.to(torch::kFloat);
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
  const LMConfig::Rope& r = cfg.rope;
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
  if (t == "linear") return {plain(cfg.rope_theta) / r.factor, 1.0};
  if (t == "dynamic") {
    // (transformers computes the rescaled base in float32 tensors when a forward passes
    // max_position_embeddings, in doubles here: within 1e-7 relative of it)
    const double len = std::max(static_cast<double>(seq_len), max_pos);
    const double base = cfg.rope_theta * std::pow((r.factor * len / max_pos) - (r.factor - 1), D / (D - 2));
    return {plain(base), 1.0};
  }
  if (t == "llama3") {
    torch::Tensor inv = plain(cfg.rope_theta);
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
    const double base = cfg.rope_theta;
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
    return {1.0 / (e * torch::pow(cfg.rope_theta, exponents())), attention};
  }
  return {plain(cfg.rope_theta), 1.0};
}

}  // namespace accel
