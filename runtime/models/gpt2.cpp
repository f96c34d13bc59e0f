// GPT-2 (transformers' GPT2LMHeadModel): learned positions, pre-LN blocks, fused c_attn,
// Conv1D weights stored [in, out] (y = x W + b), tied or untied lm_head.
#include <cmath>

#include "runtime/models/transformer.h"

namespace accel::lm_detail {

namespace {

class GPT2 final : public TransformerLM {
 public:
  GPT2(const LMConfig& cfg, torch::ScalarType dtype, const at::Generator* gen)
      : TransformerLM(cfg, gen ? *gen : at::Generator()) {
    const int64_t E = cfg.hidden_size, I = cfg.intermediate_size, L = cfg.num_layers;
    const double s = cfg.initializer_range, proj = s / std::sqrt(2.0 * static_cast<double>(L));
    add("transformer.wte.weight", {cfg.vocab_size, E}, 0, 0, s, dtype, gen);
    add("transformer.wpe.weight", {cfg.max_position_embeddings, E}, 0, 0, s, dtype, gen);
    for (int64_t l = 0; l < L; ++l) {
      const std::string h = "transformer.h." + std::to_string(l) + ".";
      const size_t u = static_cast<size_t>(l) + 1;
      add(h + "ln_1.weight", {E}, u, 2, 0, dtype, gen);
      add(h + "ln_1.bias", {E}, u, 1, 0, dtype, gen);
      add(h + "attn.c_attn.weight", {E, 3 * E}, u, 0, s, dtype, gen);
      add(h + "attn.c_attn.bias", {3 * E}, u, 1, 0, dtype, gen);
      add(h + "attn.c_proj.weight", {E, E}, u, 0, proj, dtype, gen);
      add(h + "attn.c_proj.bias", {E}, u, 1, 0, dtype, gen);
      add(h + "ln_2.weight", {E}, u, 2, 0, dtype, gen);
      add(h + "ln_2.bias", {E}, u, 1, 0, dtype, gen);
      add(h + "mlp.c_fc.weight", {E, I}, u, 0, s, dtype, gen);
      add(h + "mlp.c_fc.bias", {I}, u, 1, 0, dtype, gen);
      add(h + "mlp.c_proj.weight", {I, E}, u, 0, proj, dtype, gen);
      add(h + "mlp.c_proj.bias", {E}, u, 1, 0, dtype, gen);
    }
    const size_t last = static_cast<size_t>(L) + 1;
    add("transformer.ln_f.weight", {E}, last, 2, 0, dtype, gen);
    add("transformer.ln_f.bias", {E}, last, 1, 0, dtype, gen);
    if (!cfg.tie_word_embeddings) add("lm_head.weight", {cfg.vocab_size, E}, last, 0, s, dtype, gen);
    finish();
  }

  torch::Tensor forward(const std::vector<torch::Tensor>& inputs, const ForwardMode& mode) override {
    KVCache* cache = mode.cache;
    const int64_t past = cache ? cache->length : 0;
    torch::Tensor position_ids;
    const torch::Tensor mask = check_inputs(inputs, /*bounded=*/true, past, &position_ids);
    const torch::Tensor& ids = inputs[0];
    const int64_t B = ids.size(0), T = ids.size(1), E = cfg_.hidden_size, H = cfg_.num_heads, D = cfg_.head_dim;
    UnitGate* gate = mode.gate;
    const auto& P = params_;
    const torch::ScalarType wt = P[0].scalar_type();
    auto cast = [&](const torch::Tensor& t) { return t.scalar_type() == wt ? t : t.to(wt); };

    gate_before(gate, 0);
    // positions past..past+T-1 for every row (transformers' default; see tests/fixtures/lm/README.md)
    // (or the rows' own position_ids: a left-padded batch in generation)
    torch::Tensor h = torch::embedding(P[0], ids);
    if (position_ids.defined()) {
      h = h + torch::embedding(P[1], position_ids);
    } else {
      auto pos = torch::arange(past, past + T, torch::TensorOptions().dtype(torch::kLong).device(ids.device()));
      h = h + torch::embedding(P[1], pos).unsqueeze(0);
    }
    h = dropout(h, cfg_.embd_pdrop, training_, gen_);
    gate_after(gate, 0, h);

    const double eps = cfg_.layer_norm_epsilon;
    const bool ckpt = checkpoint_now();
    const bool drops = training_ && (cfg_.attn_pdrop > 0 || cfg_.resid_pdrop > 0 || lora_dropout() > 0);
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      const size_t u = static_cast<size_t>(l) + 1;
      auto block = [this, l, B, T, E, H, D, eps, mask, wt, cache](const torch::Tensor& hin) {
        const auto& P = params_;
        const size_t b = 2 + 12 * static_cast<size_t>(l);
        auto cast = [&](const torch::Tensor& t) { return t.scalar_type() == wt ? t : t.to(wt); };
        auto a = torch::layer_norm(cast(hin), {E}, P[b], P[b + 1], eps);
        // the block's Conv1D modules, in block_modules() order: c_attn, attn.c_proj, c_fc, mlp.c_proj
        auto conv = [&](const torch::Tensor& x2, size_t w, size_t mod) {
          const QuantizedWeight* q = quantized(w);  // stored as a Linear's [out, in]
          return with_lora(q ? quantized_linear(cast(x2), *q, P[w + 1]) : torch::addmm(P[w + 1], x2, P[w]), x2, l, mod);
        };
        auto qkv = conv(a.reshape({B * T, E}), b + 2, 0).view({B, T, 3, H, D});
        auto q = qkv.select(2, 0).transpose(1, 2), k = qkv.select(2, 1).transpose(1, 2),
             v = qkv.select(2, 2).transpose(1, 2);
        if (cache) std::tie(k, v) = cache_append(*cache, l, k, v);
        double scale = cfg_.scale_attn_weights ? 1.0 / std::sqrt(static_cast<double>(D)) : 1.0;
        if (cfg_.scale_attn_by_inverse_layer_idx) scale /= static_cast<double>(l + 1);
        auto att = attention(q, k, v, mask, scale, cfg_.attn_pdrop, training_, gen_);
        att = conv(att.reshape({B * T, E}), b + 4, 1).view({B, T, E});
        torch::Tensor h = hin + dropout(att, cfg_.resid_pdrop, training_, gen_);
        auto m = torch::layer_norm(cast(h), {E}, P[b + 6], P[b + 7], eps);
        m = activate(cfg_.activation, conv(m.reshape({B * T, E}), b + 8, 2));
        m = conv(m, b + 10, 3).view({B, T, E});
        return h + dropout(m, cfg_.resid_pdrop, training_, gen_);
      };
      gate_before(gate, u);
      h = ckpt && !cache ? checkpoint(block, h, block_trainables(l), &gen_, drops) : block(h);
      gate_after(gate, u, h);
    }
    const size_t last = static_cast<size_t>(cfg_.num_layers) + 1, f = 2 + 12 * static_cast<size_t>(cfg_.num_layers);
    gate_before(gate, last);
    h = torch::layer_norm(cast(h), {E}, P[f], P[f + 1], eps);
    torch::Tensor logits;
    if (cfg_.tie_word_embeddings) {
      gate_before(gate, 0);  // the head is the embedding (unit 0)
      logits = torch::matmul(h, P[0].t());
    } else {
      logits = torch::matmul(h, P[f + 2].t());
    }
    logits = logits.to(torch::kFloat);
    if (cfg_.tie_word_embeddings) gate_after(gate, 0, logits);
    gate_after(gate, last, logits);
    return logits;
  }
};

}  // namespace

std::unique_ptr<TransformerLM> make_gpt2(const LMConfig& cfg, torch::ScalarType dtype, const at::Generator* gen) {
  return std::make_unique<GPT2>(cfg, dtype, gen);
}

}  // namespace accel::lm_detail
