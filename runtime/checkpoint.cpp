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
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "include/accel/accel.h"
#include "runtime/runtime.h"
#include "runtime/safetensors.h"
#include "runtime/zero.h"

namespace accel {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int kFormatVersion = 1;

std::string crc_hex(const std::string& bytes) { return safetensors::crc32_hex(bytes.data(), bytes.size()); }

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// A testing aid: ACCEL_CHECKPOINT_CRASH_AT=K ends the process abruptly at the K-th point of
// the save protocol (tests/test_capi.cpp kills saves at every point this way).
void crash_point(int k) {
  static const int at = [] {
    const char* v = std::getenv("ACCEL_CHECKPOINT_CRASH_AT");
    return v ? std::atoi(v) : 0;
  }();
  if (at == k) ::_exit(86);
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

json read_json(const fs::path& p) {
  std::string text = safetensors::read_file(p.string());
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(Status::Format, p.string(), ": not valid JSON: ", e.what());
  }
}

// Reads a whole file into a byte tensor.
torch::Tensor read_buffer(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  ACCEL_CHECK(fd >= 0, Status::IO, "cannot open '", p.string(), "': ", std::strerror(errno));
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
torch::Tensor read_checked(const fs::path& dir, const json& files, const std::string& name) {
  ACCEL_CHECK(files.contains(name), Status::Format, (dir / "manifest.json").string(), " does not list '", name, "'");
  const fs::path p = dir / name;
  std::error_code ec;
  ACCEL_CHECK(fs::exists(p, ec), Status::IO, p.string(), ": missing from the checkpoint");
  torch::Tensor bytes = read_buffer(p);
  const json& f = files[name];
  const uint64_t want = f.value("bytes", uint64_t{0});
  ACCEL_CHECK(static_cast<uint64_t>(bytes.numel()) == want, Status::Format, p.string(), ": ", bytes.numel(),
              " bytes, the manifest says ", want, " (truncated?)");
  const std::string crc = safetensors::crc32_hex(bytes.data_ptr(), static_cast<size_t>(bytes.numel()));
  ACCEL_CHECK(crc == f.value("crc32", std::string()), Status::Format, p.string(), ": CRC-32 ", crc,
              " does not match the manifest's ", f.value("crc32", std::string()), " (corrupted)");
  return bytes;
}

Loaded load_tensors(const fs::path& dir, const json& files, const std::string& name) {
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
    if (n.rfind("checkpoint_", 0) != 0) continue;
    const std::string num = n.substr(11);
    if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos || num.size() > 15) continue;
    if (!fs::exists(e.path() / "manifest.json", ec)) continue;
    const int64_t k = std::stoll(num);
    if (all) all->push_back({k, e.path()});
    best = std::max(best, k);
  }
  if (all) std::sort(all->begin(), all->end());
  return best;
}

// Moves `tmp` to `target` in one step: a rename, or an exchange with an existing target
// (then the old one, now at tmp, is removed).
void publish(const fs::path& tmp, const fs::path& target) {
  std::error_code ec;
  if (fs::exists(target, ec)) {
#ifdef SYS_renameat2
    if (::syscall(SYS_renameat2, AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), 2 /* RENAME_EXCHANGE */) == 0) {
      fsync_dir(target.parent_path());
      fs::remove_all(tmp, ec);
      return;
    }
#endif
    const fs::path old = target.parent_path() / ("." + target.filename().string() + ".old");
    fs::remove_all(old, ec);
    fs::rename(target, old, ec);
    ACCEL_CHECK(!ec, Status::IO, "cannot move the old checkpoint ", target.string(), " aside: ", ec.message());
    fs::rename(tmp, target, ec);
    ACCEL_CHECK(!ec, Status::IO, "cannot rename ", tmp.string(), " to ", target.string(), ": ", ec.message());
    fsync_dir(target.parent_path());
    fs::remove_all(old, ec);
    return;
  }
  fs::rename(tmp, target, ec);
  ACCEL_CHECK(!ec, Status::IO, "cannot rename ", tmp.string(), " to ", target.string(), ": ", ec.message());
  fsync_dir(target.parent_path());
}

const char* precision_name(Precision p) { return p == Precision::BF16 ? "bf16" : p == Precision::FP16 ? "fp16" : "no"; }

}  // namespace

void Accelerator::set_project(const ProjectConfig& p) {
  ACCEL_CHECK(!p.dir.empty(), Status::InvalidArgument, "the project directory is empty");
  ACCEL_CHECK(p.total_limit >= 0, Status::InvalidArgument, "total_limit must be >= 0, got ", p.total_limit);
  project_ = p;
}

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
    comm_->broadcast(&next, &next, 1, comm::DataType::Int64, 0)->wait();  // one name everywhere
    target = root / ("checkpoint_" + std::to_string(next));
  } else {
    target = fs::path(dir_arg);
  }
  target = target.lexically_normal();
  if (target.filename().empty()) target = target.parent_path();
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const fs::path tmp = parent / ("." + target.filename().string() + ".tmp");

  // 1. process 0 makes a fresh temporary directory (a crashed save's leftovers go)
  int32_t ok = 1;
  std::string why;
  if (rank == 0) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (!ec) fs::remove_all(tmp, ec);
    if (!ec) fs::create_directory(tmp, ec);
    if (ec) {
      ok = 0;
      why = ec.message();
    }
  }
  comm_->broadcast(&ok, &ok, 1, comm::DataType::Int32, 0)->wait();
  ACCEL_CHECK(ok, Status::IO, "cannot create the checkpoint directory ", tmp.string(),
              rank == 0 ? ": " + why : std::string(" (process 0 could not)"));
  crash_point(1);

  // 2. every process writes its files
  const auto& params = model_->parameters();
  const auto& names = model_->parameter_names();
  std::vector<Written> written;
  json pieces = json::array();
  const bool sharded = zero_ != nullptr;
  const std::vector<std::string> kinds = opt_ ? opt_->state_kinds() : std::vector<std::string>{};
  torch::NoGradGuard ng;
  if (sharded) {
    TensorFile model_file, opt_file;
    for (const auto& p : zero_->pieces()) {
      model_file.add(names[p.param], zero_->piece_state("weight", p), true);
      for (const auto& k : kinds) {
        torch::Tensor t = zero_->piece_state(k, p);
        if (t.defined()) opt_file.add(k + "/" + names[p.param], t, true);
      }
      pieces.push_back({p.param, p.start, p.len});
    }
    written.push_back(model_file.write(tmp, "model-rank" + std::to_string(rank) + ".safetensors"));
    crash_point(2);
    if (opt_) written.push_back(opt_file.write(tmp, "optimizer-rank" + std::to_string(rank) + ".safetensors"));
  } else if (rank == 0) {
    TensorFile model_file, opt_file;
    for (size_t i = 0; i < params.size(); ++i) model_file.add(names[i], params[i], false);
    written.push_back(model_file.write(tmp, "model.safetensors"));
    crash_point(2);
    if (opt_) {
      for (const auto& k : kinds) {
        const auto st = opt_->state(k);
        for (size_t i = 0; i < params.size(); ++i)
          if (st[i].defined()) opt_file.add(k + "/" + names[i], st[i], false);
      }
      written.push_back(opt_file.write(tmp, "optimizer.safetensors"));
    }
  }
  {
    TensorFile rng;
    rng.add_bytes("generator", gen_.get_state());
    at::Generator def = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lk(def.mutex());
    rng.add_bytes("default_generator", def.get_state());
    written.push_back(rng.write(tmp, "rng-rank" + std::to_string(rank) + ".safetensors"));
  }
  json rj;
  rj["rank"] = rank;
  rj["optimizer_steps"] = optimizer_steps_;
  rj["micro_steps"] = micro_steps_;
  rj["loss_scale"] = scaler_.scale();
  rj["growth_tracker"] = scaler_.growth_tracker();
  rj["scheduler_steps"] = sched_ ? json(sched_->steps()) : json(nullptr);
  rj["optimizer_state_steps"] = zero_ ? zero_->steps() : (opt_ ? opt_->state_steps() : 0);
  json loaders = json::array();
  for (const auto& l : loaders_) loaders.push_back({{"epoch", l->epoch()}, {"position", l->position()}});
  rj["loaders"] = loaders;
  rj["pieces"] = pieces;
  json files = json::object();
  for (const auto& w : written) files[w.name] = {{"bytes", w.bytes}, {"crc32", w.crc}};
  rj["files"] = files;
  const std::string rank_name = "rank-" + std::to_string(rank) + ".json";
  safetensors::write_file_atomic((tmp / rank_name).string(), rj.dump(1));
  crash_point(3);
  comm_->barrier();

  // 3. process 0 writes the manifest last, then publishes the directory
  if (rank == 0) {
    ok = 1;
    try {
      json m;
      m["format"] = "accel-checkpoint";
      m["format_version"] = kFormatVersion;
      m["accel_version"] = ACCEL_VERSION_STRING;
      m["world_size"] = world;
      m["strategy"] = strategy_name(opts_.strategy);
      m["zero_stage"] = zero_ ? zero_->stage() : 0;
      m["precision"] = precision_name(opts_.precision);
      m["layout"] = sharded ? "sharded" : "full";
      json plist = json::array();
      for (size_t i = 0; i < params.size(); ++i)
        plist.push_back({{"name", names[i]}, {"shape", params[i].sizes().vec()}, {"dtype", "F32"}});
      m["parameters"] = plist;
      m["optimizer"] = opt_ ? json{{"kind", opt_->kind()}, {"state", kinds}} : json(nullptr);
      json all_files = json::object(), shards = json::array();
      for (int r = 0; r < world; ++r) {
        const std::string rn = "rank-" + std::to_string(r) + ".json";
        const std::string bytes = safetensors::read_file((tmp / rn).string());
        const json other = json::parse(bytes);
        for (auto it = other["files"].begin(); it != other["files"].end(); ++it) all_files[it.key()] = it.value();
        all_files[rn] = {{"bytes", bytes.size()}, {"crc32", crc_hex(bytes)}};
        if (sharded) {
          json sh = {{"rank", r}, {"model", "model-rank" + std::to_string(r) + ".safetensors"}, {"pieces", other["pieces"]}};
          if (opt_) sh["optimizer"] = "optimizer-rank" + std::to_string(r) + ".safetensors";
          shards.push_back(sh);
        }
      }
      if (sharded) m["shards"] = shards;
      m["files"] = all_files;
      crash_point(4);
      safetensors::write_file_atomic((tmp / "manifest.json").string(), m.dump(1));
      fsync_dir(tmp);
      crash_point(5);
      publish(tmp, target);
      crash_point(6);
      if (dir_arg.empty() && project_.total_limit > 0) {  // the oldest go first
        std::vector<std::pair<int64_t, fs::path>> all;
        latest_index(target.parent_path(), &all);
        for (size_t i = 0; i + static_cast<size_t>(project_.total_limit) < all.size(); ++i) {
          std::error_code ec;
          fs::remove_all(all[i].second, ec);
        }
        fsync_dir(target.parent_path());
      }
    } catch (const std::exception& e) {
      ok = 0;
      why = e.what();
    }
  }
  comm_->broadcast(&ok, &ok, 1, comm::DataType::Int32, 0)->wait();
  ACCEL_CHECK(ok, Status::IO, "saving the checkpoint ", target.string(), " failed",
              rank == 0 ? ": " + why : std::string(" on process 0"));
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
    dir = root / ("checkpoint_" + std::to_string(latest));
  } else {
    dir = fs::path(dir_arg);
  }
  std::error_code ec;
  ACCEL_CHECK(fs::is_directory(dir, ec), Status::IO, "no checkpoint directory ", dir.string());
  ACCEL_CHECK(fs::exists(dir / "manifest.json", ec), Status::IO, (dir / "manifest.json").string(),
              ": missing (an incomplete checkpoint?)");
  const json m = read_json(dir / "manifest.json");
  const std::string mpath = (dir / "manifest.json").string();
  ACCEL_CHECK(m.is_object() && m.value("format", std::string()) == "accel-checkpoint", Status::Format, mpath,
              ": not an accel checkpoint manifest");
  const int version = m.value("format_version", 0);
  ACCEL_CHECK(version >= 1 && version <= kFormatVersion, Status::Format, mpath, ": format version ", version,
              " (accel ", m.value("accel_version", std::string("?")), "); this accel reads versions 1..", kFormatVersion);
  const json& files = m.at("files");
  const int old_world = m.value("world_size", 0);
  ACCEL_CHECK(old_world >= 1, Status::Format, mpath, ": bad world_size");

  // the parameters must be the model's
  const auto& params = model_->parameters();
  const auto& names = model_->parameter_names();
  const json& plist = m.at("parameters");
  ACCEL_CHECK(plist.size() == params.size(), Status::InvalidArgument, mpath, ": the checkpoint has ", plist.size(),
              " parameters, the model ", params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    ACCEL_CHECK(plist[i].value("name", std::string()) == names[i], Status::InvalidArgument, mpath, ": parameter ", i,
                " is '", plist[i].value("name", std::string()), "' in the checkpoint, '", names[i], "' in the model");
    const std::vector<int64_t> shape = plist[i].at("shape").get<std::vector<int64_t>>();
    ACCEL_CHECK(shape == params[i].sizes().vec(), Status::InvalidArgument, mpath, ": '", names[i], "' has shape ",
                json(shape).dump(), " in the checkpoint, ", json(params[i].sizes().vec()).dump(), " in the model");
  }
  const json& mopt = m.at("optimizer");
  ACCEL_CHECK(!opt_ || mopt.is_null() || mopt.value("kind", std::string()) == opt_->kind(), Status::InvalidArgument,
              mpath, ": the checkpoint's optimizer is ", mopt.is_null() ? "none" : mopt.value("kind", std::string("?")),
              ", this context's is ", opt_ ? opt_->kind() : "none");
  std::vector<std::string> kinds;
  if (opt_ && !mopt.is_null()) kinds = opt_->state_kinds();

  // read and check everything before changing anything
  std::map<std::string, std::vector<torch::Tensor>> full;
  full["weight"] = std::vector<torch::Tensor>(params.size());
  for (const auto& k : kinds) full[k] = std::vector<torch::Tensor>(params.size());
  const std::string layout = m.value("layout", std::string());
  if (layout == "full") {
    Loaded mf = load_tensors(dir, files, "model.safetensors");
    for (size_t i = 0; i < params.size(); ++i) full["weight"][i] = mf.tensor(names[i], params[i].sizes().vec());
    if (!kinds.empty()) {
      Loaded of = load_tensors(dir, files, "optimizer.safetensors");
      for (const auto& k : kinds)
        for (size_t i = 0; i < params.size(); ++i)
          if (of.by_name.count(k + "/" + names[i])) full[k][i] = of.tensor(k + "/" + names[i], params[i].sizes().vec());
    }
  } else if (layout == "sharded") {
    // reassemble every parameter from the ranges the old processes held (resharding on load)
    std::vector<std::vector<std::pair<int64_t, int64_t>>> covered(params.size());
    for (auto& [k, v] : full)
      for (size_t i = 0; i < params.size(); ++i) v[i] = torch::zeros({params[i].numel()}, torch::kFloat);
    std::vector<std::vector<bool>> opt_seen(kinds.size(), std::vector<bool>(params.size(), false));
    for (const auto& sh : m.at("shards")) {
      Loaded mf = load_tensors(dir, files, sh.at("model").get<std::string>());
      std::optional<Loaded> of;
      if (!kinds.empty() && sh.contains("optimizer")) of = load_tensors(dir, files, sh.at("optimizer").get<std::string>());
      for (const auto& pc : sh.at("pieces")) {
        const size_t pi = pc.at(0).get<size_t>();
        const int64_t start = pc.at(1).get<int64_t>(), len = pc.at(2).get<int64_t>();
        ACCEL_CHECK(pi < params.size() && start >= 0 && len > 0 && start + len <= params[pi].numel(), Status::Format,
                    mpath, ": a shard range [", start, ", ", start + len, ") is outside its parameter");
        covered[pi].push_back({start, start + len});
        full["weight"][pi].narrow(0, start, len).copy_(mf.tensor(names[pi], {len}));
        for (size_t k = 0; k < kinds.size(); ++k) {
          const std::string key = kinds[k] + "/" + names[pi];
          if (!of || !of->by_name.count(key)) continue;
          full[kinds[k]][pi].narrow(0, start, len).copy_(of->tensor(key, {len}));
          opt_seen[k][pi] = true;
        }
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
        full[kinds[k]][i] = opt_seen[k][i] ? full[kinds[k]][i].view(params[i].sizes()) : torch::Tensor();
    }
  } else {
    fail(Status::Format, mpath, ": unknown layout '", layout, "'");
  }
  // this process's counters and generators: its own when the world is the same size
  const int src = rank < old_world ? rank : 0;
  const torch::Tensor rbytes = read_checked(dir, files, "rank-" + std::to_string(src) + ".json");
  json rj;
  try {
    rj = json::parse(static_cast<const char*>(rbytes.data_ptr()), static_cast<const char*>(rbytes.data_ptr()) + rbytes.numel());
  } catch (const json::exception& e) {
    fail(Status::Format, (dir / ("rank-" + std::to_string(src) + ".json")).string(), ": not valid JSON: ", e.what());
  }
  Loaded rng = load_tensors(dir, files, "rng-rank" + std::to_string(src) + ".safetensors");
  const torch::Tensor g1 = rng.tensor("generator", {static_cast<int64_t>(rng.get("generator").end - rng.get("generator").begin)}, "U8");
  const torch::Tensor g2 = rng.tensor(
      "default_generator",
      {static_cast<int64_t>(rng.get("default_generator").end - rng.get("default_generator").begin)}, "U8");
  const json& jl = rj.at("loaders");
  ACCEL_CHECK(jl.size() == loaders_.size(), Status::InvalidArgument, mpath, ": the checkpoint has ", jl.size(),
              " prepared data loaders, this context ", loaders_.size());

  // apply
  torch::NoGradGuard ng;
  const int64_t ostep = rj.value("optimizer_state_steps", int64_t{0});
  if (zero_) {
    zero_->restore(full, ostep);
  } else {
    for (size_t i = 0; i < params.size(); ++i) params[i].detach().copy_(full["weight"][i]);
    if (opt_) {
      opt_->zero_grad();
      std::map<std::string, std::vector<torch::Tensor>> st;
      for (const auto& k : kinds) st[k] = full[k];
      opt_->restore(st, ostep);
    }
  }
  scaler_.restore(rj.at("loss_scale").get<double>(), rj.at("growth_tracker").get<int>());
  if (sched_ && !rj.at("scheduler_steps").is_null()) sched_->restore(rj.at("scheduler_steps").get<int64_t>());
  optimizer_steps_ = rj.at("optimizer_steps").get<int64_t>();
  micro_steps_ = rj.at("micro_steps").get<int64_t>();
  for (size_t i = 0; i < loaders_.size(); ++i) {
    int64_t pos = jl[i].at("position").get<int64_t>();
    if (old_world != world) pos = pos * old_world / world;  // the same share of the epoch's global batches
    loaders_[i]->restore(jl[i].at("epoch").get<int64_t>(), pos);
  }
  if (rank < old_world) {
    gen_.set_state(g1);
    at::Generator def = at::detail::getDefaultCPUGenerator();  // shares the process-wide generator
    std::lock_guard<std::mutex> lk(def.mutex());
    def.set_state(g2);
  }
  accum_count_ = 0;
  pending_ = sync_ = unscaled_ = found_inf_ = false;
  end_of_data_ = false;
  if (comm_->size() > 1) comm_->barrier();
  return dir.string();
}

}  // namespace accel
