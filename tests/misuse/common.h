// Shared by the misuse suite's files (tests/misuse/): the standard fixture (World), a case's
// environment (Env) and outcome (R), the table of cases (cases(), add() and the helpers that
// add families of cases), checkpoint files edited to lie, and the sections' registrars. The
// table is one vector (cases(), an inline function: one static for the whole program); each
// section function, defined in one cases_*.cpp, is called once by register_cases() in
// misuse.cpp, in the header's order.
#pragma once

#include <accel/accel.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace misuse {


namespace fs = std::filesystem;
using json = nlohmann::json;

inline const double kNaN = std::numeric_limits<double>::quiet_NaN();
inline const double kInf = std::numeric_limits<double>::infinity();
constexpr accel_status OK = ACCEL_OK, ARG = ACCEL_ERR_INVALID_ARGUMENT, STATE = ACCEL_ERR_INVALID_STATE,
                       IO = ACCEL_ERR_IO, FORMAT = ACCEL_ERR_FORMAT, UNSUPPORTED = ACCEL_ERR_UNSUPPORTED;
constexpr int kJobs = 2;
constexpr int kCaseSeconds = 10;

// The text a value has in a message: what `std::ostream << v` writes ("nan", "-inf", "1e+300").
template <class T>
inline std::string str(const T& v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Out-parameters start filled with 0x5A bytes; a failing call must leave them so.
template <class T>
inline void fill(T& v) {
  std::memset(static_cast<void*>(&v), 0x5A, sizeof v);
}
inline bool filled(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  return std::all_of(b, b + n, [](unsigned char c) { return c == 0x5A; });
}

// An enum value that C may pass but C++ may not name (42, -1). Such a value lives in an int
// (or, inside an options struct, is written with memcpy) and becomes the enum type only as a
// call's argument: loading it from an enum-typed object is what UBSan's enum check refuses.
template <class E>
inline void set_raw(E& e, int v) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized");
  std::memcpy(&e, &v, sizeof v);
}
template <class E>
inline E raw(int v) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized");
  return static_cast<E>(v);
}

struct SetupError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void ok(accel_status s, const std::string& what) {
  if (s != ACCEL_OK) throw SetupError(what + " returned " + accel_status_name(s) + ": " + accel_last_error(nullptr));
}

// ---------------------------------------------------------------------------------------
// Tensors, the standard fixture and a normal training step

inline accel_tensor* tensor(accel_dtype dt, const std::vector<int64_t>& shape, const void* data) {
  accel_tensor* t = nullptr;
  ok(accel_tensor_create(dt, shape.data(), shape.size(), data, &t), "accel_tensor_create");
  return t;
}
inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
inline accel_tensor* floats(const std::vector<int64_t>& shape, float v = 0.5f) {
  std::vector<float> d(static_cast<size_t>(numel(shape)) + 1, v);
  return tensor(ACCEL_FLOAT32, shape, d.data());
}
inline accel_tensor* longs(const std::vector<int64_t>& values) {
  return tensor(ACCEL_INT64, {static_cast<int64_t>(values.size())}, values.data());
}

inline const int64_t kSizes[] = {4, 8, 3};
constexpr size_t kParamTensors = 4;  // two Linear layers, each a weight and a bias

struct World {
  accel_context* ctx = nullptr;
  accel_model* model = nullptr;
  accel_optimizer* opt = nullptr;
  accel_scheduler* sched = nullptr;
  accel_dataloader* loader = nullptr;
  accel_tensor* x = nullptr;  // the dataset: float [16, 4]
  accel_tensor* y = nullptr;  // int64 [16], classes 0..2
};

inline accel_options fixture_options() {
  accel_options o = ACCEL_OPTIONS_INIT;
  o.device = ACCEL_DEVICE_CPU;
  o.seed = 0;
  o.num_threads = 1;  // two children run at once on small machines
  return o;
}

// accel_init (fp32, CPU, seed 0) -> MLP {4, 8, 3} -> AdamW -> LINEAR scheduler (warmup 1,
// total 100) -> a loader over 16 samples, batch 4 -> accel_prepare (unless prepare is false).
inline World make_world(bool prepare = true) {
  World w;
  const accel_options o = fixture_options();
  ok(accel_init(&o, &w.ctx), "accel_init");
  accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
  m.layer_sizes = kSizes;
  m.num_layer_sizes = 3;
  ok(accel_model_create_mlp(w.ctx, &m, &w.model), "accel_model_create_mlp");
  ok(accel_optimizer_create_adamw(w.ctx, w.model, nullptr, &w.opt), "accel_optimizer_create_adamw");
  accel_scheduler_options so = ACCEL_SCHEDULER_OPTIONS_INIT;
  so.kind = ACCEL_SCHEDULE_LINEAR;
  so.warmup_steps = 1;
  so.total_steps = 100;
  ok(accel_scheduler_create(w.ctx, w.opt, &so, &w.sched), "accel_scheduler_create");
  std::vector<float> xs(64);
  std::vector<int64_t> ys(16);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(static_cast<int>((i * 7) % 11)) / 10.0f - 0.5f;
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<int64_t>(i % 3);
  w.x = tensor(ACCEL_FLOAT32, {16, 4}, xs.data());
  w.y = longs(ys);
  accel_dataloader_options dl = ACCEL_DATALOADER_OPTIONS_INIT;
  dl.batch_size = 4;
  ok(accel_dataloader_create(w.ctx, w.x, w.y, &dl, &w.loader), "accel_dataloader_create");
  if (prepare) ok(accel_prepare(w.ctx, w.model, w.opt, w.sched, w.loader), "accel_prepare");
  return w;
}

struct Batch {
  accel_tensor *x = nullptr, *y = nullptr, *logits = nullptr, *loss = nullptr;
};

inline Batch forward_loss(World& w) {
  Batch b;
  ok(accel_dataloader_next(w.ctx, w.loader, &b.x, &b.y), "accel_dataloader_next");
  if (!b.x) ok(accel_dataloader_next(w.ctx, w.loader, &b.x, &b.y), "accel_dataloader_next");  // a new epoch
  if (!b.x || !b.y) throw SetupError("accel_dataloader_next yielded no batch twice in a row");
  ok(accel_model_forward(w.ctx, w.model, &b.x, 1, &b.logits), "accel_model_forward");
  ok(accel_loss_cross_entropy(w.ctx, b.logits, b.y, &b.loss), "accel_loss_cross_entropy");
  return b;
}

// forward -> loss from host tensors (no loader): x float [4, 4], targets {0, 1, 2, 0}.
inline Batch host_forward_loss(World& w, float xv = 0.25f) {
  Batch b;
  b.x = floats({4, 4}, xv);
  b.y = longs({0, 1, 2, 0});
  ok(accel_model_forward(w.ctx, w.model, &b.x, 1, &b.logits), "accel_model_forward");
  ok(accel_loss_cross_entropy(w.ctx, b.logits, b.y, &b.loss), "accel_loss_cross_entropy");
  return b;
}

inline void normal_step(World& w) {
  Batch b = forward_loss(w);
  ok(accel_backward(w.ctx, b.loss), "accel_backward");
  ok(accel_step(w.ctx, nullptr), "accel_step");
  for (accel_tensor* t : {b.x, b.y, b.logits, b.loss}) accel_tensor_destroy(t);
}

// ---------------------------------------------------------------------------------------
// Cases

inline accel_status noop_rank(accel_context*, void*) { return ACCEL_OK; }

// What a case's body did: the status of the call under test and the context it was called
// on (NULL for functions without one), whose message is checked as well as the thread's.
struct R {
  accel_status status;
  const accel_context* ctx;
  R(accel_status s, const accel_context* c = nullptr) : status(s), ctx(c) {}  // NOLINT: implicit
};

class Env {
 public:
  World a;  // the standard fixture
  std::vector<std::string> failures;

  World& other() {  // a second context with its own objects, built on first use
    if (!b_) b_ = make_world();
    return *b_;
  }
  const accel_sim_report* report() {  // the report of a 2-rank world that ran
    if (!rep_) {
      accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
      ok(accel_sim_run(&so, nullptr, noop_rank, nullptr, &rep_), "accel_sim_run");
    }
    return rep_;
  }
  void expect(bool cond, const std::string& what) {
    if (!cond) failures.push_back(what);
  }
  template <class T>
  void untouched(const T& v, const std::string& name) {
    expect(filled(&v, sizeof v), name + " was written by the failing call");
  }

 private:
  std::optional<World> b_;
  accel_sim_report* rep_ = nullptr;
};

// Runs call(out) with *out filled with 0x5A bytes; a failing call must leave it so.
template <class T, class Call>
inline R with_out(Env& e, Call call) {
  T out;
  fill(out);
  const R r = call(&out);
  if (r.status != ACCEL_OK) e.untouched(out, "*out");  // OK where a case also accepts it (CUDA on a GPU)
  return r;
}

using Body = std::function<R(Env&)>;

struct Case {
  std::string name;
  std::string fn;                    // the function it covers
  accel_status expect;               // the status the header names
  std::vector<std::string> needles;  // the message contains each
  Body body;
  std::string prefix;              // the message starts with it: "<fn>: " unless set
  std::vector<accel_status> also;  // other acceptable outcomes (no message check for ACCEL_OK)
};

inline std::vector<Case>& cases() {
  static std::vector<Case> all;
  return all;
}

inline Case& add(const std::string& fn, const std::string& what, accel_status expect, std::vector<std::string> needles,
          Body body) {
  cases().push_back(Case{fn + "/" + what, fn, expect, std::move(needles), std::move(body), fn + ": ", {}});
  return cases().back();
}

// A required pointer passed as NULL: INVALID_ARGUMENT, "<param> is NULL".
inline void null_case(const std::string& fn, const std::string& param, Body body) {
  add(fn, param + "=NULL", ARG, {param + " is NULL"}, std::move(body));
}

// A void function (a _destroy) given NULL: nothing happens, the context trains on.
inline void destroy_null(const std::string& fn, void (*f)()) {
  add(fn, "NULL", OK, {}, [f](Env&) {
    f();
    return R(OK);
  });
}

// Getters f(const Obj *param, T *out): param NULL (out untouched), out NULL.
template <class Obj, class T, class Get>
inline void getter(const std::string& fn, const std::string& param, accel_status (*f)(const Obj*, T*), Get obj) {
  null_case(fn, param, [f](Env& e) { return with_out<T>(e, [&](auto* out) { return R(f(nullptr, out)); }); });
  null_case(fn, "out", [f, obj](Env& e) {
    const Obj* o = obj(e);
    if constexpr (std::is_same_v<Obj, accel_context>)
      return R(f(o, nullptr), o);
    else
      return R(f(o, nullptr));
  });
}

// *_options_init(opts, version): NULL, and unknown versions: 0, the first one past the
// current, and a far one (the struct untouched). Every version from 1 to the current is
// accepted (tests/abi).
template <class T>
inline void options_init(const std::string& fn, accel_status (*f)(T*, uint32_t), uint32_t good) {
  null_case(fn, "opts", [f, good](Env&) { return R(f(nullptr, good)); });
  for (uint32_t v : {0u, good + 1, 99u})
    add(fn, "version=" + str(v), ARG, {"version", str(v)}, [f, v](Env& e) {
      T o;
      fill(o);
      R r = f(&o, v);
      e.untouched(o, "*opts");
      return r;
    });
}

// An options struct passed to `fn` as argument `arg`: each bad field value is one case,
// INVALID_ARGUMENT with a message naming the field and the value.
template <class O>
struct Target {
  std::string fn, arg;
  std::function<O()> init;
  std::function<R(Env&, const O&)> call;  // makes the call, checks its out-parameters

  Case& bad(const std::string& what, std::vector<std::string> needles, std::function<void(O&)> mutate,
            accel_status st = ARG) const {
    auto i = init;
    auto c = call;
    return add(fn, arg + "->" + what, st, std::move(needles), [i, c, mutate](Env& e) {
      O o = i();
      mutate(o);
      return c(e, o);
    });
  }
  template <class V>
  void field(const std::string& name, V O::*m, std::vector<V> values) const {
    for (V v : values) bad(name + "=" + str(v), {name, str(v)}, [m, v](O& o) { o.*m = v; });
  }
  template <class E>
  void enums(const std::string& name, E O::*m) const {
    for (int v : {42, -1}) bad(name + "=" + str(v), {name, str(v)}, [m, v](O& o) { set_raw(o.*m, v); });
  }
  void versions() const {
    for (uint32_t v : {0u, 99u}) bad("version=" + str(v), {"version", str(v)}, [v](O& o) { o.version = v; });
  }
};

template <class O>
inline Target<O> target(std::string fn, std::string arg, std::function<O()> init, std::function<R(Env&, const O&)> call) {
  return Target<O>{std::move(fn), std::move(arg), std::move(init), std::move(call)};
}

inline const std::vector<double> kNonFinite = {kNaN, kInf, -kInf};
inline std::vector<double> plus(std::vector<double> a, const std::vector<double>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ---------------------------------------------------------------------------------------
// Files

inline std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw SetupError("cannot read " + p.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}
inline void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
  if (!f) throw SetupError("cannot write " + p.string());
}
inline std::string crc_hex(const std::string& b) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08lx",
                static_cast<unsigned long>(::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(b.data()),
                                                   static_cast<uInt>(b.size()))));
  return buf;
}

// Replaces a file the checkpoint's manifest lists and records its new size and CRC-32 there,
// so the checkpoint stays consistent and only the content lies.
inline void replace_listed(const fs::path& dir, const std::string& file, const std::string& bytes) {
  json m = json::parse(read_file(dir / "manifest.json"));
  const json& entry = m.at("files").at(file);
  if (entry.at("crc32") != crc_hex(read_file(dir / file)) || entry.at("bytes") != read_file(dir / file).size())
    throw SetupError("the manifest's entry for " + file + " is not {bytes, crc32 as %08lx}: " + entry.dump());
  write_file(dir / file, bytes);
  m["files"][file] = {{"bytes", bytes.size()}, {"crc32", crc_hex(bytes)}};
  write_file(dir / "manifest.json", m.dump(1));
}
inline void edit_json(const fs::path& dir, const std::string& file, const std::function<void(json&)>& edit) {
  json j = json::parse(read_file(dir / file));
  edit(j);
  if (file == "manifest.json")
    write_file(dir / file, j.dump(1));
  else
    replace_listed(dir, file, j.dump(1));
}

// Rewrites rng-rank0.safetensors with a "generator" of `gen_bytes` bytes (its first ones),
// keeping "default_generator" as it was.
inline void rewrite_rng(const fs::path& dir, size_t gen_bytes) {
  const std::string file = "rng-rank0.safetensors";
  const std::string b = read_file(dir / file);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(b[static_cast<size_t>(i)])) << (8 * i);
  const json h = json::parse(b.substr(8, n));
  const std::string data = b.substr(8 + n);
  auto span = [&](const char* name) {
    const auto off = h.at(name).at("data_offsets");
    return data.substr(off.at(0).get<size_t>(), off.at(1).get<size_t>() - off.at(0).get<size_t>());
  };
  const std::string gen = span("generator").substr(0, gen_bytes), def = span("default_generator");
  json nh = h;
  nh["generator"] = {{"dtype", "U8"}, {"shape", {gen.size()}}, {"data_offsets", {0, gen.size()}}};
  nh["default_generator"]["data_offsets"] = {gen.size(), gen.size() + def.size()};
  std::string hs = nh.dump();
  while (hs.size() % 8) hs += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((hs.size() >> (8 * i)) & 0xff);
  replace_listed(dir, file, out + hs + gen + def);
}

// What a failed load must leave as it was.
struct Snapshot {
  std::vector<std::string> params;
  double lr = 0, loss_scale = 0;
  int64_t sched_steps = 0, epoch = 0;
  bool operator==(const Snapshot& o) const {
    return params == o.params && lr == o.lr && loss_scale == o.loss_scale && sched_steps == o.sched_steps &&
           epoch == o.epoch;
  }
};
inline Snapshot snapshot(World& w) {
  Snapshot s;
  size_t n = 0;
  int64_t elements = 0;
  ok(accel_model_num_parameters(w.model, &n, &elements), "accel_model_num_parameters");
  for (size_t i = 0; i < n; ++i) {
    accel_tensor* t = nullptr;
    ok(accel_model_parameter(w.ctx, w.model, i, &t), "accel_model_parameter");
    size_t bytes = 0;
    ok(accel_tensor_nbytes(t, &bytes), "accel_tensor_nbytes");
    std::string buf(bytes, '\0');
    ok(accel_tensor_copy_to_host(t, buf.data(), bytes), "accel_tensor_copy_to_host");
    accel_tensor_destroy(t);
    s.params.push_back(buf);
  }
  ok(accel_optimizer_lr(w.opt, &s.lr), "accel_optimizer_lr");
  ok(accel_scheduler_steps(w.sched, &s.sched_steps), "accel_scheduler_steps");
  ok(accel_dataloader_epoch(w.loader, &s.epoch), "accel_dataloader_epoch");
  ok(accel_loss_scale(w.ctx, &s.loss_scale), "accel_loss_scale");
  return s;
}

inline const std::string kNotes = "my notes: do not delete\n";

// A character device to aim savers at. /dev/null itself as a normal user; as root (who could
// replace /dev/null if a saver renamed onto it) a private node with its numbers.
inline std::string device_path() {
  if (::geteuid() != 0) return "/dev/null";
  if (::mknod("null_device", S_IFCHR | 0666, makedev(1, 3)) != 0)
    throw SetupError(std::string("mknod null_device: ") + std::strerror(errno) + " (not aiming at /dev/null as root)");
  return "null_device";
}
inline bool is_char_device(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

// A symbolic link "link" to a directory "target_dir" holding a user file, or to a file.
inline void make_links() {
  fs::create_directory("target_dir");
  write_file("target_dir/user.txt", kNotes);
  write_file("target.txt", kNotes);
  fs::create_directory_symlink("target_dir", "link_dir");
  fs::create_symlink("target.txt", "link_file");
}
inline bool links_intact() {
  return fs::is_symlink("link_dir") && fs::is_symlink("link_file") && read_file("target_dir/user.txt") == kNotes &&
         read_file("target.txt") == kNotes;
}

// tests/fixtures/lm/gpt2-tiny, absolute (set by main from HEADER)
inline std::string g_lm_fixture;

// ---------------------------------------------------------------------------------------
// The cases, by section of the header: each adds its cases to cases() when called.

void basics();  // cases_objects.cpp
void tensors();  // cases_objects.cpp
void context();  // cases_objects.cpp
void models();  // cases_objects.cpp
void losses();  // cases_objects.cpp
void optimizers();  // cases_objects.cpp
void data();  // cases_objects.cpp
void training();  // cases_training.cpp
void processes();  // cases_training.cpp
void simulator();  // cases_training.cpp
void checkpoints();  // cases_training.cpp
void language_models();  // cases_lm.cpp
void generation();  // cases_lm.cpp
void lora();  // cases_lm.cpp
void lm_data();  // cases_lm.cpp
void trackers();  // cases_realtime.cpp
void memory_estimates();  // cases_realtime.cpp
void realtime();  // cases_realtime.cpp
void tokenizers();  // cases_tokenizer.cpp

}  // namespace misuse
