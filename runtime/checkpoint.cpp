// Checkpoints: save_state / load_state (docs/checkpoints.md).
//
// A checkpoint is a directory:
//   manifest.json              written last, by process 0: format, versions, world size,
//                              strategy, parameters, optimizer, layout, every file's size
//                              and CRC-32
//   model.safetensors          full layout (no strategy, DDP): the fp32 weights, by name
//   optimizer.safetensors      full layout: "<kind>/<parameter>" (exp_avg, exp_avg_sq, ...)
//   model-rank<R>.safetensors  sharded layout (ZeRO): the ranges of the flattened fp32
//   optimizer-rank<R>.safetensors  weights and optimizer state process R holds, written
//                              by R in parallel; the manifest lists each range
//   rng-rank<R>.safetensors    process R's generators (the context's, libtorch's default)
//   rank-<R>.json              process R's counters, loss scale, scheduler, data positions
// It is written in a hidden temporary directory beside the target and renamed into place
// once complete and flushed, so a crash leaves either the old state or the new one.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/files.h"
#include "runtime/checkpoint_format.h"
#include "runtime/paths.h"
#include "runtime/accelerator.h"
#include "comm/tensors.h"
#include "runtime/safetensors.h"
#include "runtime/strategy/strategy.h"
#include "runtime/version.h"

namespace accel {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string crc_hex(const std::string& bytes) { return safetensors::crc32_hex(bytes.data(), bytes.size()); }

void fsync_dir(const fs::path& dir) { files::fsync_dir(dir.string()); }

}  // namespace
}  // namespace accel

// Test-only observation of the save protocol: the library calls this at each numbered point
// of a save when the program defines it (and exports it: -rdynamic), and nothing otherwise.
// Only tests/checkpoint/checkpoint_crash.c defines it, to end the process abruptly there; the shipping
// library holds no crash code and reads no environment for it.
extern "C" __attribute__((weak, visibility("default"))) void accel_test_checkpoint_point(int point);

namespace accel {
namespace {

void protocol_point(int k) {
  if (accel_test_checkpoint_point) accel_test_checkpoint_point(k);
}

struct Written {
  std::string name;
  uint64_t bytes = 0;
  std::string crc;
};

// Host fp32 copies (contiguous) for writing; the views keep them alive.
struct TensorFile {
  std::vector<torch::Tensor> keep;
  std::vector<safetensors::TensorView> views;
  void add(const std::string& name, const torch::Tensor& t, bool flat) {
    torch::Tensor h = t.detach().to(torch::kCPU, torch::kFloat).contiguous();
    if (flat) h = h.reshape({-1});
    keep.push_back(h);
    views.push_back({name, "F32", h.sizes().vec(), h.data_ptr(), static_cast<size_t>(h.numel()) * sizeof(float)});
  }
  void add_bytes(const std::string& name, const torch::Tensor& u8) {
    torch::Tensor h = u8.contiguous();
    keep.push_back(h);
    views.push_back({name, "U8", {h.numel()}, h.data_ptr(), static_cast<size_t>(h.numel())});
  }
  Written write(const fs::path& dir, const std::string& name) const {
    const std::string header = safetensors::serialize_header(views, {{"format", "pt"}});
    auto [bytes, crc] = safetensors::write_tensors_atomic((dir / name).string(), header, views);
    return Written{name, bytes, crc};
  }
};

// A verified, parsed file of a checkpoint.
struct Loaded {
  torch::Tensor buf;  // the whole file, bytes
  safetensors::Header header;
  std::map<std::string, const safetensors::TensorInfo*> by_name;
  std::string path;
  const safetensors::TensorInfo& get(const std::string& name) const {
    auto it = by_name.find(name);
    ACCEL_CHECK(it != by_name.end(), Status::Format, path, ": no tensor '", name, "'");
    return *it->second;
  }
  // The entry as an fp32 tensor of `shape` (checked), copied out of the file.
  torch::Tensor tensor(const std::string& name, const std::vector<int64_t>& shape, const char* dtype = "F32") const {
    const auto& t = get(name);
    ACCEL_CHECK(t.dtype == dtype, Status::Format, path, ": tensor '", name, "' is ", t.dtype, ", expected ", dtype);
    ACCEL_CHECK(t.shape == shape, Status::Format, path, ": tensor '", name, "' has shape ",
                json(t.shape).dump(), ", expected ", json(shape).dump());
    const int64_t at = static_cast<int64_t>(header.data_start + t.begin), n = static_cast<int64_t>(t.end - t.begin);
    if (std::string(dtype) == "U8") return buf.narrow(0, at, n).clone();
    if (at % 4 == 0) return buf.narrow(0, at, n).view(torch::kFloat).view(shape);  // no copy
    torch::Tensor out = torch::empty(shape, torch::kFloat);  // a foreign file's unaligned data
    if (n > 0) std::memcpy(out.data_ptr(), static_cast<const char*>(buf.data_ptr()) + at, static_cast<size_t>(n));
    return out;
  }
};

// Reads a whole file into a byte tensor.
torch::Tensor read_buffer(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    fail(status_of_errno(e), "cannot open '", p.string(), "': ", std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail(Status::IO, "cannot stat '", p.string(), "'");
  }
  torch::Tensor buf = torch::empty({static_cast<int64_t>(st.st_size)}, torch::kByte);
  char* dst = static_cast<char*>(buf.data_ptr());
  size_t done = 0;
  while (done < static_cast<size_t>(st.st_size)) {
    ssize_t r = ::read(fd, dst + done, std::min<size_t>(static_cast<size_t>(st.st_size) - done, 1u << 30));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int e = errno;
      ::close(fd);
      fail(Status::IO, "cannot read '", p.string(), "'", r < 0 ? std::string(": ") + std::strerror(e) : " (it shrank)");
    }
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  return buf;
}

// Reads a file the manifest lists and checks its size and CRC-32.
using Files = std::map<std::string, ckpt::FileEntry>;

torch::Tensor read_checked(const fs::path& dir, const Files& files, const std::string& name) {
  auto it = files.find(name);
  ACCEL_CHECK(it != files.end(), Status::Format, (dir / ckpt::names::kManifest).string(), " does not list '", name, "'");
  const fs::path p = dir / name;
  std::error_code ec;
  ACCEL_CHECK(fs::is_regular_file(p, ec), Status::IO, p.string(), ": missing from the checkpoint");
  const ckpt::FileEntry& f = it->second;
  const uintmax_t size = fs::file_size(p, ec);
  ACCEL_CHECK(!ec && size == f.bytes, Status::Format, p.string(), ": ", ec ? std::string("?") : std::to_string(size),
              " bytes, the manifest says ", f.bytes, " (truncated?)");
  torch::Tensor bytes = read_buffer(p);
  ACCEL_CHECK(static_cast<uint64_t>(bytes.numel()) == f.bytes, Status::Format, p.string(), ": ", bytes.numel(),
              " bytes, the manifest says ", f.bytes, " (truncated?)");
  const std::string crc = safetensors::crc32_hex(bytes.data_ptr(), static_cast<size_t>(bytes.numel()));
  ACCEL_CHECK(crc == f.crc32, Status::Format, p.string(), ": CRC-32 ", crc, " does not match the manifest's ", f.crc32,
              " (corrupted)");
  return bytes;
}

std::string_view text_of(const torch::Tensor& bytes) {
  return {static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel())};
}

Loaded load_tensors(const fs::path& dir, const Files& files, const std::string& name) {
  Loaded l;
  l.path = (dir / name).string();
  l.buf = read_checked(dir, files, name);
  l.header = safetensors::parse(static_cast<const uint8_t*>(l.buf.data_ptr()), static_cast<size_t>(l.buf.numel()), l.path);
  for (const auto& t : l.header.tensors) l.by_name[t.name] = &t;
  return l;
}

// Highest N of the complete checkpoint_N directories (with a manifest) under root; -1 if none.
int64_t latest_index(const fs::path& root, std::vector<std::pair<int64_t, fs::path>>* all = nullptr) {
  int64_t best = -1;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return -1;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    const int64_t k = ckpt::names::checkpoint_index(n);
    if (k < 0 || !fs::exists(e.path() / ckpt::names::kManifest, ec)) continue;
    if (all) all->push_back({k, e.path()});
    best = std::max(best, k);
  }
  if (all) std::sort(all->begin(), all->end());
  return best;
}

// Moves `tmp` to `target` in one step (base/files.h: a rename, or an exchange with an existing
// target). The caller checked (paths::) that an existing target is an earlier checkpoint and
// that `old` holds nothing but a save's leftovers.
void publish(const fs::path& tmp, const fs::path& target, const fs::path& old) {
  const files::Result r = files::publish_dir(tmp.string(), target.string(), old.string());
  ACCEL_CHECK(r, Status::IO, "cannot publish the checkpoint: ", r.message);
}

const char* precision_name(Precision p) { return p == Precision::BF16 ? "bf16" : p == Precision::FP16 ? "fp16" : "no"; }

}  // namespace

void Accelerator::agree(Status status, const std::string& message) {
  if (comm_->size() > 1) {
    int32_t code = static_cast<int32_t>(status);
    comm::host_broadcast(*comm_, &code, 1, comm::DataType::Int32, 0);
    status = static_cast<Status>(code);
    if (status != Status::Ok) {  // process 0's words on every process
      int64_t n = comm_->rank() == 0 ? static_cast<int64_t>(message.size()) : 0;
      comm::host_broadcast(*comm_, &n, 1, comm::DataType::Int64, 0);
      std::string text = comm_->rank() == 0 ? message : std::string(static_cast<size_t>(n), '\0');
      if (n > 0) comm::host_broadcast(*comm_, text.data(), static_cast<size_t>(n), comm::DataType::Uint8, 0);
      throw Error(status, comm_->rank() == 0 ? text : "process 0: " + text);
    }
  }
  if (status != Status::Ok) throw Error(status, message);
}

// Who holds a project: "pid 1234 on host h since 2026-11-27 14:10:00 UTC (process 0 of 4)".
static std::string project_holder(int world) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char when[64] = "?";
  std::tm tm{};
  if (gmtime_r(&now, &tm)) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return "pid " + std::to_string(getpid()) + " on host " + host + " since " + when + " (process 0 of " +
         std::to_string(world) + ")";
}

void Accelerator::set_project(const ProjectConfig& p) {
  ACCEL_CHECK(!p.dir.empty(), Status::InvalidArgument, "project_dir is empty");
  ACCEL_CHECK(p.total_limit >= 0, Status::InvalidArgument, "total_limit must be >= 0, got ", p.total_limit);
  // One run per project: process 0 takes the lock for the world (every process agrees on the
  // outcome), and keeps it until the context ends or names another project.
  const bool same = p.dir == project_.dir;
  Status st = Status::Ok;
  std::string why;
  int fd = -1;
  if (comm_->rank() == 0 && !same) {
    try {
      std::error_code ec;
      fs::create_directories(p.dir, ec);
      if (ec) fail(status_of_errno(ec.value()), "cannot create the project directory ", p.dir, ": ", ec.message());
      const std::string lock = (fs::path(p.dir) / ".accel.lock").string();
      files::FileLock l = files::lock_file(lock, project_holder(comm_->size()));
      if (l.busy)
        fail(Status::InvalidState, "the project directory ", p.dir, " belongs to another run: ", l.holder, " holds ", lock,
             "; two runs on one project would overwrite each other's checkpoints (let that run end, or give this one "
             "its own project directory)");
      if (!l.result) fail(status_of_errno(l.result.err), l.result.message);
      fd = l.fd;
    } catch (const Error& e) {
      st = e.status();
      why = e.what();
    }
  }
  try {
    agree(st, why);
  } catch (...) {
    files::unlock_file(fd);
    throw;
  }
  if (!same) {
    files::unlock_file(project_lock_);
    project_lock_ = fd;
  }
  project_ = p;
}

namespace {

// What dead runs (or a save or a pruning cut short) left in a project's checkpoints/: the
// hidden .checkpoint_N.tmp / .old / .deleting directories of accel's own files. Removed at
// the next save, which the project's lock makes the only writer there.
void clean_leftovers(const fs::path& root, const fs::path& keep) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.size() < 2 || n[0] != '.' || it->path() == keep) continue;
    for (const char* suffix : {".tmp", ".old", ".deleting"}) {
      const std::string sx(suffix);
      if (n.size() > sx.size() + 1 && n.compare(n.size() - sx.size(), sx.size(), sx) == 0 &&
          ckpt::names::checkpoint_index(n.substr(1, n.size() - 1 - sx.size())) >= 0 &&
          paths::is_checkpoint_dir(it->path(), /*need_manifest=*/false))
        stale.push_back(it->path());
    }
  }
  for (const auto& d : stale) fs::remove_all(d, ec);
}

// Removes a published checkpoint so that no reader ever sees part of it: renamed out of the
// way (.checkpoint_N.deleting, which nothing loads) in one step, then deleted; a run killed
// in between leaves the hidden directory, which the next save removes.
void remove_checkpoint(const fs::path& dir) {
  const fs::path gone = dir.parent_path() / ("." + dir.filename().string() + ".deleting");
  std::error_code ec;
  fs::rename(dir, gone, ec);
  if (!ec) fs::remove_all(gone, ec);
}

}  // namespace

std::string Accelerator::save_state(const std::string& dir_arg) {
  ACCEL_CHECK(model_ != nullptr, Status::InvalidState, "save_state before accel_prepare bound a model");
  ACCEL_CHECK(!pending_, Status::InvalidState,
              "save_state between a backward and its optimizer step would lose the accumulated gradients; save after "
              "accel_step returns with a real step");
  const int rank = comm_->rank(), world = comm_->size();
  fs::path target;
  if (dir_arg.empty()) {
    ACCEL_CHECK(!project_.dir.empty(), Status::InvalidArgument,
                "save_state with no directory needs a project directory (accel_set_project)");
    const fs::path root = fs::path(project_.dir) / "checkpoints";
    int64_t next = rank == 0 ? latest_index(root) + 1 : 0;
    comm::host_broadcast(*comm_, &next, 1, comm::DataType::Int64, 0);  // one name everywhere
    target = root / ckpt::names::checkpoint_dir(next);
  } else {
    target = fs::path(dir_arg);
  }
  target = target.lexically_normal();
  if (target.filename().empty()) target = target.parent_path();
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const fs::path tmp = parent / ("." + target.filename().string() + ".tmp");
  const fs::path old = parent / ("." + target.filename().string() + ".old");

  // 1. process 0 checks that nothing but an earlier checkpoint would be replaced, then makes
  //    a fresh temporary directory (a crashed save's leftovers go)
  Status st = Status::Ok;
  std::string why;
  if (rank == 0) {
    try {
      paths::check_checkpoint_target(target, dir_arg.empty() ? "the project's next checkpoint" : "dir");
      paths::check_leftover(tmp, target);
      paths::check_leftover(old, target);
      if (dir_arg.empty()) clean_leftovers(parent, tmp);
      std::error_code ec;
      fs::create_directories(parent, ec);
      if (!ec) fs::remove_all(tmp, ec);
      if (!ec) fs::create_directory(tmp, ec);
      if (ec) fail(status_of_errno(ec.value()), "cannot create the checkpoint directory ", tmp.string(), ": ", ec.message());
    } catch (const Error& e) {
      st = e.status();
      why = e.what();
    }
  }
  agree(st, why);
  protocol_point(1);

  // 2. every process writes its files
  const auto& params = model_->parameters();
  const auto& names = model_->parameter_names();
  std::vector<Written> written;
  ckpt::RankState rs;
  const bool sharded = strategy_->shards_state();
  const std::vector<std::string> kinds = opt_ ? opt_->state_kinds() : std::vector<std::string>{};
  torch::NoGradGuard ng;
  if (sharded) {
    TensorFile model_file, opt_file;
    for (const auto& p : strategy_->pieces()) {
      model_file.add(names[p.param], strategy_->piece_state("weight", p), true);
      for (const auto& k : kinds) {
        torch::Tensor t = strategy_->piece_state(k, p);
        if (t.defined()) opt_file.add(k + "/" + names[p.param], t, true);
      }
      rs.pieces.push_back({p.param, p.start, p.len});
    }
    if (rank == 0)  // state every process holds whole (Adafactor's factors under ZeRO), in its own shape
      for (const auto& k : kinds)
        for (size_t i = 0; i < params.size(); ++i) {
          torch::Tensor t = strategy_->replicated_state(k, i);
          if (t.defined()) opt_file.add(k + "/" + names[i], t, true);
        }
    written.push_back(model_file.write(tmp, ckpt::names::model_shard(rank)));
    protocol_point(2);
    if (opt_) written.push_back(opt_file.write(tmp, ckpt::names::optimizer_shard(rank)));
  } else if (rank == 0) {
    TensorFile model_file, opt_file;
    for (size_t i = 0; i < params.size(); ++i) model_file.add(names[i], params[i], false);
    written.push_back(model_file.write(tmp, ckpt::names::kModel));
    protocol_point(2);
    if (opt_) {
      for (const auto& k : kinds) {
        const auto state = opt_->state(k);
        for (size_t i = 0; i < params.size(); ++i)
          if (state[i].defined()) opt_file.add(k + "/" + names[i], state[i], false);
      }
      written.push_back(opt_file.write(tmp, ckpt::names::kOptimizer));
    }
  }
  {
    TensorFile rng;
    rng.add_bytes("generator", gen_.get_state());
    at::Generator def = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lk(def.mutex());
    rng.add_bytes("default_generator", def.get_state());
    written.push_back(rng.write(tmp, ckpt::names::rng(rank)));
  }
  rs.rank = rank;
  rs.optimizer_steps = optimizer_steps_;
  rs.micro_steps = micro_steps_;
  rs.loss_scale = scaler_.scale();
  rs.growth_tracker = scaler_.growth_tracker();
  if (sched_) rs.scheduler_steps = sched_->steps();
  rs.optimizer_state_steps = strategy_->optimizer_state_steps(opt_.get());
  for (const auto& l : loaders_) rs.loaders.push_back({l->epoch(), l->position()});
  for (const auto& w : written) rs.files[w.name] = {w.bytes, w.crc};
  const std::string rank_name = ckpt::names::rank_state(rank);
  safetensors::write_file_atomic((tmp / rank_name).string(), ckpt::to_json(rs));
  protocol_point(3);
  comm_->barrier();

  // 3. process 0 writes the manifest last, then publishes the directory
  if (rank == 0) {
    try {
      ckpt::Manifest m;
      m.accel_version = kVersion;
      m.world_size = world;
      m.strategy = strategy_name(opts_.strategy);
      m.zero_stage = strategy_->zero_stage();
      m.precision = precision_name(opts_.precision);
      m.layout = sharded ? "sharded" : "full";
      for (size_t i = 0; i < params.size(); ++i) m.parameters.push_back({names[i], params[i].sizes().vec()});
      if (opt_) {
        m.optimizer_kind = opt_->kind();
        m.optimizer_state = kinds;
      }
      for (int r = 0; r < world; ++r) {
        const std::string rn = ckpt::names::rank_state(r);
        const std::string bytes = safetensors::read_file((tmp / rn).string());
        const ckpt::RankState other = ckpt::parse_rank(bytes, (tmp / rn).string());
        for (const auto& [name, f] : other.files) m.files[name] = f;
        m.files[rn] = {bytes.size(), crc_hex(bytes)};
        if (sharded) {
          ckpt::Shard sh;
          sh.rank = r;
          sh.model = ckpt::names::model_shard(r);
          if (opt_) sh.optimizer = ckpt::names::optimizer_shard(r);
          sh.pieces = other.pieces;
          m.shards.push_back(sh);
        }
      }
      protocol_point(4);
      safetensors::write_file_atomic((tmp / ckpt::names::kManifest).string(), ckpt::to_json(m));
      fsync_dir(tmp);
      protocol_point(5);
      publish(tmp, target, old);
      protocol_point(6);
      if (dir_arg.empty() && project_.total_limit > 0) {  // the oldest go first (checkpoints only)
        std::vector<std::pair<int64_t, fs::path>> all;
        latest_index(target.parent_path(), &all);
        for (size_t i = 0; i + static_cast<size_t>(project_.total_limit) < all.size(); ++i) {
          if (paths::is_checkpoint_dir(all[i].second, /*need_manifest=*/true)) remove_checkpoint(all[i].second);
        }
        fsync_dir(target.parent_path());
      }
    } catch (const std::exception& e) {
      const auto* ae = dynamic_cast<const Error*>(&e);
      st = ae && ae->status() == Status::OutOfMemory ? Status::OutOfMemory : Status::IO;
      why = "saving the checkpoint " + target.string() + " failed: " + e.what();
    }
  }
  agree(st, why);
  return target.string();
}

std::string Accelerator::load_state(const std::string& dir_arg) {
  ACCEL_CHECK(model_ != nullptr, Status::InvalidState, "load_state before accel_prepare bound a model");
  const int rank = comm_->rank(), world = comm_->size();
  fs::path dir;
  if (dir_arg.empty()) {
    ACCEL_CHECK(!project_.dir.empty(), Status::InvalidArgument,
                "load_state with no directory needs a project directory (accel_set_project)");
    const fs::path root = fs::path(project_.dir) / "checkpoints";
    const int64_t latest = latest_index(root);
    ACCEL_CHECK(latest >= 0, Status::IO, "no complete checkpoint under ", root.string());
    dir = root / ckpt::names::checkpoint_dir(latest);
  } else {
    dir = fs::path(dir_arg);
  }
  std::error_code ec;
  ACCEL_CHECK(fs::is_directory(dir, ec), Status::IO, "no checkpoint directory ", dir.string(), " (there is ",
              paths::describe(dir), ")");
  const fs::path mfile = dir / ckpt::names::kManifest;
  const std::string mpath = mfile.string();
  ACCEL_CHECK(fs::is_regular_file(mfile, ec), Status::IO, mpath, ": missing (an incomplete checkpoint?)");

  // Everything is read, parsed and checked into memory first; the context changes only
  // once nothing can fail on any process (a refused load leaves every context as it was).
  struct Staged {
    std::map<std::string, std::vector<torch::Tensor>> full;
    std::vector<std::string> kinds;
    ckpt::RankState rs;
    torch::Tensor g1, g2;
    int old_world = 1;
  };
  const auto& params = model_->parameters();
  at::Generator def = at::detail::getDefaultCPUGenerator();  // the process-wide generator
  auto stage = [&]() {
    Staged out;
    auto& full = out.full;
    auto& kinds = out.kinds;
    const ckpt::Manifest m = ckpt::parse_manifest(safetensors::read_file(mpath), mpath);
    const Files& files = m.files;
    const int old_world = m.world_size;
    out.old_world = old_world;

    // the parameters must be the model's
    const auto& names = model_->parameter_names();
    ACCEL_CHECK(m.parameters.size() == params.size(), Status::InvalidArgument, mpath, ": the checkpoint has ",
                m.parameters.size(), " parameters, the model ", params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      ACCEL_CHECK(m.parameters[i].name == names[i], Status::InvalidArgument, mpath, ": parameter ", i, " is '",
                  m.parameters[i].name, "' in the checkpoint, '", names[i], "' in the model");
      ACCEL_CHECK(m.parameters[i].shape == params[i].sizes().vec(), Status::InvalidArgument, mpath, ": '", names[i],
                  "' has shape ", json(m.parameters[i].shape).dump(), " in the checkpoint, ",
                  json(params[i].sizes().vec()).dump(), " in the model");
    }
    ACCEL_CHECK(!opt_ || !m.optimizer_kind || *m.optimizer_kind == opt_->kind(), Status::InvalidArgument, mpath,
                ": the checkpoint's optimizer is ", m.optimizer_kind.value_or("none"), ", this context's is ",
                opt_ ? opt_->kind() : "none");
    if (opt_ && m.optimizer_kind) kinds = opt_->state_kinds();

    full["weight"] = std::vector<torch::Tensor>(params.size());
    for (const auto& k : kinds) full[k] = std::vector<torch::Tensor>(params.size());
    if (m.layout == "full") {
      Loaded mf = load_tensors(dir, files, ckpt::names::kModel);
      for (size_t i = 0; i < params.size(); ++i) full["weight"][i] = mf.tensor(names[i], params[i].sizes().vec());
      if (!kinds.empty()) {
        Loaded of = load_tensors(dir, files, ckpt::names::kOptimizer);
        for (const auto& k : kinds)
          for (size_t i = 0; i < params.size(); ++i)
            if (of.by_name.count(k + "/" + names[i]))
              full[k][i] = of.tensor(k + "/" + names[i], opt_->state_shape(k, params[i].sizes().vec()));
      }
    } else {  // "sharded": reassemble every parameter from the ranges the old processes held
      std::vector<std::vector<std::pair<int64_t, int64_t>>> covered(params.size());
      for (auto& [k, v] : full)
        for (size_t i = 0; i < params.size(); ++i) v[i] = torch::zeros({params[i].numel()}, torch::kFloat);
      std::vector<std::vector<bool>> opt_seen(kinds.size(), std::vector<bool>(params.size(), false));
      // a kind whose state has another shape than its parameter is stored whole, not in pieces
      auto whole = [&](const std::string& kind, size_t i) {
        return opt_->state_shape(kind, params[i].sizes().vec()) != params[i].sizes().vec();
      };
      for (const auto& sh : m.shards) {
        Loaded mf = load_tensors(dir, files, sh.model);
        std::optional<Loaded> of;
        if (!kinds.empty() && sh.optimizer) of = load_tensors(dir, files, *sh.optimizer);
        for (const auto& pc : sh.pieces) {
          ACCEL_CHECK(pc.param < params.size() && pc.start + pc.len <= params[pc.param].numel(), Status::Format, mpath,
                      ": a shard range [", pc.start, ", ", pc.start + pc.len, ") of parameter ", pc.param,
                      " is outside it");
          covered[pc.param].push_back({pc.start, pc.start + pc.len});
          full["weight"][pc.param].narrow(0, pc.start, pc.len).copy_(mf.tensor(names[pc.param], {pc.len}));
          for (size_t k = 0; k < kinds.size(); ++k) {
            const std::string key = kinds[k] + "/" + names[pc.param];
            if (!of || !of->by_name.count(key) || whole(kinds[k], pc.param)) continue;
            full[kinds[k]][pc.param].narrow(0, pc.start, pc.len).copy_(of->tensor(key, {pc.len}));
            opt_seen[k][pc.param] = true;
          }
        }
        // state in its own shape, whole in the file that holds it (Adafactor's factors)
        for (size_t k = 0; k < kinds.size() && of; ++k)
          for (size_t i = 0; i < params.size(); ++i) {
            const std::string key = kinds[k] + "/" + names[i];
            if (!whole(kinds[k], i) || !of->by_name.count(key)) continue;
            full[kinds[k]][i] = of->tensor(key, opt_->state_shape(kinds[k], params[i].sizes().vec()));
            opt_seen[k][i] = true;
          }
      }
      for (size_t i = 0; i < params.size(); ++i) {
        auto& c = covered[i];
        std::sort(c.begin(), c.end());
        int64_t at = 0;
        for (const auto& [a, b] : c) {
          ACCEL_CHECK(a == at, Status::Format, mpath, ": the shards ", a < at ? "overlap" : "leave a gap", " in '",
                      names[i], "' at element ", std::min(a, at));
          at = b;
        }
        ACCEL_CHECK(at == params[i].numel(), Status::Format, mpath, ": the shards cover ", at, " of the ",
                    params[i].numel(), " elements of '", names[i], "'");
        full["weight"][i] = full["weight"][i].view(params[i].sizes());
        for (size_t k = 0; k < kinds.size(); ++k)
          full[kinds[k]][i] = !opt_seen[k][i]      ? torch::Tensor()
                              : whole(kinds[k], i) ? full[kinds[k]][i]
                                                   : full[kinds[k]][i].view(params[i].sizes());
      }
    }
    // this process's counters and generators: its own when the world is the same size
    const int src = rank < old_world ? rank : 0;
    const std::string rank_name = ckpt::names::rank_state(src);
    const std::string rpath = (dir / rank_name).string();
    out.rs = ckpt::parse_rank(text_of(read_checked(dir, files, rank_name)), rpath);
    const ckpt::RankState& rs = out.rs;
    ACCEL_CHECK(rs.rank == src, Status::Format, rpath, ": field 'rank' must be ", src, ", got ", rs.rank);
    Loaded rng = load_tensors(dir, files, ckpt::names::rng(src));
    auto generator_state = [&](const char* name, const torch::Tensor& current) {
      const auto& info = rng.get(name);
      const int64_t n = static_cast<int64_t>(info.end - info.begin);
      ACCEL_CHECK(n == current.numel(), Status::Format, rng.path, ": tensor '", name, "' holds ", n,
                  " bytes; a CPU generator's state has ", current.numel());
      return rng.tensor(name, {n}, "U8");
    };
    out.g1 = generator_state("generator", gen_.get_state());
    {
      std::lock_guard<std::mutex> lk(def.mutex());
      out.g2 = generator_state("default_generator", def.get_state());
    }
    ACCEL_CHECK(rs.loaders.size() == loaders_.size(), Status::InvalidArgument, rpath, ": the checkpoint has ",
                rs.loaders.size(), " prepared data loaders, this context ", loaders_.size());

    return out;
  };
  std::optional<Staged> staged;
  Status mine = Status::Ok;
  std::string why;
  try {
    staged = stage();
  } catch (const Error& e) {
    if (comm_->size() == 1) throw;
    mine = e.status();
    why = e.what();
  }
  if (comm_->size() > 1) {  // every process loads, or none does
    std::vector<int32_t> codes(static_cast<size_t>(comm_->size()));
    int32_t code = static_cast<int32_t>(mine);
    comm::host_all_gather(*comm_, &code, codes.data(), 1, comm::DataType::Int32);
    if (mine != Status::Ok) throw Error(mine, why);
    for (int r = 0; r < comm_->size(); ++r)
      if (codes[static_cast<size_t>(r)] != 0)
        fail(static_cast<Status>(codes[static_cast<size_t>(r)]), "process ", r, " refused the checkpoint ", dir.string(),
             " (its error says why); nothing was loaded");
  }
  auto& full = staged->full;
  const ckpt::RankState& rs = staged->rs;
  const int old_world = staged->old_world;

  // apply: nothing below fails on input that passed the checks above
  torch::NoGradGuard ng;
  strategy_->restore(full, rs.optimizer_state_steps, opt_.get());
  scaler_.restore(rs.loss_scale, rs.growth_tracker);
  if (sched_ && rs.scheduler_steps) sched_->restore(*rs.scheduler_steps);
  optimizer_steps_ = rs.optimizer_steps;
  micro_steps_ = rs.micro_steps;
  for (size_t i = 0; i < loaders_.size(); ++i) {
    int64_t pos = std::min<int64_t>(rs.loaders[i].position, int64_t{1} << 40);  // past any epoch's end
    if (old_world != world) pos = pos * old_world / world;  // the same share of the epoch's global batches
    loaders_[i]->restore(rs.loaders[i].epoch, pos);
  }
  if (rank < old_world) {
    gen_.set_state(staged->g1);
    std::lock_guard<std::mutex> lk(def.mutex());
    def.set_state(staged->g2);
  }
  accum_count_ = 0;
  pending_ = sync_ = unscaled_ = found_inf_ = false;
  end_of_data_ = false;
  if (comm_->size() > 1) comm_->barrier();
  return dir.string();
}

}  // namespace accel
