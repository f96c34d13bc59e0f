// Misuse cases: training calls, process utilities and collectives, the simulator, checkpoints
// (files that are well-formed but lie).
#include "common.h"

namespace misuse {

void training() {
  // prepare: objects from another context, a second model or optimizer
  const std::string pr = "accel_prepare";
  null_case(pr, "ctx", [](Env& e) { return R(accel_prepare(nullptr, e.a.model, e.a.opt, e.a.sched, e.a.loader)); });
  add(pr, "model of another context", ARG, {"another context"},
      [](Env& e) { return R(accel_prepare(e.a.ctx, e.other().model, nullptr, nullptr, nullptr), e.a.ctx); });
  add(pr, "optimizer of another context", ARG, {"another context"},
      [](Env& e) { return R(accel_prepare(e.a.ctx, nullptr, e.other().opt, nullptr, nullptr), e.a.ctx); });
  add(pr, "scheduler of another context", ARG, {"another context"},
      [](Env& e) { return R(accel_prepare(e.a.ctx, nullptr, nullptr, e.other().sched, nullptr), e.a.ctx); });
  add(pr, "loader of another context", ARG, {"another context"},
      [](Env& e) { return R(accel_prepare(e.a.ctx, nullptr, nullptr, nullptr, e.other().loader), e.a.ctx); });
  add(pr, "a second model on a prepared context", STATE, {"model"}, [](Env& e) {
    accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
    m.layer_sizes = kSizes;
    m.num_layer_sizes = 3;
    accel_model* m2 = nullptr;
    ok(accel_model_create_mlp(e.a.ctx, &m, &m2), "accel_model_create_mlp");
    return R(accel_prepare(e.a.ctx, m2, nullptr, nullptr, nullptr), e.a.ctx);
  });
  add(pr, "a second optimizer on a prepared context", STATE, {"optimizer"}, [](Env& e) {
    accel_optimizer* o2 = nullptr;
    ok(accel_optimizer_create_adamw(e.a.ctx, e.a.model, nullptr, &o2), "accel_optimizer_create_adamw");
    return R(accel_prepare(e.a.ctx, nullptr, o2, nullptr, nullptr), e.a.ctx);
  });

  // backward
  const std::string bw = "accel_backward";
  null_case(bw, "ctx", [](Env& e) { return R(accel_backward(nullptr, host_forward_loss(e.a).loss)); });
  null_case(bw, "loss", [](Env& e) { return R(accel_backward(e.a.ctx, nullptr), e.a.ctx); });
  add(bw, "before accel_prepare", STATE, {}, [](Env&) {
    World f = make_world(false);
    return R(accel_backward(f.ctx, host_forward_loss(f).loss), f.ctx);
  });
  add(bw, "twice through the same loss", STATE, {"already"}, [](Env& e) {
    Batch b = forward_loss(e.a);
    ok(accel_backward(e.a.ctx, b.loss), "the first accel_backward");
    return R(accel_backward(e.a.ctx, b.loss), e.a.ctx);
  });
  add(bw, "a non-scalar loss (the logits)", ARG, {"loss"},
      [](Env& e) { return R(accel_backward(e.a.ctx, forward_loss(e.a).logits), e.a.ctx); });
  add(bw, "a loss with no graph (a host tensor)", ARG, {"loss"},
      [](Env& e) { return R(accel_backward(e.a.ctx, floats({}, 1.0f)), e.a.ctx); });
  add(bw, "a loss of another context", ARG, {"another context"},
      [](Env& e) { return R(accel_backward(e.a.ctx, forward_loss(e.other()).loss), e.a.ctx); });
  add(bw, "a NaN loss (fp32)", ACCEL_ERR_NON_FINITE, {"loss"},
      [](Env& e) { return R(accel_backward(e.a.ctx, host_forward_loss(e.a, std::nanf("")).loss), e.a.ctx); });

  auto ctx = [](Env& e) -> const accel_context* { return e.a.ctx; };
  getter("accel_sync_gradients", "ctx", accel_sync_gradients, ctx);
  getter("accel_loss_scale", "ctx", accel_loss_scale, ctx);

  const std::string cg = "accel_clip_grad_norm";
  null_case(cg, "ctx", [](Env& e) {
    return with_out<double>(e, [&](auto* out) { return R(accel_clip_grad_norm(nullptr, 1.0, out)); });
  });
  for (double v : plus(kNonFinite, {-1, 0, -1e-300}))
    add(cg, "max_norm=" + str(v), ARG, {"max_norm", str(v)}, [v](Env& e) {
      Batch b = forward_loss(e.a);  // gradients to clip
      ok(accel_backward(e.a.ctx, b.loss), "accel_backward");
      return with_out<double>(e, [&](auto* out) { return R(accel_clip_grad_norm(e.a.ctx, v, out), e.a.ctx); });
    });
  add(cg, "before accel_prepare", STATE, {}, [](Env& e) {
    World f = make_world(false);
    return with_out<double>(e, [&](auto* out) { return R(accel_clip_grad_norm(f.ctx, 1.0, out), f.ctx); });
  });

  const std::string sp = "accel_step";
  null_case(sp, "ctx", [](Env& e) {
    return with_out<accel_step_result>(e, [&](auto* out) { return R(accel_step(nullptr, out)); });
  });
  add(sp, "before accel_prepare", STATE, {}, [](Env& e) {
    World f = make_world(false);
    return with_out<accel_step_result>(e, [&](auto* out) { return R(accel_step(f.ctx, out), f.ctx); });
  });
}

namespace {
// A rank function for the collective cases: the call it makes, from its rank's index.
using RankCall = accel_status (*)(accel_context*, int32_t rank);
accel_status run_rank_call(accel_context* ctx, void* user) {
  int32_t rank = -1;
  accel_status s = accel_process_index(ctx, &rank);
  return s != ACCEL_OK ? s : (*static_cast<RankCall*>(user))(ctx, rank);
}
// Runs `call` on each rank of a 2-rank simulated world (5 s timeout): accel_sim_run's status.
R in_world(RankCall call) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.timeout_seconds = 5;
  accel_sim_report* rep = nullptr;
  const accel_status s = accel_sim_run(&so, nullptr, run_rank_call, &call, &rep);
  accel_sim_report_destroy(rep);
  return R(s);
}
accel_tensor* rank_tensor(std::vector<int64_t> shape) {
  std::vector<float> d(static_cast<size_t>(numel(shape)) + 1, 1.0f);
  accel_tensor* t = nullptr;
  accel_tensor_create(ACCEL_FLOAT32, shape.data(), shape.size(), d.data(), &t);
  return t;
}

}  // namespace
void processes() {
  auto ctx = [](Env& e) -> const accel_context* { return e.a.ctx; };
  getter("accel_process_index", "ctx", accel_process_index, ctx);
  getter("accel_num_processes", "ctx", accel_num_processes, ctx);
  getter("accel_local_process_index", "ctx", accel_local_process_index, ctx);
  getter("accel_is_main_process", "ctx", accel_is_main_process, ctx);
  getter("accel_is_local_main_process", "ctx", accel_is_local_main_process, ctx);
  null_case("accel_barrier", "ctx", [](Env&) { return R(accel_barrier(nullptr)); });
  add("accel_barrier", "rank 0 barrier, rank 1 reduce (in a simulated world)", STATE, {"barrier"}, [](Env&) {
    return in_world([](accel_context* c, int32_t rank) -> accel_status {
      if (rank == 0) return accel_barrier(c);
      accel_tensor* out = nullptr;
      return accel_reduce(c, rank_tensor({2}), ACCEL_REDUCE_SUM, &out);
    });
  }).prefix = "accel_sim_run: ";
  null_case("accel_print", "ctx", [](Env&) { return R(accel_print(nullptr, "hello")); });
  null_case("accel_print", "message", [](Env& e) { return R(accel_print(e.a.ctx, nullptr), e.a.ctx); });
  null_case("accel_set_seed", "ctx", [](Env&) { return R(accel_set_seed(nullptr, 1, 0)); });

  // Collectives f(ctx, tensor, ..., out): ctx, tensor and out NULL (out untouched).
  using Coll = std::function<accel_status(accel_context*, const accel_tensor*, accel_tensor**)>;
  auto coll = [](Coll f, bool c = true, bool t = true, bool o = true) -> Body {
    return [=](Env& e) {
      accel_context* cx = c ? e.a.ctx : nullptr;
      return with_out<accel_tensor*>(e, [&](auto* out) {
        return R(f(cx, t ? floats({2, 3}) : nullptr, o ? out : nullptr), cx);
      });
    };
  };
  auto nulls = [coll](const std::string& fn, Coll f) {
    null_case(fn, "ctx", coll(f, false, true, true));
    null_case(fn, "tensor", coll(f, true, false, true));
    null_case(fn, "out", coll(f, true, true, false));
  };
  nulls("accel_reduce", [](accel_context* c, const accel_tensor* t, accel_tensor** o) {
    return accel_reduce(c, t, ACCEL_REDUCE_SUM, o);
  });
  for (int op : {42, -1})
    add("accel_reduce", "op=" + str(op), ARG, {"op", str(op)},
        coll([op](accel_context* c, const accel_tensor* t, accel_tensor** o) {
          return accel_reduce(c, t, raw<accel_reduce_op>(op), o);
        }));
  add("accel_reduce", "shapes differ across ranks (in a simulated world)", STATE, {"accel_reduce"}, [](Env&) {
    return in_world([](accel_context* c, int32_t rank) {
      accel_tensor* out = nullptr;
      return accel_reduce(c, rank_tensor({rank == 0 ? 2 : 3}), ACCEL_REDUCE_SUM, &out);
    });
  }).prefix = "accel_sim_run: ";

  nulls("accel_broadcast",
        [](accel_context* c, const accel_tensor* t, accel_tensor** o) { return accel_broadcast(c, t, 0, o); });
  for (int32_t root : {-1, 1, INT32_MAX, INT32_MIN})
    add("accel_broadcast", "root=" + str(root) + " of 1 process", ARG, {"root", str(root)},
        coll([root](accel_context* c, const accel_tensor* t, accel_tensor** o) {
          return accel_broadcast(c, t, root, o);
        }));
  add("accel_broadcast", "root=2 of 2 (in a simulated world)", ARG, {"accel_broadcast", "root"}, [](Env&) {
    return in_world([](accel_context* c, int32_t) {
      accel_tensor* out = nullptr;
      return accel_broadcast(c, rank_tensor({2}), 2, &out);
    });
  }).prefix = "accel_sim_run: ";

  nulls("accel_gather", accel_gather);
  add("accel_gather", "shapes differ across ranks (in a simulated world)", ARG, {"accel_gather"}, [](Env&) {
    return in_world([](accel_context* c, int32_t rank) {
      accel_tensor* out = nullptr;
      return accel_gather(c, rank_tensor({2, rank == 0 ? 2 : 3}), &out);
    });
  }).prefix = "accel_sim_run: ";
  nulls("accel_gather_for_metrics", accel_gather_for_metrics);
  add("accel_gather_for_metrics", "a scalar (no batch dimension)", ARG, {"tensor"}, [](Env& e) {
    return with_out<accel_tensor*>(
        e, [&](auto* out) { return R(accel_gather_for_metrics(e.a.ctx, floats({}), out), e.a.ctx); });
  });

  const std::string pad = "accel_pad_across_processes";
  auto pad_call = [](accel_dtype dt, int32_t dim, double value) {
    return [=](Env& e) {
      std::vector<int64_t> d(6, 1);
      accel_tensor* t = tensor(dt, {2, 3}, d.data());  // 48 bytes: enough for any dtype
      return with_out<accel_tensor*>(
          e, [&](auto* out) { return R(accel_pad_across_processes(e.a.ctx, t, dim, value, 0, out), e.a.ctx); });
    };
  };
  nulls(pad, [](accel_context* c, const accel_tensor* t, accel_tensor** o) {
    return accel_pad_across_processes(c, t, 0, 0.0, 0, o);
  });
  for (int32_t dim : {2, -3, INT32_MAX, INT32_MIN})
    add(pad, "dim=" + str(dim) + " of 2", ARG, {"dim", str(dim)}, pad_call(ACCEL_FLOAT32, dim, 0));
  for (double v : plus(kNonFinite, {0.5, 1e300}))
    add(pad, "pad_value=" + str(v) + " for int64", ARG, {"pad_value", str(v)}, pad_call(ACCEL_INT64, 0, v));
  add(pad, "pad_value=200 for int8", ARG, {"pad_value", "200"}, pad_call(ACCEL_INT8, 0, 200));
  add(pad, "pad_value=-1 for uint8", ARG, {"pad_value", "-1"}, pad_call(ACCEL_UINT8, 0, -1));
}

namespace {
accel_status return_status(accel_context*, void* user) { return raw<accel_status>(*static_cast<int*>(user)); }
}  // namespace

void simulator() {
  options_init("accel_sim_options_init", accel_sim_options_init, ACCEL_SIM_OPTIONS_VERSION);
  const std::string fn = "accel_sim_run";
  auto sim_init = [] {
    accel_sim_options o = ACCEL_SIM_OPTIONS_INIT;
    return o;
  };
  auto run = [](const accel_sim_options* so, const accel_options* co, accel_rank_fn f, Env& e) {
    return with_out<accel_sim_report*>(e, [&](auto* out) { return R(accel_sim_run(so, co, f, nullptr, out)); });
  };
  null_case(fn, "fn", [run](Env& e) { return run(nullptr, nullptr, nullptr, e); });
  const auto t = target<accel_sim_options>(
      fn, "sim", sim_init, [run](Env& e, const accel_sim_options& o) { return run(&o, nullptr, noop_rank, e); });
  t.versions();
  t.field<int32_t>("world_size", &accel_sim_options::world_size, {0, -1, INT32_MIN});
  t.bad("world_size=9 on 8xH100", {"world_size", "9", "8xH100"}, [](accel_sim_options& o) { o.world_size = 9; });
  t.field("timeout_seconds", &accel_sim_options::timeout_seconds, plus(kNonFinite, {0, -1}));
  t.field<int32_t>("engine_threads", &accel_sim_options::engine_threads, {-1, INT32_MIN});
  static const std::vector<std::string> bad_memory = {
      "1.2.3GiB", ".", "", "GiB", "12XB", "-1GiB", "0", "0GiB", "99999999999999999999TiB"};
  for (const std::string& m : bad_memory) {
    std::vector<std::string> needles = {"device_memory"};
    if (!m.empty()) needles.push_back(m);
    t.bad("device_memory=\"" + m + "\"", needles, [m](accel_sim_options& o) { o.device_memory = m.c_str(); });
    std::vector<std::string> host_needles = {"host_memory"};
    if (!m.empty()) host_needles.push_back(m);
    t.bad("host_memory=\"" + m + "\"", host_needles, [m](accel_sim_options& o) { o.host_memory = m.c_str(); });
  }
  static const std::vector<std::string> good_memory = {"64MiB", "1.5GiB", "1000000"};
  for (const std::string& m : good_memory)
    add(fn, "sim->device_memory=\"" + m + "\" (valid)", OK, {}, [m](Env&) {
      accel_sim_options o = ACCEL_SIM_OPTIONS_INIT;
      o.device_memory = m.c_str();
      accel_sim_report* rep = nullptr;
      R r = accel_sim_run(&o, nullptr, noop_rank, nullptr, &rep);
      accel_sim_report_destroy(rep);
      return r;
    });
  static const std::vector<std::string> bad_faults = {"delay:0:inf", "delay:0:nan", "delay:0:-1", "kill:9@step:1",
                                                      "garbage"};
  for (const std::string& f : bad_faults)
    t.bad("faults=\"" + f + "\"", {"faults", f}, [f](accel_sim_options& o) { o.faults = f.c_str(); });
  t.bad("topology=\"9xTPU\"", {"topology", "9xTPU"}, [](accel_sim_options& o) { o.topology = "9xTPU"; });
  t.bad("topology=\"\"", {"topology"}, [](accel_sim_options& o) { o.topology = ""; });
  const auto c = target<accel_options>(fn, "ctx_opts", fixture_options, [run](Env& e, const accel_options& o) {
    return run(nullptr, &o, noop_rank, e);
  });
  c.versions();
  c.field<int32_t>("gradient_accumulation_steps", &accel_options::gradient_accumulation_steps, {0});
  c.bad(
      "device=CUDA", {"device"}, [](accel_options& o) { o.device = ACCEL_DEVICE_CUDA; }, UNSUPPORTED);
  for (int v : {7, -77})
    add(fn, "fn returns " + str(v), ARG, {"returned " + str(v)}, [v](Env&) {
      int code = v;
      accel_sim_report* rep = nullptr;
      R r = accel_sim_run(nullptr, nullptr, return_status, &code, &rep);
      accel_sim_report_destroy(rep);  // the world ran: the report may come back
      return r;
    });
  destroy_null("accel_sim_report_destroy", [] { accel_sim_report_destroy(nullptr); });
  auto report = [](Env& e) { return e.report(); };
  getter("accel_sim_report_world_size", "report", accel_sim_report_world_size, report);
  getter("accel_sim_report_predicted_seconds", "report", accel_sim_report_predicted_seconds, report);
  auto rank = [](bool null_report, int32_t r) {
    return [=](Env& e) {
      const accel_sim_report* rep = null_report ? nullptr : e.report();
      accel_status s;
      const char* err;
      uint64_t peak;
      fill(s);
      fill(err);
      fill(peak);
      R res = accel_sim_report_rank(rep, r, &s, &err, &peak);
      e.untouched(s, "*out_status");
      e.untouched(err, "*out_error");
      e.untouched(peak, "*out_peak_bytes");
      return res;
    };
  };
  null_case("accel_sim_report_rank", "report", rank(true, 0));
  for (int32_t r : {-1, 2, INT32_MAX, INT32_MIN})
    add("accel_sim_report_rank", "rank=" + str(r) + " of 2", ARG, {"rank", str(r)}, rank(false, r));
  auto host = [](bool null_report, int32_t r) {
    return [=](Env& e) {
      const accel_sim_report* rep = null_report ? nullptr : e.report();
      uint64_t peak, moved;
      double seconds;
      fill(peak);
      fill(moved);
      fill(seconds);
      R res = accel_sim_report_rank_host(rep, r, &peak, &moved, &seconds);
      e.untouched(peak, "*out_host_peak_bytes");
      e.untouched(moved, "*out_transfer_bytes");
      e.untouched(seconds, "*out_transfer_seconds");
      return res;
    };
  };
  null_case("accel_sim_report_rank_host", "report", host(true, 0));
  for (int32_t r : {-1, 2, INT32_MAX, INT32_MIN})
    add("accel_sim_report_rank_host", "rank=" + str(r) + " of 2", ARG, {"rank", str(r)}, host(false, r));
  null_case("accel_sim_charge_compute", "ctx", [](Env&) { return R(accel_sim_charge_compute(nullptr, 1.0, "x")); });
  for (double v : plus(kNonFinite, {-1, -1e-300}))
    add("accel_sim_charge_compute", "seconds=" + str(v), ARG, {"seconds", str(v)},
        [v](Env& e) { return R(accel_sim_charge_compute(e.a.ctx, v, "x"), e.a.ctx); });
}

namespace {
// accel_load_state of a checkpoint "ck" of the fixture (saved after one step; the context
// then steps once more) after `edit`: refused, the context unchanged.
void lie(const std::string& what, accel_status st, std::vector<std::string> needles,
         std::function<void(const fs::path&)> edit) {
  add("accel_load_state", what, st, std::move(needles), [edit](Env& e) {
    normal_step(e.a);
    ok(accel_save_state(e.a.ctx, "ck"), "accel_save_state");
    normal_step(e.a);  // the context moves on: a half-done load would show
    edit("ck");
    const Snapshot before = snapshot(e.a);
    R r(accel_load_state(e.a.ctx, "ck"), e.a.ctx);
    if (r.status != ACCEL_OK) e.expect(snapshot(e.a) == before, "the failed load changed the context");
    return r;
  });
}
}  // namespace

void checkpoints() {
  options_init("accel_project_options_init", accel_project_options_init, ACCEL_PROJECT_OPTIONS_VERSION);
  const std::string sp = "accel_set_project";
  auto proj_init = [] {
    accel_project_options o = ACCEL_PROJECT_OPTIONS_INIT;
    o.project_dir = "proj";
    return o;
  };
  null_case(sp, "ctx", [proj_init](Env&) {
    const accel_project_options o = proj_init();
    return R(accel_set_project(nullptr, &o));
  });
  null_case(sp, "opts", [](Env& e) { return R(accel_set_project(e.a.ctx, nullptr), e.a.ctx); });
  const auto t = target<accel_project_options>(sp, "opts", proj_init, [](Env& e, const accel_project_options& o) {
    return R(accel_set_project(e.a.ctx, &o), e.a.ctx);
  });
  t.versions();
  t.field<int32_t>("total_limit", &accel_project_options::total_limit, {-1, INT32_MIN});
  t.bad("project_dir=NULL", {"project_dir"}, [](accel_project_options& o) { o.project_dir = nullptr; });
  t.bad("project_dir=\"\"", {"project_dir"}, [](accel_project_options& o) { o.project_dir = ""; });
  getter("accel_last_checkpoint", "ctx", accel_last_checkpoint, [](Env& e) -> const accel_context* { return e.a.ctx; });

  // save_state: state, and paths it must refuse and leave as they were
  const std::string ss = "accel_save_state";
  null_case(ss, "ctx", [](Env&) { return R(accel_save_state(nullptr, "ck")); });
  add(ss, "before accel_prepare", STATE, {}, [](Env& e) {
    World f = make_world(false);
    R r(accel_save_state(f.ctx, "ck"), f.ctx);
    e.expect(!fs::exists("ck"), "ck was written");
    return r;
  });
  add(ss, "between a backward and its step", STATE, {}, [](Env& e) {
    ok(accel_backward(e.a.ctx, forward_loss(e.a).loss), "accel_backward");
    R r(accel_save_state(e.a.ctx, "ck"), e.a.ctx);
    e.expect(!fs::exists("ck"), "ck was written");
    return r;
  });
  add(ss, "dir=NULL without a project", ARG, {"accel_set_project"},
      [](Env& e) { return R(accel_save_state(e.a.ctx, nullptr), e.a.ctx); });
  add(ss, "dir=\"\"", ARG, {"dir"}, [](Env& e) { return R(accel_save_state(e.a.ctx, ""), e.a.ctx); });
  add(ss, "dir=\".\"", ARG, {"directory"}, [](Env& e) {
    write_file("keep.txt", kNotes);
    R r(accel_save_state(e.a.ctx, "."), e.a.ctx);
    e.expect(read_file("keep.txt") == kNotes, "keep.txt in . was changed");
    return r;
  });
  add(ss, "dir=\"notes.txt\" (a regular file)", ARG, {"notes.txt", "regular file"}, [](Env& e) {
    write_file("notes.txt", kNotes);
    R r(accel_save_state(e.a.ctx, "notes.txt"), e.a.ctx);
    e.expect(fs::is_regular_file(fs::symlink_status("notes.txt")) && read_file("notes.txt") == kNotes,
             "notes.txt was changed");
    return r;
  });
  add(ss, "dir=a non-empty directory that is not a checkpoint", ARG, {"mydir"}, [](Env& e) {
    fs::create_directory("mydir");
    write_file("mydir/user.txt", kNotes);
    R r(accel_save_state(e.a.ctx, "mydir"), e.a.ctx);
    e.expect(fs::exists("mydir/user.txt") && read_file("mydir/user.txt") == kNotes, "mydir/user.txt was changed");
    return r;
  });
  for (const char* link : {"link_dir", "link_file"})
    add(ss, std::string("dir=a symbolic link (") + link + ")", ARG, {"symbolic link"}, [link](Env& e) {
      make_links();
      R r(accel_save_state(e.a.ctx, link), e.a.ctx);
      e.expect(links_intact(), "the link or its target was changed");
      return r;
    });
  add(ss, "dir=a character device", ARG, {"device"}, [](Env& e) {
    const std::string dev = device_path();
    R r(accel_save_state(e.a.ctx, dev.c_str()), e.a.ctx);
    e.expect(is_char_device(dev), dev + " is no longer a character device");
    return r;
  });
  for (bool as_dir : {false, true})
    add(ss, std::string("a user's ") + (as_dir ? "directory" : "file") + " at the temporary sibling .ck.tmp", ARG,
        {".ck.tmp"},
        [as_dir](Env& e) {
          const std::string user = as_dir ? ".ck.tmp/user.txt" : ".ck.tmp";
          if (as_dir) fs::create_directory(".ck.tmp");
          write_file(user, kNotes);
          R r(accel_save_state(e.a.ctx, "ck"), e.a.ctx);
          e.expect(fs::is_regular_file(user) && read_file(user) == kNotes, user + " was destroyed");
          return r;
        })
        .also = {OK};
  add(ss, "twice to the same directory (replacing is allowed)", OK, {}, [](Env& e) {
    normal_step(e.a);
    ok(accel_save_state(e.a.ctx, "ck"), "the first accel_save_state");
    normal_step(e.a);
    R r(accel_save_state(e.a.ctx, "ck"), e.a.ctx);
    e.expect(fs::exists("ck/manifest.json"), "ck/manifest.json is missing");
    return r;
  });

  // load_state: state, missing things, and files that lie
  const std::string ls = "accel_load_state";
  null_case(ls, "ctx", [](Env&) { return R(accel_load_state(nullptr, "ck")); });
  add(ls, "before accel_prepare", STATE, {}, [](Env&) {
    World f = make_world(false);
    return R(accel_load_state(f.ctx, "ck"), f.ctx);
  });
  add(ls, "dir=NULL without a project", ARG, {"accel_set_project"},
      [](Env& e) { return R(accel_load_state(e.a.ctx, nullptr), e.a.ctx); });
  add(ls, "dir=\"\"", ARG, {"dir"}, [](Env& e) { return R(accel_load_state(e.a.ctx, ""), e.a.ctx); });
  add(ls, "a missing directory", IO, {"nope"}, [](Env& e) { return R(accel_load_state(e.a.ctx, "nope"), e.a.ctx); });
  add(ls, "a directory without manifest.json", IO, {"manifest.json"}, [](Env& e) {
    fs::create_directory("empty");
    return R(accel_load_state(e.a.ctx, "empty"), e.a.ctx);
  });
  // controls: the editing tools keep a checkpoint loadable when they change nothing
  lie("control: the checkpoint as saved", OK, {}, [](const fs::path&) {});
  lie("control: rank-0.json rewritten unchanged", OK, {},
      [](const fs::path& d) { edit_json(d, "rank-0.json", [](json&) {}); });
  lie("control: rng-rank0.safetensors rewritten unchanged", OK, {},
      [](const fs::path& d) { rewrite_rng(d, SIZE_MAX); });
  struct Lie {
    const char* file;
    const char* what;
    const char* needle;
    std::function<void(json&)> edit;
  };
  const std::vector<Lie> lies = {
      {"rank-0.json", "optimizer_steps a string", "optimizer_steps", [](json& j) { j["optimizer_steps"] = "1"; }},
      {"rank-0.json", "loss_scale a string", "loss_scale", [](json& j) { j["loss_scale"] = "1"; }},
      {"rank-0.json", "micro_steps negative", "micro_steps", [](json& j) { j["micro_steps"] = -3; }},
      {"rank-0.json", "loaders missing", "loaders", [](json& j) { j.erase("loaders"); }},
      {"rank-0.json", "loaders[0].epoch 1.5", "epoch", [](json& j) { j["loaders"][0]["epoch"] = 1.5; }},
      {"rank-0.json", "an array, not an object", "rank-0.json",
       [](json& j) {
         j = json::array({1, 2});
       }},
      {"manifest.json", "world_size a string", "world_size", [](json& j) { j["world_size"] = "1"; }},
      {"manifest.json", "world_size 0", "world_size", [](json& j) { j["world_size"] = 0; }},
      {"manifest.json", "format_version 99", "format version", [](json& j) { j["format_version"] = 99; }},
      {"manifest.json", "parameters missing", "parameters", [](json& j) { j.erase("parameters"); }},
      {"manifest.json", "files an array", "files", [](json& j) { j["files"] = json::array(); }},
      {"manifest.json", "files a string", "files", [](json& j) { j["files"] = "model.safetensors"; }},
  };
  for (const Lie& l : lies)
    lie(std::string(l.file) + ": " + l.what, FORMAT, {l.file, l.needle},
        [l](const fs::path& d) { edit_json(d, l.file, l.edit); });
  lie("rng-rank0.safetensors: a generator of 16 bytes", FORMAT, {"rng-rank0.safetensors", "generator"},
      [](const fs::path& d) { rewrite_rng(d, 16); });
}

}  // namespace misuse
