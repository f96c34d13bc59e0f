// Misuse cases: language models, generation, LoRA, causal-LM data.
#include "common.h"

namespace misuse {

namespace {
// accel_lm_generate_padded's cases: two prompts of 3 positions, and masks
const int64_t ids_v[] = {0, 5, 6, 7, 8, 9};
const int64_t left_v[] = {0, 1, 1, 1, 1, 1}, right_v[] = {1, 1, 0, 1, 1, 1}, empty_v[] = {0, 0, 0, 1, 1, 1};
const int64_t kOnes4[] = {1, 1, 1, 1};
}  // namespace


void language_models() {
  options_init("accel_lm_options_init", accel_lm_options_init, ACCEL_LM_OPTIONS_VERSION);
  // a GPT-2 fixture model on the standard context (deleted at the child's exit with the rest)
  auto gpt2 = [](Env& e) {
    accel_model* m = nullptr;
    ok(accel_model_load_pretrained(e.a.ctx, g_lm_fixture.c_str(), nullptr, &m), "accel_model_load_pretrained");
    return m;
  };
  // a copy of the fixture in ./lm with `edit` applied to its config.json
  auto edited = [](const std::function<void(json&)>& edit) {
    fs::create_directory("lm");
    fs::copy_file(fs::path(g_lm_fixture) / "model.safetensors", "lm/model.safetensors");
    json cfg = json::parse(read_file((fs::path(g_lm_fixture) / "config.json").string()));
    edit(cfg);
    write_file("lm/config.json", cfg.dump());
  };

  for (const std::string fn : {"accel_model_load_pretrained", "accel_model_create_lm"}) {
    const bool load = fn == "accel_model_load_pretrained";
    auto call = [load](accel_context* c, const char* path, const accel_lm_options* o, accel_model** out) {
      return load ? accel_model_load_pretrained(c, path, o, out) : accel_model_create_lm(c, path, o, out);
    };
    auto run = [call](bool null_ctx, const char* path, std::optional<accel_lm_options> o, bool null_out) {
      return [=](Env& e) {
        accel_context* c = null_ctx ? nullptr : e.a.ctx;
        const char* p = path && std::string(path) == "FIXTURE" ? g_lm_fixture.c_str() : path;
        return with_out<accel_model*>(
            e, [&](auto* out) { return R(call(c, p, o ? &*o : nullptr, null_out ? nullptr : out), c); });
      };
    };
    const accel_lm_options defaults = ACCEL_LM_OPTIONS_INIT;
    null_case(fn, "ctx", run(true, "FIXTURE", defaults, false));
    null_case(fn, load ? "dir" : "config", run(false, nullptr, defaults, false));
    null_case(fn, "out", run(false, "FIXTURE", defaults, true));
    add(fn, "path=\"\"", ARG, {load ? "dir" : "config", "empty"}, run(false, "", defaults, false));
    add(fn, "a missing directory", IO, {"missing"}, run(false, "missing", defaults, false));
    for (int d : {int{ACCEL_FLOAT16}, int{ACCEL_INT64}, -1, 42}) {
      accel_lm_options o = ACCEL_LM_OPTIONS_INIT;
      std::memcpy(&o.dtype, &d, sizeof d);
      add(fn, "dtype=" + str(d), ARG, {"dtype", str(d)}, run(false, "FIXTURE", o, false));
    }
    for (int q : {-1, 4, 42}) {  // an int a C caller may pass: read as bytes (raw), never as the enum
      accel_lm_options o = ACCEL_LM_OPTIONS_INIT;
      std::memcpy(&o.quantization, &q, sizeof q);
      add(fn, "quantization=" + str(q), ARG, {"quantization", str(q)}, run(false, "FIXTURE", o, false));
    }
    for (accel_quantization q : {ACCEL_QUANT_NONE, ACCEL_QUANT_INT8}) {
      accel_lm_options o = ACCEL_LM_OPTIONS_INIT;
      o.quantization = q;
      o.double_quant = 1;
      add(fn, "double_quant with quantization=" + str(int{q}), ARG, {"double_quant"}, run(false, "FIXTURE", o, false));
    }
    for (uint32_t v : {0u, uint32_t{ACCEL_LM_OPTIONS_VERSION} + 1}) {
      accel_lm_options o = ACCEL_LM_OPTIONS_INIT;
      o.version = v;
      add(fn, "opts.version=" + str(v), ARG, {"version", str(v)}, run(false, "FIXTURE", o, false));
    }
    add(fn, "model_type=mamba", UNSUPPORTED, {"model_type", "mamba"}, [run, edited](Env& e) {
      edited([](json& c) { c["model_type"] = "mamba"; });
      return run(false, "lm", std::nullopt, false)(e);
    });
    add(fn, "n_embd=\"wide\"", FORMAT, {"n_embd"}, [run, edited](Env& e) {
      edited([](json& c) { c["n_embd"] = "wide"; });
      return run(false, "lm", std::nullopt, false)(e);
    });
    add(fn, "config.json is not JSON", FORMAT, {"config.json"}, [run](Env& e) {
      fs::create_directory("lm");
      write_file("lm/config.json", "{ not json");
      return run(false, "lm", std::nullopt, false)(e);
    });
  }
  add("accel_model_load_pretrained", "a shape the config does not give", FORMAT, {"transformer.wte.weight", "shape"},
      [edited](Env& e) {
        edited([](json& c) { c["vocab_size"] = 64; });
        return with_out<accel_model*>(
            e, [&](auto* out) { return R(accel_model_load_pretrained(e.a.ctx, "lm", nullptr, out), e.a.ctx); });
      });
  add("accel_model_load_pretrained", "a truncated model.safetensors", FORMAT, {"model.safetensors"}, [edited](Env& e) {
    edited([](json&) {});
    fs::resize_file("lm/model.safetensors", fs::file_size("lm/model.safetensors") / 2);
    return with_out<accel_model*>(
        e, [&](auto* out) { return R(accel_model_load_pretrained(e.a.ctx, "lm", nullptr, out), e.a.ctx); });
  });

  // a quantized base: no optimizer without adapters, no save_pretrained (the adapters are saved)
  auto nf4 = [](Env& e) {
    accel_lm_options o = ACCEL_LM_OPTIONS_INIT;
    o.quantization = ACCEL_QUANT_NF4;
    accel_model* m = nullptr;
    ok(accel_model_load_pretrained(e.a.ctx, g_lm_fixture.c_str(), &o, &m), "accel_model_load_pretrained (nf4)");
    return m;
  };
  add("accel_optimizer_create_adamw", "a quantized base without adapters", STATE, {"quantized (nf4)", "LoRA"},
      [nf4](Env& e) {
        accel_adamw_options o = ACCEL_ADAMW_OPTIONS_INIT;
        return with_out<accel_optimizer*>(
            e, [&](auto* out) { return R(accel_optimizer_create_adamw(e.a.ctx, nf4(e), &o, out), e.a.ctx); });
      });
  add("accel_save_pretrained", "a quantized base", ARG, {"quantized", "accel_save_adapter"}, [nf4](Env& e) {
    R r(accel_save_pretrained(e.a.ctx, nf4(e), "out"), e.a.ctx);
    e.expect(!fs::exists("out"), "out was written");
    return r;
  });

  // save_pretrained: what it must refuse, and leave as it was
  const std::string sp = "accel_save_pretrained";
  null_case(sp, "ctx", [gpt2](Env& e) { return R(accel_save_pretrained(nullptr, gpt2(e), "out")); });
  null_case(sp, "model", [](Env& e) { return R(accel_save_pretrained(e.a.ctx, nullptr, "out"), e.a.ctx); });
  null_case(sp, "dir", [gpt2](Env& e) { return R(accel_save_pretrained(e.a.ctx, gpt2(e), nullptr), e.a.ctx); });
  add(sp, "dir=\"\"", ARG, {"dir", "empty"}, [gpt2](Env& e) { return R(accel_save_pretrained(e.a.ctx, gpt2(e), ""), e.a.ctx); });
  add(sp, "an MLP", ARG, {"not a causal LM"}, [](Env& e) {
    R r(accel_save_pretrained(e.a.ctx, e.a.model, "out"), e.a.ctx);
    e.expect(!fs::exists("out"), "out was written");
    return r;
  });
  add(sp, "a model of another context", ARG, {"another context"}, [](Env& e) {
    accel_model* m = nullptr;
    ok(accel_model_load_pretrained(e.other().ctx, g_lm_fixture.c_str(), nullptr, &m), "accel_model_load_pretrained");
    return R(accel_save_pretrained(e.a.ctx, m, "out"), e.a.ctx);
  });
  add(sp, "dir=a directory with a user's file", ARG, {"mydir", "refusing"}, [gpt2](Env& e) {
    fs::create_directory("mydir");
    write_file("mydir/user.txt", kNotes);
    R r(accel_save_pretrained(e.a.ctx, gpt2(e), "mydir"), e.a.ctx);
    e.expect(read_file("mydir/user.txt") == kNotes && fs::is_directory("mydir"), "mydir/user.txt was changed");
    return r;
  });
  add(sp, "dir=a user's file", ARG, {"notes.txt", "refusing"}, [gpt2](Env& e) {
    write_file("notes.txt", kNotes);
    R r(accel_save_pretrained(e.a.ctx, gpt2(e), "notes.txt"), e.a.ctx);
    e.expect(read_file("notes.txt") == kNotes, "notes.txt was changed");
    return r;
  });
  add(sp, "a user's file at the temporary path", ARG, {".out.tmp"}, [gpt2](Env& e) {
    write_file(".out.tmp", kNotes);
    R r(accel_save_pretrained(e.a.ctx, gpt2(e), "out"), e.a.ctx);
    e.expect(read_file(".out.tmp") == kNotes && !fs::exists("out"), ".out.tmp was changed or out written");
    return r;
  });
  add(sp, "a missing parent directory", IO, {"parent"}, [gpt2](Env& e) {
    return R(accel_save_pretrained(e.a.ctx, gpt2(e), "no/such/out"), e.a.ctx);
  });

  // the forward and its loss
  const std::string lf = "accel_lm_forward";
  static const int64_t ids_v[] = {1, 2, 3, 4, 5, 6}, big_v[] = {1, 2, 3, 4, 5, 128}, neg_v[] = {1, 2, -3, 4, 5, 6};
  static const int64_t lab_bad[] = {1, 2, 3, 4, 5, 999};
  auto ids = [](const int64_t* v, std::vector<int64_t> shape = {2, 3}) { return tensor(ACCEL_INT64, shape, v); };
  struct Args {
    int ctx = 1, model = 1;  // 0 NULL, 1 ours, 2 the MLP / another context's
    accel_tensor *in = nullptr, *mask = nullptr, *labels = nullptr;
    bool logits = true, loss = true, tokens = true;
  };
  auto fwd = [gpt2](std::function<Args(Env&)> make) {
    return [=](Env& e) {
      Args a = make(e);
      accel_context* c = a.ctx ? e.a.ctx : nullptr;
      accel_model* m = a.model == 0 ? nullptr : a.model == 1 ? gpt2(e) : e.a.model;
      accel_tensor *lo, *ls;
      int64_t tk;
      fill(lo);
      fill(ls);
      fill(tk);
      R r(accel_lm_forward(c, m, a.in, a.mask, a.labels, a.logits ? &lo : nullptr, a.loss ? &ls : nullptr,
                           a.tokens ? &tk : nullptr),
          c);
      e.untouched(lo, "*out_logits");
      e.untouched(ls, "*out_loss");
      e.untouched(tk, "*out_tokens");
      return r;
    };
  };
  auto good = [ids](Env&) {
    Args a;
    a.in = ids(ids_v);
    a.labels = ids(ids_v);
    return a;
  };
  null_case(lf, "ctx", fwd([good](Env& e) { Args a = good(e); a.ctx = 0; return a; }));
  null_case(lf, "model", fwd([good](Env& e) { Args a = good(e); a.model = 0; return a; }));
  null_case(lf, "input_ids", fwd([good](Env& e) { Args a = good(e); a.in = nullptr; return a; }));
  add(lf, "an MLP", ARG, {"not a causal LM"}, fwd([good](Env& e) { Args a = good(e); a.model = 2; return a; }));
  add(lf, "nothing asked", ARG, {"nothing to compute"}, fwd([good](Env& e) {
        Args a = good(e);
        a.logits = a.loss = a.tokens = false;
        return a;
      }));
  add(lf, "a loss without labels", ARG, {"labels is NULL"}, fwd([good](Env& e) { Args a = good(e); a.labels = nullptr; return a; }));
  add(lf, "input_ids float", ARG, {"input_ids", "int64"}, fwd([good](Env& e) {
        Args a = good(e);
        a.in = floats({2, 3});
        a.labels = nullptr;
        a.loss = a.tokens = false;
        return a;
      }));
  add(lf, "input_ids [6]", ARG, {"input_ids", "[batch, seq]"}, fwd([good, ids](Env& e) {
        Args a = good(e);
        a.in = ids(ids_v, {6});
        a.labels = nullptr;
        a.loss = a.tokens = false;
        return a;
      }));
  add(lf, "a token id past the vocabulary", ARG, {"128", "vocab_size"}, fwd([good, ids](Env& e) { Args a = good(e); a.in = ids(big_v); return a; }));
  add(lf, "a negative token id", ARG, {"-3"}, fwd([good, ids](Env& e) { Args a = good(e); a.in = ids(neg_v); return a; }));
  add(lf, "more positions than n_positions", ARG, {"positions", "64"}, fwd([good](Env& e) {
        Args a = good(e);
        std::vector<int64_t> v(65, 1);
        a.in = tensor(ACCEL_INT64, {1, 65}, v.data());
        a.labels = nullptr;
        a.loss = a.tokens = false;
        return a;
      }));
  add(lf, "labels of another shape", ARG, {"labels", "shape"}, fwd([good, ids](Env& e) { Args a = good(e); a.labels = ids(ids_v, {3, 2}); return a; }));
  add(lf, "labels float", ARG, {"labels", "int64"}, fwd([good](Env& e) { Args a = good(e); a.labels = floats({2, 3}); return a; }));
  add(lf, "a label past the vocabulary", ARG, {"999"}, fwd([good, ids](Env& e) { Args a = good(e); a.labels = ids(lab_bad); return a; }));
  add(lf, "attention_mask of another shape", ARG, {"attention_mask"}, fwd([good, ids](Env& e) { Args a = good(e); a.mask = ids(ids_v, {3, 2}); return a; }));
  add(lf, "attention_mask float", ARG, {"attention_mask", "int64"}, fwd([good](Env& e) { Args a = good(e); a.mask = floats({2, 3}); return a; }));
  add(lf, "a model of another context", ARG, {"another context"}, [ids](Env& e) {
    accel_model* m = nullptr;
    ok(accel_model_load_pretrained(e.other().ctx, g_lm_fixture.c_str(), nullptr, &m), "accel_model_load_pretrained");
    accel_tensor* lo;
    fill(lo);
    R r(accel_lm_forward(e.a.ctx, m, ids(ids_v), nullptr, nullptr, &lo, nullptr, nullptr), e.a.ctx);
    e.untouched(lo, "*out_logits");
    return r;
  });
  // a window mixing a token-mean loss and a plain one (accel_backward)
  add("accel_backward", "a plain mean after a token mean in one window", ARG, {"not both"}, [ids](Env&) {
    accel_options o = ACCEL_OPTIONS_INIT;
    o.device = ACCEL_DEVICE_CPU;
    o.gradient_accumulation_steps = 2;
    accel_context* c = nullptr;
    ok(accel_init(&o, &c), "accel_init");
    accel_model* m = nullptr;
    ok(accel_model_load_pretrained(c, g_lm_fixture.c_str(), nullptr, &m), "accel_model_load_pretrained");
    accel_sgd_options so = ACCEL_SGD_OPTIONS_INIT;
    accel_optimizer* opt = nullptr;
    ok(accel_optimizer_create_sgd(c, m, &so, &opt), "accel_optimizer_create_sgd");
    ok(accel_prepare(c, m, opt, nullptr, nullptr), "accel_prepare");
    accel_tensor *lo = nullptr, *ls = nullptr, *ce = nullptr;
    ok(accel_lm_forward(c, m, ids(ids_v), nullptr, ids(ids_v), &lo, &ls, nullptr), "accel_lm_forward");
    ok(accel_backward(c, ls), "accel_backward");
    // a plain mean: the logits' mean squared error
    ok(accel_lm_forward(c, m, ids(ids_v), nullptr, ids(ids_v), &lo, nullptr, nullptr), "accel_lm_forward");
    ok(accel_loss_mse(c, lo, floats({2, 3, 128}), &ce), "accel_loss_mse");
    return R(accel_backward(c, ce), c);
  });
}

void generation() {
  options_init("accel_generate_options_init", accel_generate_options_init, ACCEL_GENERATE_OPTIONS_VERSION);
  const std::string fn = "accel_lm_generate";
  static const int64_t prompt_v[] = {1, 2, 3, 4};
  auto gpt2 = [](Env& e) {
    accel_model* m = nullptr;
    ok(accel_model_load_pretrained(e.a.ctx, g_lm_fixture.c_str(), nullptr, &m), "accel_model_load_pretrained");
    return m;
  };
  auto prompt = [] { return tensor(ACCEL_INT64, {1, 4}, prompt_v); };
  null_case(fn, "ctx", [gpt2, prompt](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate(nullptr, gpt2(e), prompt(), nullptr, out)); });
  });
  null_case(fn, "model", [prompt](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate(e.a.ctx, nullptr, prompt(), nullptr, out), e.a.ctx); });
  });
  null_case(fn, "input_ids", [gpt2](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate(e.a.ctx, gpt2(e), nullptr, nullptr, out), e.a.ctx); });
  });
  null_case(fn, "out", [gpt2, prompt](Env& e) { return R(accel_lm_generate(e.a.ctx, gpt2(e), prompt(), nullptr, nullptr), e.a.ctx); });
  add(fn, "an MLP", ARG, {"not a causal LM"}, [prompt](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate(e.a.ctx, e.a.model, prompt(), nullptr, out), e.a.ctx); });
  });
  using O = accel_generate_options;
  const auto t = target<O>(
      fn, "opts", [] { return O(ACCEL_GENERATE_OPTIONS_INIT); },
      [gpt2, prompt](Env& e, const O& o) {
        return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate(e.a.ctx, gpt2(e), prompt(), &o, out), e.a.ctx); });
      });
  t.versions();
  t.field<int64_t>("max_new_tokens", &O::max_new_tokens, {0, -1});
  t.field("temperature", &O::temperature, plus(kNonFinite, {-1}));
  t.field<int64_t>("top_k", &O::top_k, {-1});
  t.field<int64_t>("eos_token_id", &O::eos_token_id, {-2, 128});
  t.bad("max_new_tokens=61 (past n_positions 64)", {"n_positions", "64"}, [](O& o) { o.max_new_tokens = 61; });
  static const int64_t past_vocab[] = {1, 128};
  add(fn, "a token id past the vocabulary", ARG, {"128", "vocab_size"}, [gpt2](Env& e) {
    accel_tensor* ids = tensor(ACCEL_INT64, {1, 2}, past_vocab);
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate(e.a.ctx, gpt2(e), ids, nullptr, out), e.a.ctx); });
  });
  add(fn, "input_ids float", ARG, {"input_ids", "int64"}, [gpt2](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate(e.a.ctx, gpt2(e), floats({1, 4}), nullptr, out), e.a.ctx); });
  });
}

void lora() {
  options_init("accel_lora_options_init", accel_lora_options_init, ACCEL_LORA_OPTIONS_VERSION);
  auto base = [](Env& e, accel_context* c = nullptr) {
    accel_model* m = nullptr;
    ok(accel_model_load_pretrained(c ? c : e.a.ctx, g_lm_fixture.c_str(), nullptr, &m), "accel_model_load_pretrained");
    return m;
  };
  const std::string fn = "accel_model_add_lora";
  auto add_with = [base](std::function<void(accel_lora_options&)> f) {
    return [base, f](Env& e) {
      accel_lora_options o = ACCEL_LORA_OPTIONS_INIT;
      f(o);
      return R(accel_model_add_lora(e.a.ctx, base(e), &o), e.a.ctx);
    };
  };
  null_case(fn, "ctx", [base](Env& e) {
    accel_lora_options o = ACCEL_LORA_OPTIONS_INIT;
    return R(accel_model_add_lora(nullptr, base(e), &o));
  });
  null_case(fn, "model", [](Env& e) {
    accel_lora_options o = ACCEL_LORA_OPTIONS_INIT;
    return R(accel_model_add_lora(e.a.ctx, nullptr, &o), e.a.ctx);
  });
  null_case(fn, "opts", [base](Env& e) { return R(accel_model_add_lora(e.a.ctx, base(e), nullptr), e.a.ctx); });
  for (int32_t r : {0, -1})
    add(fn, "r=" + str(r), ARG, {"r must be", str(r)}, add_with([r](accel_lora_options& o) { o.r = r; }));
  for (double a : {0.0, -1.0, kNaN, kInf})
    add(fn, "alpha=" + str(a), ARG, {"alpha"}, add_with([a](accel_lora_options& o) { o.alpha = a; }));
  for (double d : {-0.1, 1.0, kNaN})
    add(fn, "dropout=" + str(d), ARG, {"dropout"}, add_with([d](accel_lora_options& o) { o.dropout = d; }));
  add(fn, "target_modules=\"\"", ARG, {"target_modules", "empty"},
      add_with([](accel_lora_options& o) { o.target_modules = ""; }));
  add(fn, "target_modules=\"c_attn,,c_fc\"", ARG, {"empty name"},
      add_with([](accel_lora_options& o) { o.target_modules = "c_attn,,c_fc"; }));
  add(fn, "target_modules=q_proj on GPT-2", ARG, {"q_proj", "matches no module", "c_attn"},
      add_with([](accel_lora_options& o) { o.target_modules = "q_proj"; }));
  add(fn, "opts.version=0", ARG, {"version", "0"}, add_with([](accel_lora_options& o) { o.version = 0; }));
  add(fn, "an MLP", ARG, {"causal LMs"}, [](Env& e) {
    accel_mlp_options mo = ACCEL_MLP_OPTIONS_INIT;
    mo.layer_sizes = kSizes;
    mo.num_layer_sizes = 3;
    accel_model* mlp = nullptr;
    ok(accel_model_create_mlp(e.a.ctx, &mo, &mlp), "accel_model_create_mlp");
    accel_lora_options o = ACCEL_LORA_OPTIONS_INIT;
    return R(accel_model_add_lora(e.a.ctx, mlp, &o), e.a.ctx);
  });
  add(fn, "twice", ARG, {"already"}, [base](Env& e) {
    accel_lora_options o = ACCEL_LORA_OPTIONS_INIT;
    accel_model* m = base(e);
    ok(accel_model_add_lora(e.a.ctx, m, &o), "accel_model_add_lora");
    return R(accel_model_add_lora(e.a.ctx, m, &o), e.a.ctx);
  });
  add(fn, "a prepared model", STATE, {"prepared"}, [](Env& e) {
    accel_lora_options o = ACCEL_LORA_OPTIONS_INIT;
    return R(accel_model_add_lora(e.a.ctx, e.a.model, &o), e.a.ctx);
  });
  add(fn, "a model of another context", ARG, {"another context"}, [base](Env& e) {
    accel_lora_options o = ACCEL_LORA_OPTIONS_INIT;
    return R(accel_model_add_lora(e.a.ctx, base(e, e.other().ctx), &o), e.a.ctx);
  });

  const std::string la = "accel_model_load_adapter";
  const std::string adapter = fs::path(g_lm_fixture).parent_path() / "gpt2-tiny-lora";
  null_case(la, "ctx", [base, adapter](Env& e) { return R(accel_model_load_adapter(nullptr, base(e), adapter.c_str())); });
  null_case(la, "model", [adapter](Env& e) { return R(accel_model_load_adapter(e.a.ctx, nullptr, adapter.c_str()), e.a.ctx); });
  null_case(la, "dir", [base](Env& e) { return R(accel_model_load_adapter(e.a.ctx, base(e), nullptr), e.a.ctx); });
  add(la, "dir=\"\"", ARG, {"dir", "empty"}, [base](Env& e) { return R(accel_model_load_adapter(e.a.ctx, base(e), ""), e.a.ctx); });
  add(la, "a missing directory", IO, {"missing"}, [base](Env& e) {
    return R(accel_model_load_adapter(e.a.ctx, base(e), "missing"), e.a.ctx);
  });
  auto edited = [adapter](const std::function<void(json&)>& f) {
    fs::create_directory("ad");
    fs::copy_file(fs::path(adapter) / "adapter_model.safetensors", "ad/adapter_model.safetensors");
    json j = json::parse(read_file((fs::path(adapter) / "adapter_config.json").string()));
    f(j);
    write_file("ad/adapter_config.json", j.dump());
  };
  add(la, "use_dora", UNSUPPORTED, {"DoRA"}, [base, edited](Env& e) {
    edited([](json& j) { j["use_dora"] = true; });
    return R(accel_model_load_adapter(e.a.ctx, base(e), "ad"), e.a.ctx);
  });
  add(la, "a rank the tensors do not have", FORMAT, {"adapter_model.safetensors", "shape"}, [base, edited](Env& e) {
    edited([](json& j) { j["r"] = 6; });
    accel_model* m = base(e);
    R r(accel_model_load_adapter(e.a.ctx, m, "ad"), e.a.ctx);
    size_t n = 0;
    ok(accel_model_num_parameters(m, &n, nullptr), "accel_model_num_parameters");
    e.expect(n == 28, "the failed load left adapters (" + str(n) + " parameter tensors)");
    return r;
  });
  add(la, "a truncated adapter_model.safetensors", FORMAT, {"adapter_model.safetensors"}, [base, edited](Env& e) {
    edited([](json&) {});
    fs::resize_file("ad/adapter_model.safetensors", fs::file_size("ad/adapter_model.safetensors") - 10);
    return R(accel_model_load_adapter(e.a.ctx, base(e), "ad"), e.a.ctx);
  });
  add(la, "an adapter for Llama on GPT-2", FORMAT, {"unexpected tensor"}, [base, adapter, edited](Env& e) {
    const std::string llama = (fs::path(adapter).parent_path() / "llama-tiny-lora").string();
    edited([](json&) {});
    fs::copy_file(fs::path(llama) / "adapter_model.safetensors", "ad/adapter_model.safetensors",
                  fs::copy_options::overwrite_existing);
    return R(accel_model_load_adapter(e.a.ctx, base(e), "ad"), e.a.ctx);
  });
  add(la, "a prepared model", STATE, {"prepared"}, [adapter](Env& e) {
    return R(accel_model_load_adapter(e.a.ctx, e.a.model, adapter.c_str()), e.a.ctx);
  });

  const std::string sa = "accel_save_adapter";
  auto with_lora = [base](Env& e) {
    accel_model* m = base(e);
    accel_lora_options o = ACCEL_LORA_OPTIONS_INIT;
    ok(accel_model_add_lora(e.a.ctx, m, &o), "accel_model_add_lora");
    return m;
  };
  null_case(sa, "ctx", [with_lora](Env& e) { return R(accel_save_adapter(nullptr, with_lora(e), "ad")); });
  null_case(sa, "model", [](Env& e) { return R(accel_save_adapter(e.a.ctx, nullptr, "ad"), e.a.ctx); });
  null_case(sa, "dir", [with_lora](Env& e) { return R(accel_save_adapter(e.a.ctx, with_lora(e), nullptr), e.a.ctx); });
  add(sa, "dir=\"\"", ARG, {"dir", "empty"}, [with_lora](Env& e) { return R(accel_save_adapter(e.a.ctx, with_lora(e), ""), e.a.ctx); });
  add(sa, "no adapters", ARG, {"no LoRA adapters"}, [base](Env& e) { return R(accel_save_adapter(e.a.ctx, base(e), "ad"), e.a.ctx); });
  add(sa, "an MLP", ARG, {"not a causal LM"}, [](Env& e) { return R(accel_save_adapter(e.a.ctx, e.a.model, "ad"), e.a.ctx); });
  add(sa, "dir=a user's file", ARG, {"notes.txt", "refusing"}, [with_lora](Env& e) {
    write_file("notes.txt", kNotes);
    R r(accel_save_adapter(e.a.ctx, with_lora(e), "notes.txt"), e.a.ctx);
    e.expect(read_file("notes.txt") == kNotes, "notes.txt was changed");
    return r;
  });
  add(sa, "dir=a pretrained model directory", ARG, {"not a PEFT adapter"}, [with_lora](Env& e) {
    fs::create_directory("pre");
    write_file("pre/config.json", "{}");
    R r(accel_save_adapter(e.a.ctx, with_lora(e), "pre"), e.a.ctx);
    e.expect(read_file("pre/config.json") == "{}", "pre/config.json was changed");
    return r;
  });
}

void lm_data() {
  // token files
  const std::string tw = "accel_token_file_write", tr = "accel_token_file_read";
  static const int64_t toks_v[] = {1, 2, 70000};
  auto toks = [](size_t n) { return tensor(ACCEL_INT64, {static_cast<int64_t>(n)}, toks_v); };
  null_case(tw, "path", [toks](Env&) { return R(accel_token_file_write(nullptr, toks(2), 2)); });
  null_case(tw, "tokens", [](Env&) { return R(accel_token_file_write("t.tok", nullptr, 2)); });
  add(tw, "path=\"\"", ARG, {"path", "empty"}, [toks](Env&) { return R(accel_token_file_write("", toks(2), 2)); });
  for (int w : {0, 1, 3, 8, -2})
    add(tw, "token_bytes=" + str(w), ARG, {"token_bytes", str(w)}, [toks, w](Env&) {
      return R(accel_token_file_write("t.tok", toks(2), w));
    });
  add(tw, "a token too wide for 2 bytes", ARG, {"70000", "2 bytes"}, [toks](Env& e) {
    R r(accel_token_file_write("t.tok", toks(3), 2));
    e.expect(!fs::exists("t.tok"), "t.tok was written");
    return r;
  });
  add(tw, "float tokens", ARG, {"tokens", "int64"}, [](Env&) { return R(accel_token_file_write("t.tok", floats({3}), 2)); });
  add(tw, "2-D tokens", ARG, {"tokens", "one-dimensional"}, [](Env&) {
    static const int64_t v[] = {1, 2, 3, 4};
    return R(accel_token_file_write("t.tok", tensor(ACCEL_INT64, {2, 2}, v), 2));
  });
  add(tw, "path=a user's file", ARG, {"notes.txt", "not a token file"}, [toks](Env& e) {
    write_file("notes.txt", kNotes);
    R r(accel_token_file_write("notes.txt", toks(2), 2));
    e.expect(read_file("notes.txt") == kNotes, "notes.txt was changed");
    return r;
  });
  add(tw, "path=an existing directory", ARG, {"mydir"}, [toks](Env& e) {
    fs::create_directory("mydir");
    R r(accel_token_file_write("mydir", toks(2), 2));
    e.expect(fs::is_directory("mydir"), "mydir was replaced");
    return r;
  });
  auto read = [](const char* path, bool null_out) {
    return [=](Env& e) {
      return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_token_file_read(path, null_out ? nullptr : out)); });
    };
  };
  null_case(tr, "path", read(nullptr, false));
  null_case(tr, "out", read("t.tok", true));
  add(tr, "a missing file", IO, {"none.tok"}, read("none.tok", false));
  add(tr, "a text file", FORMAT, {"notes.txt", "not a token file"}, [read](Env& e) {
    write_file("notes.txt", kNotes);
    return read("notes.txt", false)(e);
  });
  add(tr, "a truncated token file", FORMAT, {"t.tok", "truncated"}, [read, toks](Env& e) {
    ok(accel_token_file_write("t.tok", toks(2), 4), "accel_token_file_write");
    fs::resize_file("t.tok", fs::file_size("t.tok") - 2);
    return read("t.tok", false)(e);
  });
  add(tr, "a header that claims 3-byte tokens", FORMAT, {"t.tok", "width is 3"}, [read, toks](Env& e) {
    ok(accel_token_file_write("t.tok", toks(2), 2), "accel_token_file_write");
    std::string raw = read_file("t.tok");
    raw[12] = 3;
    write_file("t.tok", raw);
    return read("t.tok", false)(e);
  });
  add(tr, "a newer version", FORMAT, {"t.tok", "version 2"}, [read, toks](Env& e) {
    ok(accel_token_file_write("t.tok", toks(2), 2), "accel_token_file_write");
    std::string raw = read_file("t.tok");
    raw[8] = 2;
    write_file("t.tok", raw);
    return read("t.tok", false)(e);
  });

  // the loader
  options_init("accel_lm_data_options_init", accel_lm_data_options_init, ACCEL_LM_DATA_OPTIONS_VERSION);
  const std::string fn = "accel_lm_dataloader_create";
  static const int64_t stream[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  struct A {
    int ctx = 1;
    accel_tensor *tokens = nullptr, *offsets = nullptr;
    accel_lm_data_options lm = ACCEL_LM_DATA_OPTIONS_INIT;
    bool null_lm = false, null_loader = false, null_out = false;
  };
  auto run = [](std::function<A(Env&)> make) {
    return [=](Env& e) {
      A a = make(e);
      accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
      accel_context* c = a.ctx ? e.a.ctx : nullptr;
      return with_out<accel_dataloader*>(e, [&](auto* out) {
        return R(accel_lm_dataloader_create(c, a.tokens, a.offsets, a.null_lm ? nullptr : &a.lm,
                                            a.null_loader ? nullptr : &lo, a.null_out ? nullptr : out),
                 c);
      });
    };
  };
  auto good = [](Env&) {
    A a;
    a.tokens = tensor(ACCEL_INT64, {10}, stream);
    a.lm.block_size = 4;
    return a;
  };
  auto with = [good](std::function<void(A&)> f) {
    return [good, f](Env& e) {
      A a = good(e);
      f(a);
      return a;
    };
  };
  null_case(fn, "ctx", run(with([](A& a) { a.ctx = 0; })));
  null_case(fn, "tokens", run(with([](A& a) { a.tokens = nullptr; })));
  null_case(fn, "lm_opts", run(with([](A& a) { a.null_lm = true; })));
  null_case(fn, "loader_opts", run(with([](A& a) { a.null_loader = true; })));
  null_case(fn, "out", run(with([](A& a) { a.null_out = true; })));
  for (int64_t b : {int64_t{0}, int64_t{1}, int64_t{-4}})
    add(fn, "block_size=" + str(b), ARG, {"block_size", str(b)}, run(with([b](A& a) { a.lm.block_size = b; })));
  add(fn, "block_size=11 (more than the tokens)", ARG, {"no block of 11"}, run(with([](A& a) { a.lm.block_size = 11; })));
  add(fn, "float tokens", ARG, {"tokens", "int64"}, run(with([](A& a) { a.tokens = floats({10}); })));
  add(fn, "2-D tokens", ARG, {"tokens", "one-dimensional"}, run(with([](A& a) { a.tokens = tensor(ACCEL_INT64, {2, 5}, stream); })));
  add(fn, "max_length=-1", ARG, {"max_length", "-1"}, run(with([](A& a) { a.lm.max_length = -1; })));
  add(fn, "pad_to_multiple_of=-8", ARG, {"pad_to_multiple_of", "-8"}, run(with([](A& a) { a.lm.pad_to_multiple_of = -8; })));
  struct Off {
    const char* what;
    std::vector<int64_t> v;
    std::vector<std::string> needles;
  };
  for (const Off& o : {Off{"offsets not from 0", {1, 5, 10}, {"start at 0"}},
                       Off{"offsets short of the tokens", {0, 5, 9}, {"end at the 10 tokens"}},
                       Off{"offsets decreasing", {0, 6, 5, 10}, {"must not decrease", "offsets[2] = 5"}},
                       Off{"one offset", {0}, {"offsets", "at least 2"}},
                       Off{"only empty sequences", {0, 0}, {"every sequence is empty"}}}) {
    const Off copy = o;
    add(fn, copy.what, ARG, copy.needles, run(with([copy](A& a) {
          a.lm.block_size = 0;
          if (copy.v == std::vector<int64_t>{0, 0}) a.tokens = tensor(ACCEL_INT64, {0}, stream);
          a.offsets = tensor(ACCEL_INT64, {static_cast<int64_t>(copy.v.size())}, copy.v.data());
        })));
  }
  add(fn, "block_size with offsets", ARG, {"block_size", "max_length"}, run(with([](A& a) {
        static const int64_t v[] = {0, 10};
        a.offsets = tensor(ACCEL_INT64, {2}, v);
      })));
  add(fn, "opts.version=0", ARG, {"version", "0"}, run(with([](A& a) { a.lm.version = 0; })));
  for (int side : {2, -1})
    add(fn, "padding_side=" + str(side), ARG, {"padding_side", str(side)}, run(with([side](A& a) { a.lm.padding_side = side; })));

  // the attention mask of the last batch
  const std::string am = "accel_dataloader_attention_mask";
  auto lm_loader = [](Env& e) {
    accel_tensor* toks = tensor(ACCEL_INT64, {10}, stream);
    accel_lm_data_options lm = ACCEL_LM_DATA_OPTIONS_INIT;
    lm.block_size = 4;
    accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
    accel_dataloader* dl = nullptr;
    ok(accel_lm_dataloader_create(e.a.ctx, toks, nullptr, &lm, &lo, &dl), "accel_lm_dataloader_create");
    return dl;
  };
  null_case(am, "ctx", [lm_loader](Env& e) {
    accel_dataloader* dl = lm_loader(e);
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_dataloader_attention_mask(nullptr, dl, out)); });
  });
  null_case(am, "loader", [](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_dataloader_attention_mask(e.a.ctx, nullptr, out), e.a.ctx); });
  });
  null_case(am, "out", [lm_loader](Env& e) { return R(accel_dataloader_attention_mask(e.a.ctx, lm_loader(e), nullptr), e.a.ctx); });
  add(am, "before the first batch", STATE, {"no batch", "accel_dataloader_next"}, [lm_loader](Env& e) {
    accel_dataloader* dl = lm_loader(e);
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_dataloader_attention_mask(e.a.ctx, dl, out), e.a.ctx); });
  });
  add(am, "after the end of the epoch", STATE, {"no batch"}, [lm_loader](Env& e) {
    accel_dataloader* dl = lm_loader(e);
    accel_tensor *x = nullptr, *y = nullptr;
    do ok(accel_dataloader_next(e.a.ctx, dl, &x, &y), "accel_dataloader_next");
    while (x != nullptr);
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_dataloader_attention_mask(e.a.ctx, dl, out), e.a.ctx); });
  });
  add(am, "a loader of tensors (no mask)", ARG, {"no attention mask"}, [](Env& e) {
    accel_tensor *x = nullptr, *y = nullptr;
    ok(accel_dataloader_next(e.a.ctx, e.a.loader, &x, &y), "accel_dataloader_next");
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_dataloader_attention_mask(e.a.ctx, e.a.loader, out), e.a.ctx); });
  });
  add(am, "a loader of another context", ARG, {"loader"}, [lm_loader](Env& e) {
    accel_dataloader* dl = lm_loader(e);
    World& b = e.other();
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_dataloader_attention_mask(b.ctx, dl, out), b.ctx); });
  });

  // generation from a padded batch
  const std::string gp = "accel_lm_generate_padded";
  auto gpt2 = [](Env& e) {
    accel_model* m = nullptr;
    ok(accel_model_load_pretrained(e.a.ctx, g_lm_fixture.c_str(), nullptr, &m), "accel_model_load_pretrained");
    return m;
  };
  auto ids = [] { return tensor(ACCEL_INT64, {2, 3}, ids_v); };
  auto mask = [](const int64_t* v) { return tensor(ACCEL_INT64, {2, 3}, v); };
  null_case(gp, "ctx", [gpt2, ids, mask](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate_padded(nullptr, gpt2(e), ids(), mask(left_v), nullptr, out)); });
  });
  null_case(gp, "model", [ids, mask](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate_padded(e.a.ctx, nullptr, ids(), mask(left_v), nullptr, out), e.a.ctx); });
  });
  null_case(gp, "input_ids", [gpt2, mask](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate_padded(e.a.ctx, gpt2(e), nullptr, mask(left_v), nullptr, out), e.a.ctx); });
  });
  null_case(gp, "attention_mask", [gpt2, ids](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate_padded(e.a.ctx, gpt2(e), ids(), nullptr, nullptr, out), e.a.ctx); });
  });
  null_case(gp, "out", [gpt2, ids, mask](Env& e) {
    return R(accel_lm_generate_padded(e.a.ctx, gpt2(e), ids(), mask(left_v), nullptr, nullptr), e.a.ctx);
  });
  add(gp, "right padding", ARG, {"row 0", "padding after a token", "LEFT"}, [gpt2, ids, mask](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate_padded(e.a.ctx, gpt2(e), ids(), mask(right_v), nullptr, out), e.a.ctx); });
  });
  add(gp, "a row without tokens", ARG, {"row 0", "no token"}, [gpt2, ids, mask](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate_padded(e.a.ctx, gpt2(e), ids(), mask(empty_v), nullptr, out), e.a.ctx); });
  });
  add(gp, "a mask of another shape", ARG, {"attention_mask", "shape"}, [gpt2, ids](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) {
      return R(accel_lm_generate_padded(e.a.ctx, gpt2(e), ids(), tensor(ACCEL_INT64, {2, 2}, kOnes4), nullptr, out), e.a.ctx);
    });
  });
  add(gp, "a float mask", ARG, {"attention_mask", "int64"}, [gpt2, ids](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate_padded(e.a.ctx, gpt2(e), ids(), floats({2, 3}), nullptr, out), e.a.ctx); });
  });
  add(gp, "an MLP", ARG, {"not a causal LM"}, [ids, mask](Env& e) {
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate_padded(e.a.ctx, e.a.model, ids(), mask(left_v), nullptr, out), e.a.ctx); });
  });
  add(gp, "max_new_tokens=0", ARG, {"max_new_tokens"}, [gpt2, ids, mask](Env& e) {
    accel_generate_options o = ACCEL_GENERATE_OPTIONS_INIT;
    o.max_new_tokens = 0;
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_lm_generate_padded(e.a.ctx, gpt2(e), ids(), mask(left_v), &o, out), e.a.ctx); });
  });
}

// Trackers: options (version, log_dir, writers, ACCEL_LOG_WITH), the order of the calls, and
// accel_log's arguments. Each case runs in a directory of its own.

}  // namespace misuse
