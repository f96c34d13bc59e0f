// The C ABI: language models (GPT-2, Llama) in Hugging Face's formats.
#include <filesystem>

#include "capi/internal.h"
#include "runtime/models/memory_estimate.h"
#include "runtime/models/transformer.h"

using namespace accel::capi;

namespace {

// The parameters' dtype an accel_lm_options asks for.
torch::ScalarType lm_dtype(const accel_lm_options& o) {
  const int d = raw(o.dtype);
  ACCEL_CHECK(d == ACCEL_FLOAT32 || d == ACCEL_BFLOAT16, Status::InvalidArgument,
              "dtype must be ACCEL_FLOAT32 or ACCEL_BFLOAT16 for a language model's parameters, got ", d);
  return d == ACCEL_FLOAT32 ? torch::kFloat : torch::kBFloat16;
}

// The base's quantization an accel_lm_options asks for, checked before any work.
accel::QuantType lm_quant(const accel_lm_options& o) {
  const int q = raw(o.quantization);
  ACCEL_CHECK(q >= ACCEL_QUANT_NONE && q <= ACCEL_QUANT_INT8, Status::InvalidArgument,
              "quantization must be an accel_quantization (0..3), got ", q);
  ACCEL_CHECK(!o.double_quant || (q == ACCEL_QUANT_NF4 || q == ACCEL_QUANT_FP4), Status::InvalidArgument,
              "double_quant applies to ACCEL_QUANT_NF4 and ACCEL_QUANT_FP4, not to quantization ", q);
  return static_cast<accel::QuantType>(q);
}

// `q`: lm_quant(o), checked by the caller before the model was made.
accel_model* lm_handle(accel_context* ctx, std::unique_ptr<accel::Model> m, const accel_lm_options& o,
                       accel::QuantType q) {
  if (q != accel::QuantType::None) accel::quantize_base(*m, q, o.double_quant != 0);
  accel::set_gradient_checkpointing(*m, o.gradient_checkpointing != 0);
  return new accel_model{ctx, std::shared_ptr<accel::Model>(std::move(m)), nullptr};
}

}  // namespace

extern "C" {

accel_status accel_lm_options_init(accel_lm_options* opts, uint32_t version) {
  return guard(nullptr, "accel_lm_options_init", [&] { init_options(opts, version); });
}

accel_status accel_model_load_pretrained(accel_context* ctx, const char* dir, const accel_lm_options* opts,
                                         accel_model** out) {
  return guard(ctx, "accel_model_load_pretrained", [&] {
    NEED(ctx);
    NEED(dir);
    NEED(out);
    ACCEL_CHECK(dir[0] != '\0', Status::InvalidArgument, "dir is empty");
    const accel_lm_options o = read_options(opts);
    const accel::QuantType q = lm_quant(o);
    *out = lm_handle(ctx, accel::load_pretrained(dir, lm_dtype(o)), o, q);
  });
}

accel_status accel_model_create_lm(accel_context* ctx, const char* config, const accel_lm_options* opts,
                                   accel_model** out) {
  return guard(ctx, "accel_model_create_lm", [&] {
    NEED(ctx);
    NEED(config);
    NEED(out);
    ACCEL_CHECK(config[0] != '\0', Status::InvalidArgument, "config is empty");
    const accel_lm_options o = read_options(opts);
    const torch::ScalarType dtype = lm_dtype(o);
    const accel::QuantType q = lm_quant(o);
    std::error_code ec;
    std::string path = config;
    if (std::filesystem::is_directory(path, ec)) path = (std::filesystem::path(path) / "config.json").string();
    const accel::LMConfig cfg = accel::read_lm_config(path);
    *out = lm_handle(ctx, accel::make_causal_lm(cfg, acc_of(ctx).generator(), dtype), o, q);
  });
}

accel_status accel_save_pretrained(accel_context* ctx, const accel_model* model, const char* dir) {
  return guard(ctx, "accel_save_pretrained", [&] {
    NEED(ctx);
    NEED(model);
    NEED(dir);
    same_context(ctx, model->ctx, "model");
    ACCEL_CHECK(dir[0] != '\0', Status::InvalidArgument, "dir is empty");
    ACCEL_CHECK(accel::lm_config_of(*model->impl), Status::InvalidArgument,
                "the model is not a causal LM (GPT-2 or Llama): save it with accel_save_model");
    acc_of(ctx).save_pretrained(*model->impl, dir);
  });
}

accel_status accel_lm_forward(accel_context* ctx, accel_model* model, const accel_tensor* input_ids,
                              const accel_tensor* attention_mask, const accel_tensor* labels, accel_tensor** out_logits,
                              accel_tensor** out_loss, int64_t* out_tokens) {
  return guard(ctx, "accel_lm_forward", [&] {
    NEED(ctx);
    NEED(model);
    NEED(input_ids);
    same_context(ctx, model->ctx, "model");
    same_context(ctx, input_ids->owner, "input_ids");
    ACCEL_CHECK(accel::lm_config_of(*model->impl), Status::InvalidArgument,
                "the model is not a causal LM (GPT-2 or Llama): use accel_model_forward");
    ACCEL_CHECK(out_logits || out_loss || out_tokens, Status::InvalidArgument,
                "out_logits, out_loss and out_tokens are all NULL: nothing to compute");
    ACCEL_CHECK(labels || (!out_loss && !out_tokens), Status::InvalidArgument,
                "labels is NULL: the loss and its token count need labels (input_ids with -100 where padded)");
    std::vector<torch::Tensor> ins{input_ids->t};
    if (attention_mask) {
      same_context(ctx, attention_mask->owner, "attention_mask");
      ins.push_back(attention_mask->t);
    }
    torch::Tensor labs;
    if (labels) {
      same_context(ctx, labels->owner, "labels");
      labs = labels->t;
      ACCEL_CHECK(labs.sizes() == input_ids->t.sizes(), Status::InvalidArgument, "labels must have input_ids' shape ",
                  accel::shape_str(input_ids->t), ", got ", accel::shape_str(labs));
      ACCEL_CHECK(labs.scalar_type() == torch::kLong || labs.scalar_type() == torch::kInt, Status::InvalidArgument,
                  "labels must be int64 or int32, got ", c10::toString(labs.scalar_type()));
    }
    torch::Tensor logits = acc_of(ctx).forward(*model->impl, ins);
    accel_tensor* loss = nullptr;
    int64_t tokens = 0;
    if (labels) {
      auto [sum, n] = accel::causal_lm_loss_sum(logits, labs.to(logits.device(), torch::kLong));
      tokens = n;
      if (out_loss) {
        loss = wrap(sum / static_cast<double>(std::max<int64_t>(n, 1)), ctx);
        loss->tokens = n;
      }
    }
    if (out_logits) *out_logits = wrap(std::move(logits), ctx);
    if (out_loss) *out_loss = loss;
    if (out_tokens) *out_tokens = tokens;
  });
}

accel_status accel_generate_options_init(accel_generate_options* opts, uint32_t version) {
  return guard(nullptr, "accel_generate_options_init", [&] { init_options(opts, version); });
}

namespace {

// accel_lm_generate and accel_lm_generate_padded (mask NULL: unpadded prompts).
torch::Tensor generate_with(accel_context* ctx, accel_model* model, const accel_tensor* input_ids,
                            const accel_tensor* attention_mask, const accel_generate_options* opts) {
  same_context(ctx, model->ctx, "model");
  same_context(ctx, input_ids->owner, "input_ids");
  if (attention_mask) same_context(ctx, attention_mask->owner, "attention_mask");
  const accel::LMConfig* cfg = accel::lm_config_of(*model->impl);
  ACCEL_CHECK(cfg, Status::InvalidArgument, "the model is not a causal LM (GPT-2 or Llama)");
  const accel_generate_options o = read_options(opts);
  accel::GenerateConfig g;
  g.max_new_tokens = o.max_new_tokens;
  g.temperature = o.temperature;
  g.top_k = o.top_k;
  g.eos_token_id = o.eos_token_id;
  g.seed = o.seed;
  g.use_cache = o.use_cache != 0;
  accel::Accelerator& acc = acc_of(ctx);
  accel::Model& m = *model->impl;
  auto fwd = [&](const std::vector<torch::Tensor>& in, accel::lm_detail::KVCache* cache) {
    return acc.forward(m, in, cache);
  };
  return accel::generate(fwd, input_ids->t, attention_mask ? attention_mask->t : torch::Tensor(), g, *cfg);
}

}  // namespace

accel_status accel_lm_generate(accel_context* ctx, accel_model* model, const accel_tensor* input_ids,
                               const accel_generate_options* opts, accel_tensor** out) {
  return guard(ctx, "accel_lm_generate", [&] {
    NEED(ctx);
    NEED(model);
    NEED(input_ids);
    NEED(out);
    *out = wrap(generate_with(ctx, model, input_ids, nullptr, opts));
  });
}

accel_status accel_lm_generate_padded(accel_context* ctx, accel_model* model, const accel_tensor* input_ids,
                                      const accel_tensor* attention_mask, const accel_generate_options* opts,
                                      accel_tensor** out) {
  return guard(ctx, "accel_lm_generate_padded", [&] {
    NEED(ctx);
    NEED(model);
    NEED(input_ids);
    NEED(attention_mask);
    NEED(out);
    *out = wrap(generate_with(ctx, model, input_ids, attention_mask, opts));
  });
}

// ---------------------------------------------------------------------------------------
// Fine-tuning data

accel_status accel_sft_options_init(accel_sft_options* opts, uint32_t version) {
  return guard(nullptr, "accel_sft_options_init", [&] { init_options(opts, version); });
}

accel_status accel_sft_dataloader_create(accel_context* ctx, const accel_tokenizer* tokenizer, const char* path,
                                         const accel_sft_options* sft_opts, const accel_dataloader_options* loader_opts,
                                         accel_dataloader** out) {
  return guard(ctx, "accel_sft_dataloader_create", [&] {
    NEED(ctx);
    NEED(tokenizer);
    NEED(path);
    NEED(loader_opts);
    NEED(out);
    const accel_sft_options o = read_options(sft_opts);
    const int fmt = raw(o.chat_format), side = raw(o.padding_side);
    ACCEL_CHECK(fmt >= ACCEL_CHAT_AUTO && fmt <= ACCEL_CHAT_MISTRAL, Status::InvalidArgument, "chat_format ", fmt,
                " is no accel_chat_format");
    ACCEL_CHECK(side == ACCEL_SIDE_RIGHT || side == ACCEL_SIDE_LEFT, Status::InvalidArgument, "padding_side ", side,
                " is neither ACCEL_SIDE_RIGHT nor ACCEL_SIDE_LEFT");
    ACCEL_CHECK(o.max_length >= 0, Status::InvalidArgument, "max_length ", o.max_length, " is negative");
    ACCEL_CHECK(!o.packing || o.max_length >= 2, Status::InvalidArgument,
                "packing needs max_length >= 2 (the length of a packed block), got ", o.max_length);
    ACCEL_CHECK(o.pad_to_multiple_of >= 0, Status::InvalidArgument, "pad_to_multiple_of ", o.pad_to_multiple_of,
                " is negative");
    const auto& tok = *tokenizer->impl;
    ACCEL_CHECK(o.pad_id >= -1 && o.pad_id < tok.vocab_size(), Status::InvalidArgument, "pad_id ", o.pad_id,
                " is neither -1 nor an id of the vocabulary (", tok.vocab_size(), " ids)");
    ACCEL_CHECK(*path != '\0', Status::InvalidArgument, "path is empty");
    accel::DataLoaderConfig c = loader_config(loader_opts);
    accel::tokenizer::SftConfig sc;
    sc.format = static_cast<accel::tokenizer::ChatFormat>(fmt);
    sc.completion_only_loss = o.completion_only_loss != 0;
    sc.add_eos = o.add_eos != 0;
    const auto examples = accel::tokenizer::read_sft_jsonl(tok, path, sc);
    std::vector<std::vector<int32_t>> ids, labels;
    ids.reserve(examples.size());
    labels.reserve(examples.size());
    for (const auto& e : examples) {
      ids.push_back(e.ids);
      labels.push_back(e.labels);
    }
    accel::LMDataConfig lc;
    lc.max_length = o.max_length;
    lc.pad_to_multiple_of = o.pad_to_multiple_of;
    lc.pad_left = side == ACCEL_SIDE_LEFT;
    lc.pad_id = o.pad_id >= 0 ? o.pad_id : tok.pad_id() >= 0 ? tok.pad_id() : tok.eos_id() >= 0 ? tok.eos_id() : 0;
    auto src = accel::make_sft_source(ids, labels, lc, o.packing != 0);
    auto dl = std::make_shared<accel::DataLoader>(std::move(src), c);
    *out = new accel_dataloader{ctx, std::move(dl), torch::Tensor(), /*has_masks=*/true, false};
  });
}

// ---------------------------------------------------------------------------------------
// LoRA

accel_status accel_lora_options_init(accel_lora_options* opts, uint32_t version) {
  return guard(nullptr, "accel_lora_options_init", [&] { init_options(opts, version); });
}

accel_status accel_model_add_lora(accel_context* ctx, accel_model* model, const accel_lora_options* opts) {
  return guard(ctx, "accel_model_add_lora", [&] {
    NEED(ctx);
    NEED(model);
    NEED(opts);
    same_context(ctx, model->ctx, "model");
    ACCEL_CHECK(!acc_of(ctx).prepared(model->impl.get()), Status::InvalidState,
                "the model is prepared: add LoRA adapters before accel_prepare (and before creating its optimizer)");
    const accel_lora_options o = read_options(opts);
    accel::LoraConfig c;
    c.r = o.r;
    c.alpha = o.alpha;
    c.dropout = o.dropout;
    c.use_rslora = o.use_rslora != 0;
    if (o.target_modules) c.target_modules = target_list(o.target_modules);
    accel::add_lora(*model->impl, c, acc_of(ctx).generator());
  });
}

accel_status accel_model_load_adapter(accel_context* ctx, accel_model* model, const char* dir) {
  return guard(ctx, "accel_model_load_adapter", [&] {
    NEED(ctx);
    NEED(model);
    NEED(dir);
    same_context(ctx, model->ctx, "model");
    ACCEL_CHECK(dir[0] != '\0', Status::InvalidArgument, "dir is empty");
    ACCEL_CHECK(!acc_of(ctx).prepared(model->impl.get()), Status::InvalidState,
                "the model is prepared: load an adapter before accel_prepare (and before creating its optimizer)");
    accel::load_adapter(*model->impl, dir);
  });
}

accel_status accel_save_adapter(accel_context* ctx, const accel_model* model, const char* dir) {
  return guard(ctx, "accel_save_adapter", [&] {
    NEED(ctx);
    NEED(model);
    NEED(dir);
    same_context(ctx, model->ctx, "model");
    ACCEL_CHECK(dir[0] != '\0', Status::InvalidArgument, "dir is empty");
    ACCEL_CHECK(accel::lm_config_of(*model->impl), Status::InvalidArgument, "the model is not a causal LM (GPT-2 or Llama)");
    ACCEL_CHECK(accel::lora_config_of(*model->impl), Status::InvalidArgument,
                "the model has no LoRA adapters (accel_model_add_lora or accel_model_load_adapter first)");
    acc_of(ctx).save_adapter(*model->impl, dir);
  });
}

// ---------------------------------------------------------------------------------------
// Causal-LM data

accel_status accel_token_file_write(const char* path, const accel_tensor* tokens, int32_t token_bytes) {
  return guard(nullptr, "accel_token_file_write", [&] {
    NEED(path);
    NEED(tokens);
    accel::write_token_file(path, tokens->t, token_bytes);
  });
}

accel_status accel_token_file_read(const char* path, accel_tensor** out) {
  return guard(nullptr, "accel_token_file_read", [&] {
    NEED(path);
    NEED(out);
    *out = wrap(accel::read_token_file(path));
  });
}

accel_status accel_lm_data_options_init(accel_lm_data_options* opts, uint32_t version) {
  return guard(nullptr, "accel_lm_data_options_init", [&] { init_options(opts, version); });
}

accel_status accel_lm_dataloader_create(accel_context* ctx, const accel_tensor* tokens, const accel_tensor* offsets,
                                        const accel_lm_data_options* lm_opts,
                                        const accel_dataloader_options* loader_opts, accel_dataloader** out) {
  return guard(ctx, "accel_lm_dataloader_create", [&] {
    NEED(ctx);
    NEED(tokens);
    NEED(lm_opts);
    NEED(loader_opts);
    NEED(out);
    const accel_lm_data_options o = read_options(lm_opts);
    accel::LMDataConfig lc;
    lc.block_size = o.block_size;
    lc.max_length = o.max_length;
    lc.pad_id = o.pad_id;
    lc.pad_to_multiple_of = o.pad_to_multiple_of;
    ACCEL_CHECK(o.padding_side == ACCEL_SIDE_RIGHT || o.padding_side == ACCEL_SIDE_LEFT, Status::InvalidArgument,
                "padding_side ", o.padding_side, " is neither ACCEL_SIDE_RIGHT (0) nor ACCEL_SIDE_LEFT (1)");
    lc.pad_left = o.padding_side == ACCEL_SIDE_LEFT;
    accel::DataLoaderConfig c = loader_config(loader_opts);
    c.group_by_length = o.group_by_length != 0;
    auto src = accel::make_lm_source(tokens->t, offsets ? offsets->t : torch::Tensor(), lc);
    auto dl = std::make_shared<accel::DataLoader>(std::move(src), c);
    *out = new accel_dataloader{ctx, std::move(dl), torch::Tensor(), /*has_masks=*/true, false};
  });
}

}  // extern "C"
