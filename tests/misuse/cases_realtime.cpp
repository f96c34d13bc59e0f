// Misuse cases: trackers, memory estimates, inference beside training and bounded training calls.
#include "common.h"

namespace misuse {

void trackers() {
  options_init("accel_tracker_options_init", accel_tracker_options_init, ACCEL_TRACKER_OPTIONS_VERSION);
  const std::string fn = "accel_init_trackers";
  null_case(fn, "ctx", [](Env&) {
    accel_tracker_options o = ACCEL_TRACKER_OPTIONS_INIT;
    o.log_dir = "logs";
    return R(accel_init_trackers(nullptr, &o));
  });
  null_case(fn, "opts", [](Env& e) { return R(accel_init_trackers(e.a.ctx, nullptr), e.a.ctx); });
  using O = accel_tracker_options;
  const auto t = target<O>(
      fn, "opts",
      [] {
        O o ACCEL_TRACKER_OPTIONS_INIT;
        o.log_dir = "logs";
        return o;
      },
      [](Env& e, const O& o) { return R(accel_init_trackers(e.a.ctx, &o), e.a.ctx); });
  t.versions();
  t.bad("log_dir=NULL", {"log_dir", "NULL"}, [](O& o) { o.log_dir = nullptr; });
  t.bad("log_dir=\"\"", {"log_dir", "empty"}, [](O& o) { o.log_dir = ""; });
  t.field<uint32_t>("writers", &O::writers, {8, 0xFFFFFFFFu});
  add(fn, "log_dir a regular file", ARG, {"log_dir", "regular file"}, [](Env& e) {
    write_file("taken", "a user's file");
    O o ACCEL_TRACKER_OPTIONS_INIT;
    o.log_dir = "taken";
    R r = R(accel_init_trackers(e.a.ctx, &o), e.a.ctx);
    e.expect(read_file("taken") == "a user's file", "the file was changed");
    return r;
  });
  add(fn, "metrics.jsonl a symbolic link", ARG, {"metrics.jsonl", "symbolic link"}, [](Env& e) {
    write_file("target", "a user's file");
    fs::create_directories("logs");
    fs::create_symlink(fs::absolute("target"), "logs/metrics.jsonl");
    O o ACCEL_TRACKER_OPTIONS_INIT;
    o.log_dir = "logs";
    o.writers = ACCEL_LOG_JSONL;
    R r = R(accel_init_trackers(e.a.ctx, &o), e.a.ctx);
    e.expect(read_file("target") == "a user's file", "the link's target was written");
    return r;
  });
  add(fn, "ACCEL_LOG_WITH=bogus", ARG, {"ACCEL_LOG_WITH", "bogus"}, [](Env& e) {
    ::setenv("ACCEL_LOG_WITH", "bogus", 1);
    O o ACCEL_TRACKER_OPTIONS_INIT;
    o.log_dir = "logs";
    R r = R(accel_init_trackers(e.a.ctx, &o), e.a.ctx);
    ::unsetenv("ACCEL_LOG_WITH");
    return r;
  });
  add(fn, "twice", STATE, {"already open"}, [](Env& e) {
    O o ACCEL_TRACKER_OPTIONS_INIT;
    o.log_dir = "logs";
    if (accel_init_trackers(e.a.ctx, &o) != ACCEL_OK) throw SetupError("accel_init_trackers");
    R r = R(accel_init_trackers(e.a.ctx, &o), e.a.ctx);
    accel_end_training(e.a.ctx);
    return r;
  });

  // accel_log: with the trackers open (closed again after the call)
  auto logged = [](std::function<accel_status(accel_context*)> call, bool open = true) -> Body {
    return [=](Env& e) {
      if (open) {
        O o ACCEL_TRACKER_OPTIONS_INIT;
        o.log_dir = "logs";
        if (accel_init_trackers(e.a.ctx, &o) != ACCEL_OK) throw SetupError("accel_init_trackers");
      }
      R r = R(call(e.a.ctx), e.a.ctx);
      accel_end_training(e.a.ctx);
      return r;
    };
  };
  static const char* const names[2] = {"loss", "lr"};
  static const double values[2] = {0.5, 1e-3};
  const std::string lg = "accel_log";
  null_case(lg, "ctx", [](Env&) { return R(accel_log(nullptr, 0, names, values, 2)); });
  null_case(lg, "names", logged([](accel_context* c) { return accel_log(c, 0, nullptr, values, 2); }));
  null_case(lg, "values", logged([](accel_context* c) { return accel_log(c, 0, names, nullptr, 2); }));
  add(lg, "before accel_init_trackers", STATE, {"accel_init_trackers"},
      logged([](accel_context* c) { return accel_log(c, 0, names, values, 2); }, false));
  for (int32_t n : {0, -1, INT32_MIN})
    add(lg, "count=" + str(n), ARG, {"count", str(n)},
        logged([n](accel_context* c) { return accel_log(c, 0, names, values, n); }));
  for (int64_t s : {int64_t{-1}, INT64_MIN})
    add(lg, "step=" + str(s), ARG, {"step", str(s)},
        logged([s](accel_context* c) { return accel_log(c, s, names, values, 2); }));
  add(lg, "names[1]=NULL", ARG, {"names[1]", "NULL"}, logged([](accel_context* c) {
        const char* n[2] = {"loss", nullptr};
        return accel_log(c, 0, n, values, 2);
      }));
  add(lg, "an empty name", ARG, {"name", "empty"}, logged([](accel_context* c) {
        const char* n[2] = {"loss", ""};
        return accel_log(c, 0, n, values, 2);
      }));
  add(lg, "a name twice", ARG, {"'loss'", "twice"}, logged([](accel_context* c) {
        const char* n[2] = {"loss", "loss"};
        return accel_log(c, 0, n, values, 2);
      }));
  null_case("accel_end_training", "ctx", [](Env&) { return R(accel_end_training(nullptr)); });
  add("accel_end_training", "without trackers", OK, {}, [](Env& e) { return R(accel_end_training(e.a.ctx), e.a.ctx); });
}

// accel_estimate_memory: no context; every option's domain; the out struct's version; what
// accel_prepare refuses; a model that is neither a shape nor a config. *out untouched on failure.
void memory_estimates() {
  options_init("accel_memory_estimate_options_init", accel_memory_estimate_options_init,
               ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION);
  const std::string fn = "accel_estimate_memory";
  auto run = [](const char* model, const accel_memory_estimate_options* o, uint32_t out_version) {
    return [=](Env& e) {
      accel_memory_estimate out;
      fill(out);
      out.version = out_version;
      const accel_memory_estimate before = out;
      R r = R(accel_estimate_memory(model, o, &out));
      if (r.status != ACCEL_OK) e.expect(std::memcmp(&before, &out, sizeof out) == 0, "*out was written by the failing call");
      return r;
    };
  };
  null_case(fn, "model", run(nullptr, nullptr, ACCEL_MEMORY_ESTIMATE_VERSION));
  null_case(fn, "out", [](Env&) { return R(accel_estimate_memory("gpt2", nullptr, nullptr)); });
  add(fn, "model \"\"", ARG, {"model", "empty"}, run("", nullptr, ACCEL_MEMORY_ESTIMATE_VERSION));
  add(fn, "an unknown shape", IO, {"gpt5", "named shape"}, run("gpt5", nullptr, ACCEL_MEMORY_ESTIMATE_VERSION));
  for (uint32_t v : {0u, uint32_t{ACCEL_MEMORY_ESTIMATE_VERSION} + 1, 99u})
    add(fn, "out->version=" + str(v), ARG, {"accel_memory_estimate", "version", str(v)},
        run("gpt2", nullptr, v));
  add(fn, "a config.json that is not JSON", FORMAT, {"config.json", "JSON"}, [](Env&) {
    const fs::path d = "notjson";  // each case runs in a directory of its own
    fs::create_directories(d);
    write_file(d / "config.json", "{ nope");
    accel_memory_estimate out{};
    out.version = ACCEL_MEMORY_ESTIMATE_VERSION;
    return R(accel_estimate_memory(d.c_str(), nullptr, &out));
  });
  using O = accel_memory_estimate_options;
  const auto t = target<O>(
      fn, "opts", [] { return O ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT; },
      [](Env& e, const O& o) {
        accel_memory_estimate out;
        fill(out);
        out.version = ACCEL_MEMORY_ESTIMATE_VERSION;
        const accel_memory_estimate before = out;
        R r = R(accel_estimate_memory("llama-7b", &o, &out));
        if (r.status != ACCEL_OK) e.expect(std::memcmp(&before, &out, sizeof out) == 0, "*out was written by the failing call");
        return r;
      });
  t.versions();
  t.enums("mixed_precision", &O::mixed_precision);
  t.enums("optimizer", &O::optimizer);
  t.enums("strategy", &O::strategy);
  t.bad("weights_dtype=ACCEL_INT64", {"weights_dtype", "3"}, [](O& o) { o.weights_dtype = ACCEL_INT64; });
  t.field<int32_t>("world_size", &O::world_size, {0, -1});
  t.field<int64_t>("micro_batch", &O::micro_batch, {0, -1, INT64_MIN});
  t.field<int64_t>("seq_len", &O::seq_len, {-1, INT64_MIN});
  t.field<int32_t>("lora_rank", &O::lora_rank, {-1});
  t.field<int32_t>("attention", &O::attention, {3, -1});
  t.bad("world_size=8 without a strategy", {"world_size", "strategy"}, [](O& o) { o.world_size = 8; });
  t.bad("bf16 weights with bf16 autocast", {"bf16", "autocast"}, [](O& o) {
    o.weights_dtype = ACCEL_BFLOAT16;
    o.mixed_precision = ACCEL_PRECISION_BF16;
  });
  t.bad("lora_target_modules=\"\"", {"target_modules", "empty"}, [](O& o) {
    o.lora_rank = 8;
    o.lora_target_modules = "";
  });
  t.bad("lora_target_modules=\"c_attn\" on Llama", {"LoRA", "match no module"}, [](O& o) {
    o.lora_rank = 8;
    o.lora_target_modules = "c_attn";
  });
  t.bad("LAMB under ZeRO-2", {"ZeRO", "LAMB"}, [](O& o) {
    o.optimizer = ACCEL_OPTIMIZER_LAMB;
    o.strategy = ACCEL_STRATEGY_ZERO2;
    o.world_size = 8;
  }, UNSUPPORTED);
  t.bad("bf16 weights under ZeRO-3", {"ZeRO", "fp32 parameters"}, [](O& o) {
    o.weights_dtype = ACCEL_BFLOAT16;
    o.strategy = ACCEL_STRATEGY_ZERO3;
    o.world_size = 8;
  }, UNSUPPORTED);
  // version 2: offload and quantized bases
  t.enums("offload", &O::offload);
  t.enums("quantization", &O::quantization);
  t.bad("quantization=NF4 without LoRA", {"quantized base", "lora_rank"}, [](O& o) { o.quantization = ACCEL_QUANT_NF4; });
  t.bad("double_quant with int8", {"double_quant", "NF4"}, [](O& o) {
    o.lora_rank = 8;
    o.quantization = ACCEL_QUANT_INT8;
    o.double_quant = 1;
  });
  t.bad("offload=PARAMETERS without ZeRO-3", {"offload", "only ZeRO-3"},
        [](O& o) { o.offload = ACCEL_OFFLOAD_PARAMETERS; });
  t.bad("LAMB with offload", {"offload", "LAMB"}, [](O& o) {
    o.optimizer = ACCEL_OPTIMIZER_LAMB;
    o.offload = ACCEL_OFFLOAD_OPTIMIZER;
  }, UNSUPPORTED);
}

// Inference copies (accel_inference_*, accel_publish_weights) and the bounded training call.
void realtime() {
  options_init("accel_inference_options_init", accel_inference_options_init, ACCEL_INFERENCE_OPTIONS_VERSION);
  using Inf = accel_inference*;
  const std::string cr = "accel_inference_create";
  null_case(cr, "ctx", [](Env& e) {
    return with_out<Inf>(e, [&](auto* out) { return R(accel_inference_create(nullptr, e.a.model, nullptr, out)); });
  });
  null_case(cr, "model", [](Env& e) {
    return with_out<Inf>(e, [&](auto* out) { return R(accel_inference_create(e.a.ctx, nullptr, nullptr, out), e.a.ctx); });
  });
  null_case(cr, "out", [](Env& e) { return R(accel_inference_create(e.a.ctx, e.a.model, nullptr, nullptr), e.a.ctx); });
  add(cr, "a model of another context", ARG, {"model", "another context"}, [](Env& e) {
    return with_out<Inf>(e, [&](auto* out) {
      return R(accel_inference_create(e.a.ctx, e.other().model, nullptr, out), e.a.ctx);
    });
  });
  using O = accel_inference_options;
  const auto t = target<O>(
      cr, "opts",
      [] {
        O o ACCEL_INFERENCE_OPTIONS_INIT;
        return o;
      },
      [](Env& e, const O& o) {
        return with_out<Inf>(e, [&](auto* out) { return R(accel_inference_create(e.a.ctx, e.a.model, &o, out), e.a.ctx); });
      });
  t.versions();
  t.field<int32_t>("num_threads", &O::num_threads, {0, -1, 4097, INT32_MIN});
  destroy_null("accel_inference_destroy", [] { accel_inference_destroy(nullptr); });

  const std::string pb = "accel_publish_weights";
  null_case(pb, "ctx", [](Env& e) {
    return with_out<uint64_t>(e, [&](auto* out) { return R(accel_publish_weights(nullptr, e.a.model, out)); });
  });
  null_case(pb, "model", [](Env& e) {
    return with_out<uint64_t>(e, [&](auto* out) { return R(accel_publish_weights(e.a.ctx, nullptr, out), e.a.ctx); });
  });
  add(pb, "a model of another context", ARG, {"model", "another context"}, [](Env& e) {
    return with_out<uint64_t>(e, [&](auto* out) { return R(accel_publish_weights(e.a.ctx, e.other().model, out), e.a.ctx); });
  });
  add(pb, "out=NULL", OK, {}, [](Env& e) { return R(accel_publish_weights(e.a.ctx, e.a.model, nullptr), e.a.ctx); });

  // accel_inference_run on a copy made for the case (inputs: float [2, 4] unless said)
  auto copy_run = [](std::function<accel_status(accel_inference*, accel_tensor**)> call) -> Body {
    return [=](Env& e) {
      Inf inf = nullptr;
      ok(accel_inference_create(e.a.ctx, e.a.model, nullptr, &inf), "accel_inference_create");
      R r = with_out<accel_tensor*>(e, [&](auto* out) { return R(call(inf, out)); });
      accel_inference_destroy(inf);
      return r;
    };
  };
  const std::string rn = "accel_inference_run";
  null_case(rn, "inference", [](Env& e) {
    accel_tensor* x = floats({2, 4});
    return with_out<accel_tensor*>(e, [&](auto* out) { return R(accel_inference_run(nullptr, &x, 1, out)); });
  });
  null_case(rn, "out", [](Env& e) {
    Inf inf = nullptr;
    ok(accel_inference_create(e.a.ctx, e.a.model, nullptr, &inf), "accel_inference_create");
    accel_tensor* x = floats({2, 4});
    R r = R(accel_inference_run(inf, &x, 1, nullptr));
    accel_inference_destroy(inf);
    return r;
  });
  null_case(rn, "inputs", copy_run([](Inf inf, accel_tensor** out) { return accel_inference_run(inf, nullptr, 1, out); }));
  add(rn, "inputs[0]=NULL", ARG, {"inputs[0]", "NULL"}, copy_run([](Inf inf, accel_tensor** out) {
        accel_tensor* none = nullptr;
        return accel_inference_run(inf, &none, 1, out);
      }));
  add(rn, "a [2, 5] input for 4 features", ARG, {"inputs[0]", "[2, 5]"}, copy_run([](Inf inf, accel_tensor** out) {
        accel_tensor* x = floats({2, 5});
        return accel_inference_run(inf, &x, 1, out);
      }));
  add(rn, "two inputs", ARG, {"num_inputs", "2"}, copy_run([](Inf inf, accel_tensor** out) {
        accel_tensor* x[2] = {floats({2, 4}), floats({2, 4})};
        return accel_inference_run(inf, x, 2, out);
      }));
  add(rn, "an int64 input", ARG, {"inputs[0]", "floating-point"}, copy_run([](Inf inf, accel_tensor** out) {
        const int64_t v[4] = {1, 2, 3, 4};
        accel_tensor* x = tensor(ACCEL_INT64, {1, 4}, v);
        return accel_inference_run(inf, &x, 1, out);
      }));
  null_case("accel_inference_weights", "inference", [](Env& e) {
    return with_out<uint64_t>(e, [&](auto* out) { return R(accel_inference_weights(nullptr, out, nullptr)); });
  });

  // accel_train_micro_batches on the fixture (prepared, a loader of 4 batches): *out untouched
  // but for the version the caller set
  const std::string tm = "accel_train_micro_batches";
  auto train = [](std::function<accel_status(World&, accel_train_result*)> call, bool fresh = false) -> Body {
    return [=](Env& e) {
      std::optional<World> f;
      if (fresh) f = make_world(false);
      World& w = fresh ? *f : e.a;
      accel_train_result r;
      fill(r);
      r.version = ACCEL_TRAIN_RESULT_VERSION;
      R res = R(call(w, &r), w.ctx);
      if (res.status != OK)
        e.expect(filled(reinterpret_cast<const char*>(&r) + sizeof r.version, sizeof r - sizeof r.version),
                 "*out was written by the failing call");
      return res;
    };
  };
  null_case(tm, "ctx", [](Env& e) {
    return R(accel_train_micro_batches(nullptr, e.a.model, e.a.loader, ACCEL_LOSS_CROSS_ENTROPY, 1, 0, nullptr));
  });
  null_case(tm, "model", train([](World& w, accel_train_result* r) {
              return accel_train_micro_batches(w.ctx, nullptr, w.loader, ACCEL_LOSS_CROSS_ENTROPY, 1, 0, r);
            }));
  null_case(tm, "loader", train([](World& w, accel_train_result* r) {
              return accel_train_micro_batches(w.ctx, w.model, nullptr, ACCEL_LOSS_CROSS_ENTROPY, 1, 0, r);
            }));
  for (int32_t n : {0, -1, INT32_MIN})
    add(tm, "max_micro_batches=" + str(n), ARG, {"max_micro_batches", str(n)},
        train([n](World& w, accel_train_result* r) {
          return accel_train_micro_batches(w.ctx, w.model, w.loader, ACCEL_LOSS_CROSS_ENTROPY, n, 0, r);
        }));
  for (double v : plus(kNonFinite, {-1, -1e-300}))
    add(tm, "max_seconds=" + str(v), ARG, {"max_seconds", str(v)}, train([v](World& w, accel_train_result* r) {
          return accel_train_micro_batches(w.ctx, w.model, w.loader, ACCEL_LOSS_CROSS_ENTROPY, 1, v, r);
        }));
  for (int v : {42, -1})
    add(tm, "loss=" + str(v), ARG, {"loss", str(v)}, train([v](World& w, accel_train_result* r) {
          return accel_train_micro_batches(w.ctx, w.model, w.loader, raw<accel_loss>(v), 1, 0, r);
        }));
  for (uint32_t v : {0u, uint32_t{ACCEL_TRAIN_RESULT_VERSION + 1}})
    add(tm, "out->version=" + str(v), ARG, {"accel_train_result version", str(v)}, [v](Env& e) {
      accel_train_result r;
      fill(r);
      r.version = v;
      R res = R(accel_train_micro_batches(e.a.ctx, e.a.model, e.a.loader, ACCEL_LOSS_CROSS_ENTROPY, 1, 0, &r), e.a.ctx);
      e.expect(filled(reinterpret_cast<const char*>(&r) + sizeof r.version, sizeof r - sizeof r.version),
               "*out was written by the failing call");
      return res;
    });
  add(tm, "before accel_prepare", STATE, {"accel_prepare"}, train([](World& w, accel_train_result* r) {
        return accel_train_micro_batches(w.ctx, w.model, w.loader, ACCEL_LOSS_CROSS_ENTROPY, 1, 0, r);
      }, /*fresh=*/true));
  add(tm, "a model in evaluation mode", STATE, {"evaluation mode"}, train([](World& w, accel_train_result* r) {
        ok(accel_model_set_training(w.ctx, w.model, 0), "accel_model_set_training");
        const accel_status s = accel_train_micro_batches(w.ctx, w.model, w.loader, ACCEL_LOSS_CROSS_ENTROPY, 1, 0, r);
        ok(accel_model_set_training(w.ctx, w.model, 1), "accel_model_set_training");
        return s;
      }));
  add(tm, "the causal-LM loss for an MLP", ARG, {"ACCEL_LOSS_CAUSAL_LM", "causal LM"},
      train([](World& w, accel_train_result* r) {
        return accel_train_micro_batches(w.ctx, w.model, w.loader, ACCEL_LOSS_CAUSAL_LM, 1, 0, r);
      }));
  add(tm, "a loader without targets", ARG, {"no targets"}, train([](World& w, accel_train_result* r) {
        accel_dataloader* l = nullptr;
        accel_dataloader_options dl = ACCEL_DATALOADER_OPTIONS_INIT;
        ok(accel_dataloader_create(w.ctx, w.x, nullptr, &dl, &l), "accel_dataloader_create");
        const accel_status s = accel_train_micro_batches(w.ctx, w.model, l, ACCEL_LOSS_CROSS_ENTROPY, 1, 0, r);
        accel_dataloader_destroy(l);
        return s;
      }));
  add(tm, "a loader of another context", ARG, {"loader", "another context"}, [](Env& e) {
    return R(accel_train_micro_batches(e.a.ctx, e.a.model, e.other().loader, ACCEL_LOSS_CROSS_ENTROPY, 1, 0, nullptr),
             e.a.ctx);
  });
  add(tm, "a model of another context", ARG, {"model", "another context"}, [](Env& e) {
    return R(accel_train_micro_batches(e.a.ctx, e.other().model, e.a.loader, ACCEL_LOSS_CROSS_ENTROPY, 1, 0, nullptr),
             e.a.ctx);
  });
  add(tm, "MSE against class indices", ARG, {}, train([](World& w, accel_train_result* r) {
        return accel_train_micro_batches(w.ctx, w.model, w.loader, ACCEL_LOSS_MSE, 1, 0, r);
      }));
}

}  // namespace misuse
