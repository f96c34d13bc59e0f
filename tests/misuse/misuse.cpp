// The misuse suite: every public function of the C ABI (include/accel/accel.h) called
// wrongly. NULL pointers, unknown versions and enum values, zero / negative / NaN / infinite
// / overflowing numbers, wrong shapes and dtypes, calls in the wrong state or order, objects
// from another context, hostile paths, and checkpoint files that are well-formed but lie.
//
// Each case runs in its own child process (a crash or a hang fails that case, not the suite)
// and asserts: the status the header names; a message in accel_last_error(NULL) (and in
// accel_last_error(ctx) for calls on a context) that starts with "<function>: " and names the
// argument; out-parameters left as they were; and a context that still trains afterwards.
//
// Usage: test_misuse HEADER [FILTER] [-v]
//   HEADER  include/accel/accel.h: every `ACCEL_API ... accel_xxx(` in it needs a case
//   FILTER  run only the cases whose name contains it
//   -v      also print every passing case with the status and message it saw
// The parent only forks and reads: it never calls into the library.
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

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
constexpr accel_status OK = ACCEL_OK, ARG = ACCEL_ERR_INVALID_ARGUMENT, STATE = ACCEL_ERR_INVALID_STATE,
                       IO = ACCEL_ERR_IO, FORMAT = ACCEL_ERR_FORMAT, UNSUPPORTED = ACCEL_ERR_UNSUPPORTED;
constexpr int kJobs = 2;
constexpr int kCaseSeconds = 10;

// The text a value has in a message: what `std::ostream << v` writes ("nan", "-inf", "1e+300").
template <class T>
std::string str(const T& v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Out-parameters start filled with 0x5A bytes; a failing call must leave them so.
template <class T>
void fill(T& v) {
  std::memset(static_cast<void*>(&v), 0x5A, sizeof v);
}
bool filled(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  return std::all_of(b, b + n, [](unsigned char c) { return c == 0x5A; });
}

// An enum value that C may pass but C++ may not name (42, -1). Such a value lives in an int
// (or, inside an options struct, is written with memcpy) and becomes the enum type only as a
// call's argument: loading it from an enum-typed object is what UBSan's enum check refuses.
template <class E>
void set_raw(E& e, int v) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized");
  std::memcpy(&e, &v, sizeof v);
}
template <class E>
E raw(int v) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized");
  return static_cast<E>(v);
}

struct SetupError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void ok(accel_status s, const std::string& what) {
  if (s != ACCEL_OK) throw SetupError(what + " returned " + accel_status_name(s) + ": " + accel_last_error(nullptr));
}

// ---------------------------------------------------------------------------------------
// Tensors, the standard fixture and a normal training step

accel_tensor* tensor(accel_dtype dt, const std::vector<int64_t>& shape, const void* data) {
  accel_tensor* t = nullptr;
  ok(accel_tensor_create(dt, shape.data(), shape.size(), data, &t), "accel_tensor_create");
  return t;
}
int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
accel_tensor* floats(const std::vector<int64_t>& shape, float v = 0.5f) {
  std::vector<float> d(static_cast<size_t>(numel(shape)) + 1, v);
  return tensor(ACCEL_FLOAT32, shape, d.data());
}
accel_tensor* longs(const std::vector<int64_t>& values) {
  return tensor(ACCEL_INT64, {static_cast<int64_t>(values.size())}, values.data());
}

const int64_t kSizes[] = {4, 8, 3};
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

accel_options fixture_options() {
  accel_options o = ACCEL_OPTIONS_INIT;
  o.device = ACCEL_DEVICE_CPU;
  o.seed = 0;
  o.num_threads = 1;  // two children run at once on small machines
  return o;
}

// accel_init (fp32, CPU, seed 0) -> MLP {4, 8, 3} -> AdamW -> LINEAR scheduler (warmup 1,
// total 100) -> a loader over 16 samples, batch 4 -> accel_prepare (unless prepare is false).
World make_world(bool prepare = true) {
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

Batch forward_loss(World& w) {
  Batch b;
  ok(accel_dataloader_next(w.ctx, w.loader, &b.x, &b.y), "accel_dataloader_next");
  if (!b.x) ok(accel_dataloader_next(w.ctx, w.loader, &b.x, &b.y), "accel_dataloader_next");  // a new epoch
  if (!b.x || !b.y) throw SetupError("accel_dataloader_next yielded no batch twice in a row");
  ok(accel_model_forward(w.ctx, w.model, &b.x, 1, &b.logits), "accel_model_forward");
  ok(accel_loss_cross_entropy(w.ctx, b.logits, b.y, &b.loss), "accel_loss_cross_entropy");
  return b;
}

// forward -> loss from host tensors (no loader): x float [4, 4], targets {0, 1, 2, 0}.
Batch host_forward_loss(World& w, float xv = 0.25f) {
  Batch b;
  b.x = floats({4, 4}, xv);
  b.y = longs({0, 1, 2, 0});
  ok(accel_model_forward(w.ctx, w.model, &b.x, 1, &b.logits), "accel_model_forward");
  ok(accel_loss_cross_entropy(w.ctx, b.logits, b.y, &b.loss), "accel_loss_cross_entropy");
  return b;
}

void normal_step(World& w) {
  Batch b = forward_loss(w);
  ok(accel_backward(w.ctx, b.loss), "accel_backward");
  ok(accel_step(w.ctx, nullptr), "accel_step");
  for (accel_tensor* t : {b.x, b.y, b.logits, b.loss}) accel_tensor_destroy(t);
}

// ---------------------------------------------------------------------------------------
// Cases

accel_status noop_rank(accel_context*, void*) { return ACCEL_OK; }

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
R with_out(Env& e, Call call) {
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

std::vector<Case>& cases() {
  static std::vector<Case> all;
  return all;
}

Case& add(const std::string& fn, const std::string& what, accel_status expect, std::vector<std::string> needles,
          Body body) {
  cases().push_back(Case{fn + "/" + what, fn, expect, std::move(needles), std::move(body), fn + ": ", {}});
  return cases().back();
}

// A required pointer passed as NULL: INVALID_ARGUMENT, "<param> is NULL".
void null_case(const std::string& fn, const std::string& param, Body body) {
  add(fn, param + "=NULL", ARG, {param + " is NULL"}, std::move(body));
}

// A void function (a _destroy) given NULL: nothing happens, the context trains on.
void destroy_null(const std::string& fn, void (*f)()) {
  add(fn, "NULL", OK, {}, [f](Env&) {
    f();
    return R(OK);
  });
}

// Getters f(const Obj *param, T *out): param NULL (out untouched), out NULL.
template <class Obj, class T, class Get>
void getter(const std::string& fn, const std::string& param, accel_status (*f)(const Obj*, T*), Get obj) {
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
void options_init(const std::string& fn, accel_status (*f)(T*, uint32_t), uint32_t good) {
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
Target<O> target(std::string fn, std::string arg, std::function<O()> init, std::function<R(Env&, const O&)> call) {
  return Target<O>{std::move(fn), std::move(arg), std::move(init), std::move(call)};
}

const std::vector<double> kNonFinite = {kNaN, kInf, -kInf};
std::vector<double> plus(std::vector<double> a, const std::vector<double>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ---------------------------------------------------------------------------------------
// Files

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw SetupError("cannot read " + p.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}
void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
  if (!f) throw SetupError("cannot write " + p.string());
}
std::string crc_hex(const std::string& b) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08lx",
                static_cast<unsigned long>(::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(b.data()),
                                                   static_cast<uInt>(b.size()))));
  return buf;
}

// Replaces a file the checkpoint's manifest lists and records its new size and CRC-32 there,
// so the checkpoint stays consistent and only the content lies.
void replace_listed(const fs::path& dir, const std::string& file, const std::string& bytes) {
  json m = json::parse(read_file(dir / "manifest.json"));
  const json& entry = m.at("files").at(file);
  if (entry.at("crc32") != crc_hex(read_file(dir / file)) || entry.at("bytes") != read_file(dir / file).size())
    throw SetupError("the manifest's entry for " + file + " is not {bytes, crc32 as %08lx}: " + entry.dump());
  write_file(dir / file, bytes);
  m["files"][file] = {{"bytes", bytes.size()}, {"crc32", crc_hex(bytes)}};
  write_file(dir / "manifest.json", m.dump(1));
}
void edit_json(const fs::path& dir, const std::string& file, const std::function<void(json&)>& edit) {
  json j = json::parse(read_file(dir / file));
  edit(j);
  if (file == "manifest.json")
    write_file(dir / file, j.dump(1));
  else
    replace_listed(dir, file, j.dump(1));
}

// Rewrites rng-rank0.safetensors with a "generator" of `gen_bytes` bytes (its first ones),
// keeping "default_generator" as it was.
void rewrite_rng(const fs::path& dir, size_t gen_bytes) {
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
Snapshot snapshot(World& w) {
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

const std::string kNotes = "my notes: do not delete\n";

// A character device to aim savers at. /dev/null itself as a normal user; as root (who could
// replace /dev/null if a saver renamed onto it) a private node with its numbers.
std::string device_path() {
  if (::geteuid() != 0) return "/dev/null";
  if (::mknod("null_device", S_IFCHR | 0666, makedev(1, 3)) != 0)
    throw SetupError(std::string("mknod null_device: ") + std::strerror(errno) + " (not aiming at /dev/null as root)");
  return "null_device";
}
bool is_char_device(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

// A symbolic link "link" to a directory "target_dir" holding a user file, or to a file.
void make_links() {
  fs::create_directory("target_dir");
  write_file("target_dir/user.txt", kNotes);
  write_file("target.txt", kNotes);
  fs::create_directory_symlink("target_dir", "link_dir");
  fs::create_symlink("target.txt", "link_file");
}
bool links_intact() {
  return fs::is_symlink("link_dir") && fs::is_symlink("link_file") && read_file("target_dir/user.txt") == kNotes &&
         read_file("target.txt") == kNotes;
}

// ---------------------------------------------------------------------------------------
// The cases, by section of the header

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

accel_status return_status(accel_context*, void* user) { return raw<accel_status>(*static_cast<int*>(user)); }

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
  null_case("accel_sim_charge_compute", "ctx", [](Env&) { return R(accel_sim_charge_compute(nullptr, 1.0, "x")); });
  for (double v : plus(kNonFinite, {-1, -1e-300}))
    add("accel_sim_charge_compute", "seconds=" + str(v), ARG, {"seconds", str(v)},
        [v](Env& e) { return R(accel_sim_charge_compute(e.a.ctx, v, "x"), e.a.ctx); });
}

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

// ---------------------------------------------------------------------------------------
// Language models

std::string g_lm_fixture;  // tests/fixtures/lm/gpt2-tiny, absolute (set by main from HEADER)

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
}

// Trackers: options (version, log_dir, writers, ACCEL_LOG_WITH), the order of the calls, and
// accel_log's arguments. Each case runs in a directory of its own.
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

void register_cases() {
  basics();
  tensors();
  context();
  models();
  losses();
  optimizers();
  data();
  training();
  processes();
  simulator();
  checkpoints();
  language_models();
  generation();
  lora();
  lm_data();
  memory_estimates();
  trackers();
  realtime();
}

// ---------------------------------------------------------------------------------------
// The child: one case

void check_message(Env& e, const Case& c, const std::string& where, const char* msg) {
  const std::string m = msg ? msg : "(NULL)";
  std::string missing;
  if (m.rfind(c.prefix, 0) != 0) missing += " [starts with \"" + c.prefix + "\"]";
  for (const std::string& n : c.needles)
    if (m.find(n) == std::string::npos) missing += " \"" + n + "\"";
  if (!missing.empty()) e.failures.push_back(where + " = \"" + m + "\" lacks" + missing);
}

int run_child(const Case& c) {
  Env e;
  try {
    e.a = make_world();
    const R r = c.body(e);
    const char* seen = r.ctx ? accel_last_error(r.ctx) : accel_last_error(nullptr);
    std::fprintf(stderr, "INFO: %s \"%s\"\n", accel_status_name(r.status),
                 r.status == ACCEL_OK ? ""
                 : seen               ? seen
                                      : "NULL");
    const bool accepted = r.status == c.expect || std::count(c.also.begin(), c.also.end(), r.status) > 0;
    if (!accepted) {
      e.failures.insert(e.failures.begin(), std::string("status ") + accel_status_name(r.status) + ", expected " +
                                                accel_status_name(c.expect) + " (message: \"" + (seen ? seen : "NULL") +
                                                "\")");
    } else if (r.status != ACCEL_OK) {
      check_message(e, c, "accel_last_error(NULL)", accel_last_error(nullptr));
      if (r.ctx) check_message(e, c, "accel_last_error(ctx)", accel_last_error(r.ctx));
    }
    try {
      normal_step(e.a);
    } catch (const SetupError& x) {
      e.failures.push_back(std::string("the context is unusable afterwards: ") + x.what());
    }
  } catch (const SetupError& x) {
    e.failures.push_back(std::string("setup: ") + x.what());
  } catch (const std::exception& x) {
    e.failures.push_back(std::string("exception in the case: ") + x.what());
  }
  for (const std::string& f : e.failures) std::fprintf(stderr, "FAIL: %s\n", f.c_str());
  std::fflush(stderr);
  return e.failures.empty() ? 0 : 1;
}

// ---------------------------------------------------------------------------------------
// The parent: the header's functions, and the cases run in children

std::vector<std::string> header_functions(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::string text, line;
  while (std::getline(f, line))
    if (line.find_first_not_of(" \t") == std::string::npos || line[line.find_first_not_of(" \t")] != '#')
      text += line + "\n";  // preprocessor lines (the ACCEL_API definitions) dropped
  for (size_t a; (a = text.find("/*")) != std::string::npos;) {
    const size_t b = text.find("*/", a + 2);
    text.erase(a, b == std::string::npos ? std::string::npos : b + 2 - a);
  }
  std::vector<std::string> fns;
  for (size_t at = 0; (at = text.find("ACCEL_API", at)) != std::string::npos; at += 9) {
    const size_t paren = text.find_first_of("(;{", at);
    if (paren == std::string::npos || text[paren] != '(') continue;
    size_t end = paren;
    while (end > at && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
    size_t begin = end;
    while (begin > at && (std::isalnum(static_cast<unsigned char>(text[begin - 1])) || text[begin - 1] == '_')) --begin;
    const std::string name = text.substr(begin, end - begin);
    if (name.rfind("accel_", 0) == 0) fns.push_back(name);
  }
  return fns;
}

struct Running {
  size_t index;
  pid_t pid;
  int fd;
  std::string output;
  std::chrono::steady_clock::time_point start;
};

void drain(Running& r) {
  char buf[4096];
  for (ssize_t n; (n = ::read(r.fd, buf, sizeof buf)) > 0;) r.output.append(buf, static_cast<size_t>(n));
}

std::string last_line(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  const size_t nl = s.rfind('\n');
  s = nl == std::string::npos ? s : s.substr(nl + 1);
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

// Why a finished child failed ("" when it passed).
std::string verdict(int status, const std::string& out) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    std::string w = "crashed: signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
    return out.empty() ? w : w + "; last output: " + last_line(out);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  std::string why;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("FAIL: ", 0) == 0) why += (why.empty() ? "" : "\n    ") + line.substr(6);
  if (why.empty())
    why = "exited with status " + std::to_string(WEXITSTATUS(status)) + "; last output: " + last_line(out);
  return why;
}

pid_t start_child(const Case& c, const fs::path& dir, int* fd) {
  int p[2];
  if (::pipe(p) != 0) return -1;
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    ::dup2(p[1], 2);
    ::close(p[1]);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, 1);
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || ::chdir(dir.c_str()) != 0) {
      std::fprintf(stderr, "FAIL: setup: cannot enter %s\n", dir.c_str());
      ::_exit(1);
    }
    ::_exit(run_child(c));
  }
  ::close(p[1]);
  if (pid < 0) {
    ::close(p[0]);
    return -1;
  }
  ::fcntl(p[0], F_SETFL, O_NONBLOCK);
  *fd = p[0];
  return pid;
}

}  // namespace

#if defined(__SANITIZE_ADDRESS__)
// Under AddressSanitizer (scripts/test's second run) a huge allocation must fail like a real
// one (ACCEL_ERR_OUT_OF_MEMORY), not abort the process. Options in ASAN_OPTIONS still apply.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const bool verbose = std::count(args.begin(), args.end(), "-v") > 0;
  args.erase(std::remove(args.begin(), args.end(), "-v"), args.end());
  if (args.empty()) {
    std::fprintf(stderr, "usage: %s HEADER [FILTER] [-v]\n", argv[0]);
    return 2;
  }
  const std::string header = args[0];
  g_lm_fixture = fs::absolute(fs::path(header).parent_path().parent_path().parent_path() / "tests/fixtures/lm/gpt2-tiny")
                     .lexically_normal()
                     .string();
  const std::string filter = args.size() > 1 ? args[1] : "";
  ::unsetenv("ACCEL_STRATEGY");  // the fixture is the plain one whatever the caller's environment
  register_cases();
  const std::vector<Case>& all = cases();

  // the generated list: every function of the header needs a case, every case a function
  const std::vector<std::string> declared = header_functions(header);
  const std::set<std::string> in_header(declared.begin(), declared.end());
  std::set<std::string> covered, names;
  bool list_ok = !in_header.empty();
  if (in_header.empty()) std::printf("misuse: no ACCEL_API functions found in %s\n", header.c_str());
  for (const Case& c : all) {
    covered.insert(c.fn);
    if (!names.insert(c.name).second) {
      std::printf("misuse: two cases are named %s\n", c.name.c_str());
      list_ok = false;
    }
    if (!in_header.count(c.fn)) {
      std::printf("misuse: case %s covers %s, which the header does not declare\n", c.name.c_str(), c.fn.c_str());
      list_ok = false;
    }
  }
  for (const std::string& f : in_header)
    if (!covered.count(f)) {
      std::printf("misuse: no case covers %s\n", f.c_str());
      list_ok = false;
    }

  std::vector<size_t> todo;
  for (size_t i = 0; i < all.size(); ++i)
    if (filter.empty() || all[i].name.find(filter) != std::string::npos) todo.push_back(i);

  char root_template[] = "/tmp/accel-misuse-XXXXXX";
  const char* root_dir = ::mkdtemp(root_template);
  if (!root_dir) {
    std::perror("mkdtemp");
    return 2;
  }
  const fs::path root(root_dir);
  std::vector<std::string> result(all.size()), info(all.size());
  std::vector<double> seconds(all.size(), 0.0);
  std::vector<Running> running;
  size_t next = 0;
  while (next < todo.size() || !running.empty()) {
    while (running.size() < static_cast<size_t>(kJobs) && next < todo.size()) {
      const size_t i = todo[next++];
      int fd = -1;
      const pid_t pid = start_child(all[i], root / std::to_string(i) / "work", &fd);
      if (pid < 0)
        result[i] = std::string("cannot start a child: ") + std::strerror(errno);
      else
        running.push_back({i, pid, fd, "", std::chrono::steady_clock::now()});
    }
    std::vector<pollfd> fds;
    for (const Running& r : running) fds.push_back({r.fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 50);
    for (size_t k = 0; k < running.size();) {
      Running& r = running[k];
      drain(r);
      int status = 0;
      const pid_t w = ::waitpid(r.pid, &status, WNOHANG);
      const bool late = std::chrono::steady_clock::now() - r.start > std::chrono::seconds(kCaseSeconds);
      if (w != r.pid && !late) {
        ++k;
        continue;
      }
      if (w != r.pid) {
        ::kill(r.pid, SIGKILL);
        ::waitpid(r.pid, &status, 0);
        drain(r);
        result[r.index] = "hung: killed after " + std::to_string(kCaseSeconds) + " s" +
                          (r.output.empty() ? "" : "; last output: " + last_line(r.output));
      } else {
        drain(r);
        result[r.index] = verdict(status, r.output);
        const size_t at = r.output.find("INFO: ");
        if (at != std::string::npos) info[r.index] = r.output.substr(at + 6, r.output.find('\n', at) - at - 6);
      }
      seconds[r.index] = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
      ::close(r.fd);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  std::error_code ec;
  fs::remove_all(root, ec);

  size_t failed = 0;
  for (size_t i : todo)
    if (verbose && result[i].empty()) std::printf("ok   %s: %s\n", all[i].name.c_str(), info[i].c_str());
  for (size_t i : todo)
    if (!result[i].empty()) {
      ++failed;
      std::printf("FAIL %s: %s\n", all[i].name.c_str(), result[i].c_str());
    }
  if (verbose && !todo.empty()) {
    const size_t slow =
        *std::max_element(todo.begin(), todo.end(), [&](size_t x, size_t y) { return seconds[x] < seconds[y]; });
    std::printf("slowest case: %s (%.2f s of the %d s allowed)\n", all[slow].name.c_str(), seconds[slow], kCaseSeconds);
  }
  size_t functions = 0;
  for (const std::string& f : covered) functions += in_header.count(f);
  std::printf("misuse: %zu cases, %zu passed, %zu failed (%zu functions covered of %zu declared)%s\n", todo.size(),
              todo.size() - failed, failed, functions, in_header.size(),
              filter.empty() ? "" : (" [filter \"" + filter + "\"]").c_str());
  return failed == 0 && list_ok ? 0 : 1;
}
