// Llama (transformers' LlamaForCausalLM): RMSNorm, rotary embeddings ("default" RoPE,
// rotate-half layout), SwiGLU MLP, grouped-query attention, optional biases, tied or
// untied lm_head. nn.Linear weights are [out, in] (y = x W^T + b).
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

class Llama final : public TransformerLM {
 public:
  Llama(const LMConfig& cfg, torch::ScalarType dtype, const at::Generator* gen)
      : TransformerLM(cfg, gen ? *gen : at::Generator()) {
    const int64_t E = cfg.hidden_size, I = cfg.intermediate_size, H = cfg.num_heads, Hkv = cfg.num_kv_heads,
                  D = cfg.head_dim;
    const double s = cfg.initializer_range;
    add("model.embed_tokens.weight", {cfg.vocab_size, E}, 0, 0, s, dtype, gen);
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      const std::string n = "model.layers." + std::to_string(l) + ".";
      const size_t u = static_cast<size_t>(l) + 1;
      // transformers' named_parameters() order (the module order): attention, mlp, norms
      auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias) {
        add(n + name + ".weight", {out, in}, u, 0, s, dtype, gen);
        if (bias) add(n + name + ".bias", {out}, u, 1, 0, dtype, gen);
      };
      linear("self_attn.q_proj", H * D, E, cfg.attention_bias);
      linear("self_attn.k_proj", Hkv * D, E, cfg.attention_bias);
      linear("self_attn.v_proj", Hkv * D, E, cfg.attention_bias);
      linear("self_attn.o_proj", E, H * D, cfg.attention_bias);
      linear("mlp.gate_proj", I, E, cfg.mlp_bias);
      linear("mlp.up_proj", I, E, cfg.mlp_bias);
      linear("mlp.down_proj", E, I, cfg.mlp_bias);
      add(n + "input_layernorm.weight", {E}, u, 2, 0, dtype, gen);
      add(n + "post_attention_layernorm.weight", {E}, u, 2, 0, dtype, gen);
    }
    const size_t last = static_cast<size_t>(cfg.num_layers) + 1;
    add("model.norm.weight", {E}, last, 2, 0, dtype, gen);
    if (!cfg.tie_word_embeddings) add("lm_head.weight", {cfg.vocab_size, E}, last, 0, s, dtype, gen);
    finish();
    per_layer_ = 9 + (cfg.attention_bias ? 4 : 0) + (cfg.mlp_bias ? 3 : 0);
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
    // inv_freq[i] = 1 / theta^(2i / D); dimension i pairs with i + D/2
    auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(ids.device());
    auto inv_freq = 1.0 / torch::pow(cfg_.rope_theta, torch::arange(0, D, 2, torch::TensorOptions().dtype(torch::kLong))
                                                           .to(torch::kFloat) / static_cast<double>(D));
    auto freqs = torch::outer(torch::arange(past, past + T, f32), inv_freq.to(ids.device()));
    auto emb = torch::cat({freqs, freqs}, -1);  // [T, D]
    auto cos = emb.cos().view({1, 1, T, D}), sin = emb.sin().view({1, 1, T, D});

    gate_before(gate, 0);
    torch::Tensor h = torch::embedding(P[0], ids);
    gate_after(gate, 0, h);

    const double eps = cfg_.rms_norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(D));
    const bool ckpt = checkpoint_now();
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      const size_t u = static_cast<size_t>(l) + 1;
      auto block = [this, l, B, T, H, Hkv, D, eps, scale, mask, cos, sin, cache](const torch::Tensor& hin) {
        const auto& P = params_;
        const bool ab = cfg_.attention_bias, mb = cfg_.mlp_bias;
        size_t i = 1 + per_layer_ * static_cast<size_t>(l);
        size_t m = 0;  // the block's linear module, in block_modules() order: q k v o gate up down
        auto lin = [&](const torch::Tensor& x, bool bias) {
          const torch::Tensor& w = P[i++];
          torch::Tensor b = bias ? P[i++] : torch::Tensor();
          torch::Tensor y = torch::linear(x.scalar_type() == w.scalar_type() ? x : x.to(w.scalar_type()), w, b);
          return with_lora(y, x, l, m++);
        };
        const size_t norm1 = i + 7 + (ab ? 4 : 0) + (mb ? 3 : 0);
        auto x = rms_norm(hin, P[norm1], eps);
        auto q = lin(x, ab).view({B, T, H, D}).transpose(1, 2);
        auto k = lin(x, ab).view({B, T, Hkv, D}).transpose(1, 2);
        auto v = lin(x, ab).view({B, T, Hkv, D}).transpose(1, 2);
        auto qr = (q * cos.to(q.scalar_type())) + (rotate_half(q) * sin.to(q.scalar_type()));
        auto kr = (k * cos.to(k.scalar_type())) + (rotate_half(k) * sin.to(k.scalar_type()));
        if (cache) std::tie(kr, v) = cache_append(*cache, l, kr, v);
        auto att = attention(qr, kr, v, mask, scale, cfg_.attention_dropout, training_, gen_);
        torch::Tensor h = hin + lin(att, ab);
        x = rms_norm(h, P[norm1 + 1], eps);
        auto g = lin(x, mb);
        auto up = lin(x, mb);
        return h + lin(activate(cfg_.activation, g) * up, mb);
      };
      gate_before(gate, u);
      h = ckpt && !cache ? checkpoint(block, h, block_trainables(l), &gen_, training_ && (cfg_.attention_dropout > 0 || lora_dropout() > 0)) : block(h);
      gate_after(gate, u, h);
    }
    const size_t last = static_cast<size_t>(cfg_.num_layers) + 1,
                 f = 1 + per_layer_ * static_cast<size_t>(cfg_.num_layers);
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
  size_t per_layer_ = 9;
};

}  // namespace

std::unique_ptr<TransformerLM> make_llama(const LMConfig& cfg, torch::ScalarType dtype, const at::Generator* gen) {
  return std::make_unique<Llama>(cfg, dtype, gen);
}

}  // namespace accel::lm_detail
