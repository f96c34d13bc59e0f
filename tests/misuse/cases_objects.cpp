// Misuse cases: versions and errors, tensors, the context, models, losses, optimizers, data.
#include "common.h"

namespace misuse {

void basics() {
  add("accel_version_number", "matches the header", OK, {}, [](Env& e) {
    e.expect(accel_version_number() == ACCEL_VERSION_NUMBER, "accel_version_number() != ACCEL_VERSION_NUMBER");
    return R(OK);
  });
  add("accel_version_string", "matches the header", OK, {}, [](Env& e) {
    const char* v = accel_version_string();
    e.expect(v && std::string(v) == ACCEL_VERSION_STRING, "accel_version_string() != ACCEL_VERSION_STRING");
    return R(OK);
  });
  for (int code : {12345, -999, 1, -11})
    add("accel_status_name", "unknown code " + str(code), OK, {}, [code](Env& e) {
      const char* n = accel_status_name(raw<accel_status>(code));
      e.expect(n && std::string(n) == "ACCEL_ERR_UNKNOWN", "got " + std::string(n ? n : "NULL"));
      return R(OK);
    });
  add("accel_status_name", "known codes", OK, {}, [](Env& e) {
    const std::map<accel_status, std::string> names = {{ACCEL_OK, "ACCEL_OK"},
                                                       {ACCEL_ERR_INVALID_ARGUMENT, "ACCEL_ERR_INVALID_ARGUMENT"},
                                                       {ACCEL_ERR_INVALID_STATE, "ACCEL_ERR_INVALID_STATE"},
                                                       {ACCEL_ERR_OUT_OF_MEMORY, "ACCEL_ERR_OUT_OF_MEMORY"},
                                                       {ACCEL_ERR_COMMUNICATION, "ACCEL_ERR_COMMUNICATION"},
                                                       {ACCEL_ERR_TIMEOUT, "ACCEL_ERR_TIMEOUT"},
                                                       {ACCEL_ERR_IO, "ACCEL_ERR_IO"},
                                                       {ACCEL_ERR_FORMAT, "ACCEL_ERR_FORMAT"},
                                                       {ACCEL_ERR_UNSUPPORTED, "ACCEL_ERR_UNSUPPORTED"},
                                                       {ACCEL_ERR_INTERNAL, "ACCEL_ERR_INTERNAL"},
                                                       {ACCEL_ERR_NON_FINITE, "ACCEL_ERR_NON_FINITE"}};
    for (const auto& [s, n] : names) e.expect(accel_status_name(s) == n, "accel_status_name(" + n + ")");
    return R(OK);
  });
  for (int d : {42, -1, 8})
    add("accel_dtype_size", "unknown dtype " + str(d), OK, {}, [d](Env& e) {
      e.expect(accel_dtype_size(raw<accel_dtype>(d)) == 0, "got " + str(accel_dtype_size(raw<accel_dtype>(d))));
      return R(OK);
    });
  add("accel_last_error", "NULL is the thread's slot", OK, {}, [](Env& e) {
    int64_t n = 0;
    accel_tensor_numel(nullptr, &n);
    const char* m = accel_last_error(nullptr);
    e.expect(m && std::string(m).find("accel_tensor_numel") != std::string::npos,
             "accel_last_error(NULL) after a failing accel_tensor_numel: " + std::string(m ? m : "NULL"));
    return R(OK);
  });
  add("accel_last_error", "a fresh context has none", OK, {}, [](Env& e) {
    accel_context* c = nullptr;
    const accel_options o = fixture_options();
    ok(accel_init(&o, &c), "accel_init");
    const char* m = accel_last_error(c);
    e.expect(m && std::string(m).empty(), "accel_last_error(fresh ctx) = " + std::string(m ? m : "NULL"));
    accel_destroy(c);
    return R(OK);
  });
  add("accel_last_error", "contexts are independent", OK, {}, [](Env& e) {
    World& b = e.other();
    accel_device_kind(e.a.ctx, nullptr);  // fails on ctx A only
    const char* mb = accel_last_error(b.ctx);
    e.expect(mb && std::string(mb).find("accel_device_kind") == std::string::npos,
             "ctx B shows ctx A's error: " + std::string(mb ? mb : "NULL"));
    return R(OK);
  });
}

void tensors() {
  const std::string fn = "accel_tensor_create";
  // create(dtype, shape, ndim, data): each refused with *out untouched
  auto create = [](int dt, std::vector<int64_t> shape, bool null_shape, bool null_data) {
    return [dt, shape, null_shape, null_data](Env& e) {
      std::vector<char> data(64, 0);
      accel_tensor* out;
      fill(out);
      R r = accel_tensor_create(raw<accel_dtype>(dt), null_shape ? nullptr : shape.data(), shape.size(),
                                null_data ? nullptr : data.data(), &out);
      e.untouched(out, "*out");
      return r;
    };
  };
  null_case(fn, "out", [](Env&) {
    const int64_t shape[] = {2};
    const float d[] = {1, 2};
    return R(accel_tensor_create(ACCEL_FLOAT32, shape, 1, d, nullptr));
  });
  for (int d : {42, -1}) add(fn, "dtype=" + str(d), ARG, {"dtype", str(d)}, create(d, {2}, false, false));
  add(fn, "ndim=17", ARG, {"ndim", "17"}, create(ACCEL_FLOAT32, std::vector<int64_t>(17, 1), false, false));
  add(fn, "shape=NULL with ndim 2", ARG, {"shape is NULL"}, create(ACCEL_FLOAT32, {2, 2}, true, false));
  add(fn, "shape={2,-1}", ARG, {"shape", "-1"}, create(ACCEL_FLOAT32, {2, -1}, false, false));
  add(fn, "shape={INT64_MIN}", ARG, {"shape", str(INT64_MIN)}, create(ACCEL_FLOAT32, {INT64_MIN}, false, false));
  for (std::vector<int64_t> s :
       {std::vector<int64_t>{INT64_MAX / 2, 4}, std::vector<int64_t>{INT64_MAX, INT64_MAX},
        std::vector<int64_t>{int64_t{1} << 32, int64_t{1} << 32}, std::vector<int64_t>{int64_t{1} << 61, 1, 2}})
    add(fn, "shape=" + json(s).dump() + " (byte size overflows)", ARG, {"shape"},
        create(ACCEL_FLOAT32, s, false, false));
  add(fn, "data=NULL with 6 elements", ARG, {"data is NULL"}, create(ACCEL_FLOAT32, {2, 3}, false, true));
  add(fn, "shape={1<<40} float32 (4 TiB)", ACCEL_ERR_OUT_OF_MEMORY, {"more than this machine can hold"}, [](Env& e) {
    // refused before allocating, also where the kernel overcommits (it hung there once)
    // data big enough to read should the allocation succeed: a reserved, never-touched mapping
    const size_t big = size_t{1} << 42;
    void* data = ::mmap(nullptr, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (data == MAP_FAILED) throw SetupError("cannot reserve 4 TiB of address space");
    const int64_t shape[] = {int64_t{1} << 40};
    return with_out<accel_tensor*>(
        e, [&](auto* out) { return R(accel_tensor_create(ACCEL_FLOAT32, shape, 1, data, out)); });
  });
  destroy_null("accel_tensor_destroy", [] { accel_tensor_destroy(nullptr); });

  // copy_to_host / copy_to_host_as on a float [2, 3] tensor (24 bytes)
  auto copy = [](bool as, int dtype, size_t bytes, bool null_tensor, bool null_dst) {
    return [=](Env& e) {
      accel_tensor* t = null_tensor ? nullptr : floats({2, 3});
      unsigned char dst[64];
      fill(dst);
      void* d = null_dst ? nullptr : dst;
      R r = as ? accel_tensor_copy_to_host_as(t, raw<accel_dtype>(dtype), d, bytes)
               : accel_tensor_copy_to_host(t, d, bytes);
      e.untouched(dst, "dst");
      return r;
    };
  };
  null_case("accel_tensor_copy_to_host", "tensor", copy(false, 0, 24, true, false));
  null_case("accel_tensor_copy_to_host", "dst", copy(false, 0, 24, false, true));
  for (size_t b : {size_t{23}, size_t{25}, size_t{0}, SIZE_MAX})
    add("accel_tensor_copy_to_host", "dst_bytes=" + str(b), ARG, {"dst_bytes", str(b)},
        copy(false, 0, b, false, false));
  null_case("accel_tensor_copy_to_host_as", "tensor", copy(true, ACCEL_FLOAT64, 48, true, false));
  null_case("accel_tensor_copy_to_host_as", "dst", copy(true, ACCEL_FLOAT64, 48, false, true));
  for (int d : {42, -1})
    add("accel_tensor_copy_to_host_as", "dtype=" + str(d), ARG, {"dtype", str(d)}, copy(true, d, 24, false, false));
  for (size_t b : {size_t{24}, size_t{47}, size_t{0}, SIZE_MAX})
    add("accel_tensor_copy_to_host_as", "dst_bytes=" + str(b) + " as float64", ARG, {"dst_bytes", str(b)},
        copy(true, ACCEL_FLOAT64, b, false, false));

  auto t23 = [](Env&) -> const accel_tensor* { return floats({2, 3}); };
  getter("accel_tensor_item", "tensor", accel_tensor_item, [](Env&) -> const accel_tensor* { return floats({}); });
  for (int64_t n : {3, 0})
    add("accel_tensor_item", "a " + str(n) + "-element tensor", ARG, {"tensor", str(n)}, [n](Env& e) {
      accel_tensor* t = floats({n});
      return with_out<double>(e, [&](auto* out) { return R(accel_tensor_item(t, out)); });
    });
  getter("accel_tensor_dtype", "tensor", accel_tensor_dtype, t23);
  getter("accel_tensor_ndim", "tensor", accel_tensor_ndim, t23);
  getter("accel_tensor_numel", "tensor", accel_tensor_numel, t23);
  getter("accel_tensor_nbytes", "tensor", accel_tensor_nbytes, t23);
  auto shape = [](bool null_tensor, bool null_out, size_t cap) {
    return [=](Env& e) {
      accel_tensor* t = null_tensor ? nullptr : floats({2, 3});
      int64_t out[4];
      fill(out);
      R r = accel_tensor_shape(t, null_out ? nullptr : out, cap);
      e.untouched(out, "out[]");
      return r;
    };
  };
  null_case("accel_tensor_shape", "tensor", shape(true, false, 4));
  null_case("accel_tensor_shape", "out", shape(false, true, 4));
  for (size_t c : {size_t{1}, size_t{0}})
    add("accel_tensor_shape", "capacity=" + str(c) + " for 2 dimensions", ARG, {"capacity", str(c)},
        shape(false, false, c));
}

void context() {
  options_init("accel_options_init", accel_options_init, ACCEL_OPTIONS_VERSION);
  null_case("accel_init", "out", [](Env&) {
    const accel_options o = fixture_options();
    return R(accel_init(&o, nullptr));
  });
  const auto t = target<accel_options>("accel_init", "opts", fixture_options, [](Env& e, const accel_options& o) {
    return with_out<accel_context*>(e, [&](auto* out) { return R(accel_init(&o, out)); });
  });
  t.versions();
  t.enums("mixed_precision", &accel_options::mixed_precision);
  t.enums("device", &accel_options::device);
  t.enums("strategy", &accel_options::strategy);
  t.field<int32_t>("gradient_accumulation_steps", &accel_options::gradient_accumulation_steps, {0, -1, INT32_MIN});
  t.field<int32_t>("device_index", &accel_options::device_index, {-1, INT32_MIN});
  t.field("loss_scale_init", &accel_options::loss_scale_init, plus(kNonFinite, {0, -1, -1e300}));
  t.field("loss_scale_growth_factor", &accel_options::loss_scale_growth_factor, plus(kNonFinite, {1, 0.5, 0, -2}));
  t.field("loss_scale_backoff_factor", &accel_options::loss_scale_backoff_factor, plus(kNonFinite, {0, 1, -0.5, 1.5}));
  t.field<int32_t>("loss_scale_growth_interval", &accel_options::loss_scale_growth_interval, {0, -1, INT32_MIN});
  t.field<int32_t>("num_threads", &accel_options::num_threads, {-1, 4097, INT32_MAX, INT32_MIN});
  t.field<int64_t>("bucket_bytes", &accel_options::bucket_bytes, {0, -1, INT64_MIN});
  t.enums("backend", &accel_options::backend);
  t.enums("offload", &accel_options::offload);
  t.bad("offload=PARAMETERS without ZeRO-3", {"offload", "only ZeRO-3"},
        [](accel_options& o) { o.offload = ACCEL_OFFLOAD_PARAMETERS; });
  t.field("timeout_seconds", &accel_options::timeout_seconds, plus(kNonFinite, {-1, -1e300}));
  Case& cuda = t.bad(
      "device=CUDA", {"device"}, [](accel_options& o) { o.device = ACCEL_DEVICE_CUDA; }, UNSUPPORTED);
  cuda.also = {OK};  // a machine with CUDA accepts it
  // the environment accel_init reads: each bad value named (the first of each list), nothing
  // joined or created
  const std::vector<std::vector<std::pair<const char*, const char*>>> bad_envs = {
      {{"ACCEL_STRATEGY", "bogus"}},
      {{"ACCEL_BACKEND", "carrier-pigeon"}},
      {{"ACCEL_TIMEOUT", "soon"}},
      {{"ACCEL_TIMEOUT", "-3"}},
      {{"ACCEL_MIXED_PRECISION", "fp8"}},
      {{"ACCEL_OFFLOAD", "nvme"}},
      {{"RANK", "3"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}},
      {{"WORLD_SIZE", "two"}, {"RANK", "0"}},
  };
  for (const auto& vars : bad_envs) {
    std::string name;
    for (const auto& [k, v] : vars) name += (name.empty() ? "" : " ") + std::string(k) + "=" + v;
    const auto& named = vars.front();  // the variable the message must name
    add("accel_init", name, ARG, {named.first, named.second}, [vars](Env& e) {
      for (const auto& [k, v] : vars) ::setenv(k, v, 1);
      const accel_options o = fixture_options();
      accel_context* out;
      fill(out);
      R r = accel_init(&o, &out);
      for (const auto& [k, v] : vars) ::unsetenv(k);
      e.untouched(out, "*out");
      return r;
    });
  }
  destroy_null("accel_destroy", [] { accel_destroy(nullptr); });
  auto ctx = [](Env& e) -> const accel_context* { return e.a.ctx; };
  getter("accel_device_kind", "ctx", accel_device_kind, ctx);
  getter("accel_mixed_precision", "ctx", accel_mixed_precision, ctx);
}

void models() {
  options_init("accel_mlp_options_init", accel_mlp_options_init, ACCEL_MLP_OPTIONS_VERSION);
  const std::string fn = "accel_model_create_mlp";
  auto mlp_init = [] {
    accel_mlp_options o = ACCEL_MLP_OPTIONS_INIT;
    o.layer_sizes = kSizes;
    o.num_layer_sizes = 3;
    return o;
  };
  null_case(fn, "ctx", [mlp_init](Env& e) {
    const accel_mlp_options o = mlp_init();
    return with_out<accel_model*>(e, [&](auto* out) { return R(accel_model_create_mlp(nullptr, &o, out)); });
  });
  null_case(fn, "opts", [](Env& e) {
    return with_out<accel_model*>(e,
                                  [&](auto* out) { return R(accel_model_create_mlp(e.a.ctx, nullptr, out), e.a.ctx); });
  });
  null_case(fn, "out", [mlp_init](Env& e) {
    const accel_mlp_options o = mlp_init();
    return R(accel_model_create_mlp(e.a.ctx, &o, nullptr), e.a.ctx);
  });
  const auto t = target<accel_mlp_options>(fn, "opts", mlp_init, [](Env& e, const accel_mlp_options& o) {
    return with_out<accel_model*>(e, [&](auto* out) { return R(accel_model_create_mlp(e.a.ctx, &o, out), e.a.ctx); });
  });
  t.versions();
  t.enums("activation", &accel_mlp_options::activation);
  t.field("dropout", &accel_mlp_options::dropout, plus(kNonFinite, {-0.1, 1, 1.5}));
  t.field<size_t>("num_layer_sizes", &accel_mlp_options::num_layer_sizes, {0, 1});
  t.bad("layer_sizes=NULL", {"layer_sizes is NULL"}, [](accel_mlp_options& o) { o.layer_sizes = nullptr; });
  static const int64_t zero[] = {4, 0, 3}, negative[] = {4, -1, 3}, min[] = {INT64_MIN, 3};
  static const int64_t huge[] = {int64_t{1} << 40, int64_t{1} << 40}, max[] = {INT64_MAX, 2};
  struct Sizes {
    const char* what;
    const int64_t* sizes;
    size_t n;
    std::string value;
  };
  for (const Sizes& s :
       {Sizes{"{4,0,3}", zero, 3, "0"}, Sizes{"{4,-1,3}", negative, 3, "-1"},
        Sizes{"{INT64_MIN,3}", min, 2, str(INT64_MIN)}, Sizes{"{1<<40,1<<40} (overflows)", huge, 2, ""},
        Sizes{"{INT64_MAX,2} (overflows)", max, 2, ""}}) {
    std::vector<std::string> needles = {"layer_sizes"};
    if (!s.value.empty()) needles.push_back(s.value);
    t.bad(std::string("layer_sizes=") + s.what, needles, [s](accel_mlp_options& o) {
      o.layer_sizes = s.sizes;
      o.num_layer_sizes = s.n;
    });
  }

  // TorchScript
  const std::string ts = "accel_model_load_torchscript";
  auto load = [](const char* path, bool null_ctx, bool null_out) {
    return [=](Env& e) {
      write_file("notes.pt", "this is not a TorchScript module\n");
      accel_model* out;
      fill(out);
      accel_context* c = null_ctx ? nullptr : e.a.ctx;
      R r(accel_model_load_torchscript(c, path, null_out ? nullptr : &out), c);
      e.untouched(out, "*out");
      return r;
    };
  };
  null_case(ts, "ctx", load("notes.pt", true, false));
  null_case(ts, "path", load(nullptr, false, false));
  null_case(ts, "out", load("notes.pt", false, true));
  add(ts, "path=\"\"", ARG, {"path"}, load("", false, false));
  add(ts, "a missing file", IO, {"missing.pt"}, load("missing.pt", false, false));
  add(ts, "a text file", FORMAT, {"notes.pt"}, load("notes.pt", false, false));
  destroy_null("accel_model_destroy", [] { accel_model_destroy(nullptr); });

  // forward
  const std::string fw = "accel_model_forward";
  // forward(ctx?, model?, inputs built by `in`, num, out?)
  using Inputs = std::function<std::vector<accel_tensor*>(Env&)>;
  auto forward = [](int ctx_kind, int model_kind, Inputs in, size_t num, bool null_inputs, bool null_out) {
    return [=](Env& e) {
      std::vector<accel_tensor*> ins = in(e);
      accel_context* c = ctx_kind ? e.a.ctx : nullptr;
      accel_model* m = model_kind == 0 ? nullptr : model_kind == 1 ? e.a.model : e.other().model;
      return with_out<accel_tensor*>(e, [&](auto* out) {
        return R(accel_model_forward(c, m, null_inputs ? nullptr : ins.data(), num, null_out ? nullptr : out), c);
      });
    };
  };
  Inputs good = [](Env&) { return std::vector<accel_tensor*>{floats({4, 4})}; };
  null_case(fw, "ctx", forward(0, 1, good, 1, false, false));
  null_case(fw, "model", forward(1, 0, good, 1, false, false));
  null_case(fw, "out", forward(1, 1, good, 1, false, true));
  null_case(fw, "inputs", forward(1, 1, good, 1, true, false));
  null_case(fw, "inputs[0]",
            forward(
                1, 1, [](Env&) { return std::vector<accel_tensor*>{nullptr}; }, 1, false, false));
  add(fw, "num_inputs=0", ARG, {"num_inputs", "0"}, forward(1, 1, good, 0, false, false));
  add(fw, "num_inputs=2", ARG, {"num_inputs", "2"},
      forward(
          1, 1,
          [](Env&) {
            return std::vector<accel_tensor*>{floats({4, 4}), floats({4, 4})};
          },
          2, false, false));
  add(fw, "inputs[0] float [4,5] for 4 features", ARG, {"inputs[0]"},
      forward(
          1, 1,
          [](Env&) {
            return std::vector<accel_tensor*>{floats({4, 5})};
          },
          1, false, false));
  add(fw, "inputs[0] float [4] (1-D)", ARG, {"inputs[0]"},
      forward(
          1, 1, [](Env&) { return std::vector<accel_tensor*>{floats({4})}; }, 1, false, false));
  add(fw, "inputs[0] int64 [4,4]", ARG, {"inputs[0]"},
      forward(
          1, 1,
          [](Env&) {
            std::vector<int64_t> d(16, 1);
            return std::vector<accel_tensor*>{tensor(ACCEL_INT64, {4, 4}, d.data())};
          },
          1, false, false));
  add(fw, "model of another context", ARG, {"another context"}, forward(1, 2, good, 1, false, false));

  // set_training, num_parameters, parameter_name, parameter
  const std::string st = "accel_model_set_training";
  null_case(st, "ctx", [](Env& e) { return R(accel_model_set_training(nullptr, e.a.model, 0)); });
  null_case(st, "model", [](Env& e) { return R(accel_model_set_training(e.a.ctx, nullptr, 0), e.a.ctx); });
  add(st, "model of another context", ARG, {"another context"},
      [](Env& e) { return R(accel_model_set_training(e.a.ctx, e.other().model, 0), e.a.ctx); });

  const std::string np = "accel_model_num_parameters";
  null_case(np, "model", [](Env& e) {
    size_t n;
    int64_t el;
    fill(n);
    fill(el);
    R r = accel_model_num_parameters(nullptr, &n, &el);
    e.untouched(n, "*out_tensors");
    e.untouched(el, "*out_elements");
    return r;
  });
  add(np, "out_tensors=NULL and out_elements=NULL", ARG, {"out_tensors"},
      [](Env& e) { return R(accel_model_num_parameters(e.a.model, nullptr, nullptr)); });

  const std::string pn = "accel_model_parameter_name";
  null_case(pn, "model", [](Env& e) {
    return with_out<const char*>(e, [&](auto* out) { return R(accel_model_parameter_name(nullptr, 0, out)); });
  });
  null_case(pn, "out", [](Env& e) { return R(accel_model_parameter_name(e.a.model, 0, nullptr)); });
  for (size_t i : {kParamTensors, SIZE_MAX})
    add(pn, "index=" + str(i), ARG, {"index", str(i)}, [i](Env& e) {
      return with_out<const char*>(e, [&](auto* out) { return R(accel_model_parameter_name(e.a.model, i, out)); });
    });

  const std::string pa = "accel_model_parameter";
  auto param = [](int ctx_kind, int model_kind, size_t index, bool null_out) {
    return [=](Env& e) {
      accel_context* c = ctx_kind ? e.a.ctx : nullptr;
      accel_model* m = model_kind == 0 ? nullptr : model_kind == 1 ? e.a.model : e.other().model;
      return with_out<accel_tensor*>(
          e, [&](auto* out) { return R(accel_model_parameter(c, m, index, null_out ? nullptr : out), c); });
    };
  };
  null_case(pa, "ctx", param(0, 1, 0, false));
  null_case(pa, "model", param(1, 0, 0, false));
  null_case(pa, "out", param(1, 1, 0, true));
  for (size_t i : {kParamTensors, SIZE_MAX}) add(pa, "index=" + str(i), ARG, {"index", str(i)}, param(1, 1, i, false));
  add(pa, "model of another context", ARG, {"another context"}, param(1, 2, 0, false));

  // parameter_grad: the model is prepared, no backward has run: no gradients to read
  const std::string pg = "accel_model_parameter_grad";
  auto grad = [](int ctx_kind, int model_kind, size_t index, bool null_out) {
    return [=](Env& e) {
      accel_context* c = ctx_kind ? e.a.ctx : nullptr;
      accel_model* m = model_kind == 0 ? nullptr : model_kind == 1 ? e.a.model : e.other().model;
      return with_out<accel_tensor*>(
          e, [&](auto* out) { return R(accel_model_parameter_grad(c, m, index, null_out ? nullptr : out), c); });
    };
  };
  null_case(pg, "ctx", grad(0, 1, 0, false));
  null_case(pg, "model", grad(1, 0, 0, false));
  null_case(pg, "out", grad(1, 1, 0, true));
  add(pg, "model of another context", ARG, {"another context"}, grad(1, 2, 0, false));
  add(pg, "before any backward", STATE, {"no gradients", "accel_backward"}, grad(1, 1, 0, false));
  add(pg, "index=SIZE_MAX", ARG, {"index", "out of range"}, grad(1, 1, SIZE_MAX, false));

  // save_model: paths it must refuse, and leave as they were
  const std::string sm = "accel_save_model";
  null_case(sm, "ctx", [](Env& e) { return R(accel_save_model(nullptr, e.a.model, "m.safetensors")); });
  null_case(sm, "model", [](Env& e) { return R(accel_save_model(e.a.ctx, nullptr, "m.safetensors"), e.a.ctx); });
  null_case(sm, "path", [](Env& e) { return R(accel_save_model(e.a.ctx, e.a.model, nullptr), e.a.ctx); });
  add(sm, "model of another context", ARG, {"another context"}, [](Env& e) {
    R r(accel_save_model(e.a.ctx, e.other().model, "m.safetensors"), e.a.ctx);
    e.expect(!fs::exists("m.safetensors"), "m.safetensors was written");
    return r;
  });
  add(sm, "path=\"\"", ARG, {"path"}, [](Env& e) { return R(accel_save_model(e.a.ctx, e.a.model, ""), e.a.ctx); });
  add(sm, "path=an existing directory", ARG, {"mydir"}, [](Env& e) {
    fs::create_directory("mydir");
    write_file("mydir/user.txt", kNotes);
    R r(accel_save_model(e.a.ctx, e.a.model, "mydir"), e.a.ctx);
    e.expect(fs::is_directory("mydir") && read_file("mydir/user.txt") == kNotes, "mydir/user.txt was changed");
    return r;
  });
  for (const char* link : {"link_dir", "link_file"})
    add(sm, std::string("path=a symbolic link (") + link + ")", ARG, {"symbolic link"}, [link](Env& e) {
      make_links();
      R r(accel_save_model(e.a.ctx, e.a.model, link), e.a.ctx);
      e.expect(links_intact(), "the link or its target was changed");
      return r;
    });
  add(sm, "path=a character device", ARG, {"device"}, [](Env& e) {
    const std::string dev = device_path();
    R r(accel_save_model(e.a.ctx, e.a.model, dev.c_str()), e.a.ctx);
    e.expect(is_char_device(dev), dev + " is no longer a character device");
    return r;
  });
  add(sm, "path=\"notes.txt\" (a user's text file)", ARG, {"notes.txt"}, [](Env& e) {
    write_file("notes.txt", kNotes);
    R r(accel_save_model(e.a.ctx, e.a.model, "notes.txt"), e.a.ctx);
    e.expect(fs::is_regular_file(fs::symlink_status("notes.txt")) && read_file("notes.txt") == kNotes,
             "notes.txt was changed");
    return r;
  });
  add(sm, "path=\"mlp.pt\" (TorchScript of the built-in MLP)", UNSUPPORTED, {}, [](Env& e) {
    R r(accel_save_model(e.a.ctx, e.a.model, "mlp.pt"), e.a.ctx);
    e.expect(!fs::exists("mlp.pt"), "mlp.pt was written");
    return r;
  });
  add(sm, "twice to model.safetensors (replacing is allowed)", OK, {}, [](Env& e) {
    ok(accel_save_model(e.a.ctx, e.a.model, "model.safetensors"), "the first accel_save_model");
    R r(accel_save_model(e.a.ctx, e.a.model, "model.safetensors"), e.a.ctx);
    e.expect(fs::is_regular_file("model.safetensors"), "model.safetensors is missing");
    return r;
  });
}

void losses() {
  // loss(ctx?, a, b, out?) with a and b built by `make`
  using Pair = std::function<std::pair<accel_tensor*, accel_tensor*>(Env&)>;
  for (const std::string fn : {"accel_loss_cross_entropy", "accel_loss_mse"}) {
    const bool ce = fn == "accel_loss_cross_entropy";
    const char* a_name = ce ? "logits" : "input";
    const char* b_name = ce ? "targets" : "target";
    auto loss = [ce](bool null_ctx, bool null_out, Pair make) {
      return [=](Env& e) {
        auto [a, b] = make(e);
        accel_context* c = null_ctx ? nullptr : e.a.ctx;
        accel_tensor* out;
        fill(out);
        R r(ce ? accel_loss_cross_entropy(c, a, b, null_out ? nullptr : &out)
               : accel_loss_mse(c, a, b, null_out ? nullptr : &out),
            c);
        e.untouched(out, "*out");
        return r;
      };
    };
    auto pair = [](std::vector<int64_t> a_shape, std::function<accel_tensor*()> b) -> Pair {
      return [a_shape, b](Env&) { return std::make_pair(floats(a_shape), b()); };
    };
    const Pair good = ce ? pair({4, 3},
                                [] {
                                  return longs({0, 1, 2, 0});
                                })
                         : pair({4, 3}, [] {
                             return floats({4, 3});
                           });
    null_case(fn, "ctx", loss(true, false, good));
    null_case(fn, "out", loss(false, true, good));
    null_case(fn, a_name, loss(false, false, [good](Env& e) { return std::make_pair(nullptr, good(e).second); }));
    null_case(fn, b_name, loss(false, false, [good](Env& e) { return std::make_pair(good(e).first, nullptr); }));
    if (ce) {
      add(fn, "targets [3] for a batch of 4", ARG, {"targets"}, loss(false, false, pair({4, 3}, [] {
                                                                       return longs({0, 1, 2});
                                                                     })));
      add(fn, "targets float", ARG, {"targets"}, loss(false, false, pair({4, 3}, [] { return floats({4}); })));
      add(fn, "targets [4,1]", ARG, {"targets"}, loss(false, false, pair({4, 3}, [] {
                                                        std::vector<int64_t> d = {0, 1, 2, 0};
                                                        return tensor(ACCEL_INT64, {4, 1}, d.data());
                                                      })));
      for (int64_t cls : {7, 3, -1})
        add(fn, "class index " + str(cls) + " of 3", ARG, {"targets", str(cls)}, loss(false, false, pair({4, 3}, [cls] {
                                                                                        return longs({0, cls, 1, 2});
                                                                                      })));
      add(fn, "logits 1-D", ARG, {"logits"}, loss(false, false, pair({3}, [] { return longs({0}); })));
      add(fn, "logits of another context's model", ARG, {"another context"}, loss(false, false, [](Env& e) {
            Batch b = forward_loss(e.other());
            return std::make_pair(b.logits, longs({0, 1, 2, 0}));
          }));
    } else {
      add(fn, "target [4,2] for input [4,3]", ARG, {"target"}, loss(false, false, pair({4, 3}, [] {
                                                                      return floats({4, 2});
                                                                    })));
      add(fn, "target int64", ARG, {"target"}, loss(false, false, pair({4}, [] { return longs({0, 1, 2, 0}); })));
    }
  }
}

namespace {
template <class O>
void optimizer_cases(const std::string& fn,
                     accel_status (*create)(accel_context*, accel_model*, const O*, accel_optimizer**), O defaults) {
  auto call = [create](int ctx_kind, int model_kind, bool null_out) {
    return [=](Env& e) {
      accel_context* c = ctx_kind ? e.a.ctx : nullptr;
      accel_model* m = model_kind == 0 ? nullptr : model_kind == 1 ? e.a.model : e.other().model;
      return with_out<accel_optimizer*>(
          e, [&](auto* out) { return R(create(c, m, nullptr, null_out ? nullptr : out), c); });
    };
  };
  null_case(fn, "ctx", call(0, 1, false));
  null_case(fn, "model", call(1, 0, false));
  null_case(fn, "out", call(1, 1, true));
  add(fn, "model of another context", ARG, {"another context"}, call(1, 2, false));
  const auto t = target<O>(
      fn, "opts", [defaults] { return defaults; },
      [create](Env& e, const O& o) {
        return with_out<accel_optimizer*>(e,
                                          [&](auto* out) { return R(create(e.a.ctx, e.a.model, &o, out), e.a.ctx); });
      });
  t.versions();
  t.field("lr", &O::lr, plus(kNonFinite, {0, -1}));
  t.field("weight_decay", &O::weight_decay, plus(kNonFinite, {-1, -1e-300}));
  if constexpr (std::is_same_v<O, accel_sgd_options>) {
    t.field("momentum", &O::momentum, plus(kNonFinite, {-1}));
    t.field("dampening", &O::dampening, plus(kNonFinite, {-0.5, 1.5}));
    t.bad("nesterov=1 with momentum 0", {"nesterov"}, [](O& o) { o.nesterov = 1; });
    t.bad("nesterov=1 with dampening 0.5", {"nesterov"}, [](O& o) {
      o.nesterov = 1;
      o.momentum = 0.9;
      o.dampening = 0.5;
    });
  } else {
    t.field("beta1", &O::beta1, plus(kNonFinite, {-0.1, 1, 1.5}));
    t.field("beta2", &O::beta2, plus(kNonFinite, {-0.1, 1, 1.5}));
    t.field("eps", &O::eps, plus(kNonFinite, {0, -1}));
  }
}

}  // namespace
void optimizers() {
  options_init("accel_sgd_options_init", accel_sgd_options_init, ACCEL_SGD_OPTIONS_VERSION);
  options_init("accel_adamw_options_init", accel_adamw_options_init, ACCEL_ADAMW_OPTIONS_VERSION);
  options_init("accel_lamb_options_init", accel_lamb_options_init, ACCEL_LAMB_OPTIONS_VERSION);
  optimizer_cases<accel_sgd_options>("accel_optimizer_create_sgd", accel_optimizer_create_sgd, ACCEL_SGD_OPTIONS_INIT);
  optimizer_cases<accel_adamw_options>("accel_optimizer_create_adamw", accel_optimizer_create_adamw,
                                       ACCEL_ADAMW_OPTIONS_INIT);
  optimizer_cases<accel_lamb_options>("accel_optimizer_create_lamb", accel_optimizer_create_lamb,
                                      ACCEL_LAMB_OPTIONS_INIT);
  // Adafactor: the fields' domains checked from a configuration with a manual lr
  options_init("accel_adafactor_options_init", accel_adafactor_options_init, ACCEL_ADAFACTOR_OPTIONS_VERSION);
  {
    const std::string fn = "accel_optimizer_create_adafactor";
    auto call = [](int ctx_kind, int model_kind, bool null_out) {
      return [=](Env& e) {
        accel_context* c = ctx_kind ? e.a.ctx : nullptr;
        accel_model* m = model_kind == 0 ? nullptr : model_kind == 1 ? e.a.model : e.other().model;
        return with_out<accel_optimizer*>(
            e, [&](auto* out) { return R(accel_optimizer_create_adafactor(c, m, nullptr, null_out ? nullptr : out), c); });
      };
    };
    null_case(fn, "ctx", call(0, 1, false));
    null_case(fn, "model", call(1, 0, false));
    null_case(fn, "out", call(1, 1, true));
    add(fn, "model of another context", ARG, {"another context"}, call(1, 2, false));
    using O = accel_adafactor_options;
    const auto t = target<O>(
        fn, "opts",
        [] {
          O o = ACCEL_ADAFACTOR_OPTIONS_INIT;
          o.lr = 1e-2;
          o.relative_step = 0;
          return o;
        },
        [](Env& e, const O& o) {
          return with_out<accel_optimizer*>(
              e, [&](auto* out) { return R(accel_optimizer_create_adafactor(e.a.ctx, e.a.model, &o, out), e.a.ctx); });
        });
    t.versions();
    t.field("lr", &O::lr, plus(kNonFinite, {0, -1}));
    t.field("eps1", &O::eps1, plus(kNonFinite, {-1}));
    t.field("eps2", &O::eps2, plus(kNonFinite, {-1}));
    t.field("clip_threshold", &O::clip_threshold, plus(kNonFinite, {0, -1}));
    t.field("decay_rate", &O::decay_rate, plus(kNonFinite, {0, 0.5}));
    t.field("beta1", &O::beta1, plus(kNonFinite, {-0.1, 1, 1.5}));
    t.field("weight_decay", &O::weight_decay, plus(kNonFinite, {-1}));
    t.bad("lr=0.01 with relative_step", {"relative_step", "lr"}, [](O& o) { o.relative_step = 1; });
    t.bad("warmup_init without relative_step", {"warmup_init"}, [](O& o) { o.warmup_init = 1; });
  }
  destroy_null("accel_optimizer_destroy", [] { accel_optimizer_destroy(nullptr); });
  getter("accel_optimizer_lr", "optimizer", accel_optimizer_lr,
         [](Env& e) -> const accel_optimizer* { return e.a.opt; });

  options_init("accel_scheduler_options_init", accel_scheduler_options_init, ACCEL_SCHEDULER_OPTIONS_VERSION);
  const std::string fn = "accel_scheduler_create";
  auto linear = [] {
    accel_scheduler_options o = ACCEL_SCHEDULER_OPTIONS_INIT;
    o.kind = ACCEL_SCHEDULE_LINEAR;
    o.warmup_steps = 1;
    o.total_steps = 100;
    return o;
  };
  auto call = [linear](int ctx_kind, int opt_kind, bool null_opts, bool null_out) {
    return [=](Env& e) {
      const accel_scheduler_options o = linear();
      accel_context* c = ctx_kind ? e.a.ctx : nullptr;
      accel_optimizer* p = opt_kind == 0 ? nullptr : opt_kind == 1 ? e.a.opt : e.other().opt;
      return with_out<accel_scheduler*>(e, [&](auto* out) {
        return R(accel_scheduler_create(c, p, null_opts ? nullptr : &o, null_out ? nullptr : out), c);
      });
    };
  };
  null_case(fn, "ctx", call(0, 1, false, false));
  null_case(fn, "optimizer", call(1, 0, false, false));
  null_case(fn, "opts", call(1, 1, true, false));
  null_case(fn, "out", call(1, 1, false, true));
  add(fn, "optimizer of another context", ARG, {"another context"}, call(1, 2, false, false));
  const auto t = target<accel_scheduler_options>(fn, "opts", linear, [](Env& e, const accel_scheduler_options& o) {
    return with_out<accel_scheduler*>(
        e, [&](auto* out) { return R(accel_scheduler_create(e.a.ctx, e.a.opt, &o, out), e.a.ctx); });
  });
  t.versions();
  t.enums("kind", &accel_scheduler_options::kind);
  t.field<int64_t>("warmup_steps", &accel_scheduler_options::warmup_steps, {-1, INT64_MIN});
  t.field<int64_t>("total_steps", &accel_scheduler_options::total_steps, {1, 0, -1, INT64_MIN});  // warmup is 1
  t.bad("total_steps=0 with COSINE, warmup 0", {"total_steps", "0"}, [](accel_scheduler_options& o) {
    o.kind = ACCEL_SCHEDULE_COSINE;
    o.warmup_steps = 0;
    o.total_steps = 0;
  });
  t.field("min_lr_ratio", &accel_scheduler_options::min_lr_ratio, plus(kNonFinite, {-0.1, 1.5}));
  destroy_null("accel_scheduler_destroy", [] { accel_scheduler_destroy(nullptr); });
  getter("accel_scheduler_steps", "scheduler", accel_scheduler_steps,
         [](Env& e) -> const accel_scheduler* { return e.a.sched; });
}

void data() {
  options_init("accel_dataloader_options_init", accel_dataloader_options_init, ACCEL_DATALOADER_OPTIONS_VERSION);
  const std::string fn = "accel_dataloader_create";
  auto dl_init = [] {
    accel_dataloader_options o = ACCEL_DATALOADER_OPTIONS_INIT;
    o.batch_size = 4;
    return o;
  };
  using Data = std::function<std::pair<accel_tensor*, accel_tensor*>(Env&)>;
  auto call = [dl_init](bool null_ctx, bool null_opts, bool null_out, Data d) {
    return [=](Env& e) {
      const accel_dataloader_options o = dl_init();
      auto [x, y] = d(e);
      accel_context* c = null_ctx ? nullptr : e.a.ctx;
      return with_out<accel_dataloader*>(e, [&](auto* out) {
        return R(accel_dataloader_create(c, x, y, null_opts ? nullptr : &o, null_out ? nullptr : out), c);
      });
    };
  };
  const Data good = [](Env& e) { return std::make_pair(e.a.x, e.a.y); };
  null_case(fn, "ctx", call(true, false, false, good));
  null_case(fn, "inputs", call(false, false, false, [](Env& e) { return std::make_pair(nullptr, e.a.y); }));
  null_case(fn, "opts", call(false, true, false, good));
  null_case(fn, "out", call(false, false, true, good));
  add(fn, "targets [15] for inputs [16,4]", ARG, {"targets"},
      call(false, false, false, [](Env& e) { return std::make_pair(e.a.x, longs(std::vector<int64_t>(15, 0))); }));
  add(fn, "inputs a scalar", ARG, {"inputs"},
      call(false, false, false, [](Env&) { return std::make_pair(floats({}), static_cast<accel_tensor*>(nullptr)); }));
  add(fn, "inputs [0,4] (no samples)", ARG, {"inputs"}, call(false, false, false, [](Env&) {
        return std::make_pair(floats({0, 4}), tensor(ACCEL_INT64, {0}, nullptr));
      }));
  const auto t = target<accel_dataloader_options>(fn, "opts", dl_init, [](Env& e, const accel_dataloader_options& o) {
    return with_out<accel_dataloader*>(
        e, [&](auto* out) { return R(accel_dataloader_create(e.a.ctx, e.a.x, e.a.y, &o, out), e.a.ctx); });
  });
  t.versions();
  t.field<int64_t>("batch_size", &accel_dataloader_options::batch_size, {0, -1, INT64_MIN});
  t.bad("iterable with shuffle", {"shuffle", "iterable"}, [](accel_dataloader_options& o) {
    o.iterable = 1;
    o.shuffle = 1;
  });
  destroy_null("accel_dataloader_destroy", [] { accel_dataloader_destroy(nullptr); });

  const std::string nx = "accel_dataloader_next";
  auto next = [](int ctx_kind, int loader_kind, bool null_inputs) {
    return [=](Env& e) {
      accel_context* c = ctx_kind ? e.a.ctx : nullptr;
      accel_dataloader* l = loader_kind == 0 ? nullptr : loader_kind == 1 ? e.a.loader : e.other().loader;
      accel_tensor *x, *y;
      fill(x);
      fill(y);
      R r(accel_dataloader_next(c, l, null_inputs ? nullptr : &x, &y), c);
      e.untouched(x, "*out_inputs");
      e.untouched(y, "*out_targets");
      return r;
    };
  };
  null_case(nx, "ctx", next(0, 1, false));
  null_case(nx, "loader", next(1, 0, false));
  null_case(nx, "out_inputs", next(1, 1, true));
  add(nx, "loader of another context", ARG, {"another context"}, next(1, 2, false));
  auto loader = [](Env& e) -> const accel_dataloader* { return e.a.loader; };
  getter("accel_dataloader_epoch", "loader", accel_dataloader_epoch, loader);
  getter("accel_dataloader_num_batches", "loader", accel_dataloader_num_batches, loader);
  const std::string se = "accel_dataloader_set_epoch";
  null_case(se, "loader", [](Env&) { return R(accel_dataloader_set_epoch(nullptr, 1)); });
  for (int64_t ep : {int64_t{-1}, INT64_MIN})
    add(se, "epoch=" + str(ep), ARG, {"epoch", str(ep)}, [ep](Env& e) {
      ok(accel_dataloader_set_epoch(e.a.loader, 2), "accel_dataloader_set_epoch(2)");
      R r = accel_dataloader_set_epoch(e.a.loader, ep);
      int64_t now = -7;
      ok(accel_dataloader_epoch(e.a.loader, &now), "accel_dataloader_epoch");
      e.expect(now == 2, "the epoch changed to " + str(now));
      return r;
    });
}

}  // namespace misuse
