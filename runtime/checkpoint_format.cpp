// The checkpoint's metadata files, validated field by field (see checkpoint_format.h).
#include "runtime/checkpoint_format.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/status.h"

namespace accel::ckpt {

namespace {

using json = nlohmann::json;

std::string show(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  return s;
}

// The reader of one file: every failure names the file and the field.
struct Reader {
  const std::string& path;

  [[noreturn]] void bad(const std::string& field, const std::string& want, const json* got) const {
    fail(Status::Format, path, ": field '", field, "' must be ", want, ", got ",
         got ? show(*got) : std::string("nothing (it is missing)"));
  }
  const json& at(const json& obj, const std::string& prefix, const char* key, const std::string& want) const {
    auto it = obj.find(key);
    if (it == obj.end()) bad(prefix + key, want, nullptr);
    return *it;
  }
  int64_t value(const json& j, const std::string& field, int64_t lo, int64_t hi) const {
    const std::string want = hi == std::numeric_limits<int64_t>::max()
                                 ? "an integer >= " + std::to_string(lo)
                                 : "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    if (!j.is_number_integer()) bad(field, want, &j);
    if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad(field, want, &j);
    const int64_t v = j.get<int64_t>();
    if (v < lo || v > hi) bad(field, want, &j);
    return v;
  }
  int64_t integer(const json& obj, const std::string& prefix, const char* key, int64_t lo,
                  int64_t hi = std::numeric_limits<int64_t>::max()) const {
    auto it = obj.find(key);
    if (it == obj.end())
      bad(prefix + key, hi == std::numeric_limits<int64_t>::max() ? "an integer >= " + std::to_string(lo) : "an integer",
          nullptr);
    return value(*it, prefix + key, lo, hi);
  }
  std::string string(const json& obj, const std::string& prefix, const char* key) const {
    const json& j = at(obj, prefix, key, "a string");
    if (!j.is_string()) bad(prefix + key, "a string", &j);
    return j.get<std::string>();
  }
  const json& object(const json& j, const std::string& field) const {
    if (!j.is_object()) bad(field, "an object", &j);
    return j;
  }
  const json& array(const json& j, const std::string& field) const {
    if (!j.is_array()) bad(field, "an array", &j);
    return j;
  }
  // A file name inside the checkpoint directory: no directories, no "." or "..".
  std::string file_name(const json& obj, const std::string& prefix, const char* key) const {
    const std::string n = string(obj, prefix, key);
    if (!is_checkpoint_file_name(n)) {
      const json j = n;
      bad(prefix + key, "the name of a checkpoint file (e.g. model-rank0.safetensors)", &j);
    }
    return n;
  }
  std::map<std::string, FileEntry> files(const json& obj, const std::string& prefix) const {
    const std::string f = prefix + "files";
    const json& j = object(at(obj, prefix, "files", "an object"), f);
    std::map<std::string, FileEntry> out;
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string fp = f + "." + it.key();
      if (!is_checkpoint_file_name(it.key()) || it.key() == names::kManifest) {
        const json k = it.key();
        bad(f, "an object whose keys name checkpoint files", &k);
      }
      const json& e = object(it.value(), fp);
      FileEntry fe;
      fe.bytes = static_cast<uint64_t>(integer(e, fp + ".", "bytes", 0));
      fe.crc32 = string(e, fp + ".", "crc32");
      if (fe.crc32.size() != 8 || fe.crc32.find_first_not_of("0123456789abcdef") != std::string::npos)
        bad(fp + ".crc32", "8 lowercase hexadecimal digits", &e["crc32"]);
      out[it.key()] = fe;
    }
    return out;
  }
  std::vector<Piece> pieces(const json& obj, const std::string& prefix) const {
    const std::string f = prefix + "pieces";
    const json& j = array(at(obj, prefix, "pieces", "an array"), f);
    std::vector<Piece> out;
    for (size_t i = 0; i < j.size(); ++i) {
      const std::string fp = f + "[" + std::to_string(i) + "]";
      const json& p = j[i];
      if (!p.is_array() || p.size() != 3) bad(fp, "[parameter, start, length]", &p);
      Piece pc;
      pc.param = static_cast<size_t>(value(p[0], fp + "[0]", 0, std::numeric_limits<int32_t>::max()));
      pc.start = value(p[1], fp + "[1]", 0, std::numeric_limits<int64_t>::max() / 2);
      pc.len = value(p[2], fp + "[2]", 1, std::numeric_limits<int64_t>::max() / 2);
      out.push_back(pc);
    }
    return out;
  }
  json parse(std::string_view text) const {
    try {
      return json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {
      fail(Status::Format, path, ": not valid JSON: ", e.what());
    }
  }
};

json files_json(const std::map<std::string, FileEntry>& files) {
  json j = json::object();
  for (const auto& [name, f] : files) j[name] = {{"bytes", f.bytes}, {"crc32", f.crc32}};
  return j;
}

json pieces_json(const std::vector<Piece>& pieces) {
  json j = json::array();
  for (const auto& p : pieces) j.push_back({p.param, p.start, p.len});
  return j;
}

bool digits(const std::string& s, size_t from, size_t to) {
  if (to <= from || to - from > 9) return false;
  for (size_t i = from; i < to; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

bool numbered(const std::string& n, const std::string& prefix, const std::string& suffix) {
  return n.size() > prefix.size() + suffix.size() && n.compare(0, prefix.size(), prefix) == 0 &&
         n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         digits(n, prefix.size(), n.size() - suffix.size());
}

constexpr const char* kModelShard = "model-rank";
constexpr const char* kOptimizerShard = "optimizer-rank";
constexpr const char* kRng = "rng-rank";
constexpr const char* kRankState = "rank-";
constexpr const char* kSafetensors = ".safetensors";
constexpr const char* kJson = ".json";
constexpr const char* kCheckpointDir = "checkpoint_";

}  // namespace

namespace names {
std::string model_shard(int rank) { return kModelShard + std::to_string(rank) + kSafetensors; }
std::string optimizer_shard(int rank) { return kOptimizerShard + std::to_string(rank) + kSafetensors; }
std::string rng(int rank) { return kRng + std::to_string(rank) + kSafetensors; }
std::string rank_state(int rank) { return kRankState + std::to_string(rank) + kJson; }
std::string checkpoint_dir(int64_t index) { return kCheckpointDir + std::to_string(index); }
int64_t checkpoint_index(const std::string& n) {
  const size_t p = std::char_traits<char>::length(kCheckpointDir);
  if (n.size() <= p || n.size() > p + 15 || n.compare(0, p, kCheckpointDir) != 0) return -1;
  if (n.find_first_not_of("0123456789", p) != std::string::npos) return -1;
  return std::stoll(n.substr(p));
}
}  // namespace names

bool is_checkpoint_file_name(const std::string& name, bool temporary) {
  if (temporary) {
    const size_t at = name.rfind(".tmp.");
    if (at != std::string::npos && digits(name, at + 5, name.size())) return is_checkpoint_file_name(name.substr(0, at));
  }
  return name == names::kManifest || name == names::kModel || name == names::kOptimizer ||
         numbered(name, kModelShard, kSafetensors) || numbered(name, kOptimizerShard, kSafetensors) ||
         numbered(name, kRng, kSafetensors) || numbered(name, kRankState, kJson);
}

Manifest parse_manifest(std::string_view text, const std::string& path) {
  const Reader r{path};
  const json j = r.parse(text);
  if (!j.is_object() || !j.contains("format") || j["format"] != "accel-checkpoint")
    fail(Status::Format, path, ": not an accel checkpoint manifest (no \"format\": \"accel-checkpoint\")");
  Manifest m;
  const json& v = r.at(j, "", "format_version", "an integer");
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kFormatVersion) {
    const json* av = j.contains("accel_version") ? &j["accel_version"] : nullptr;
    fail(Status::Format, path, ": format version ", show(v), " (written by accel ", av ? show(*av) : "?",
         "); this accel reads versions 1..", kFormatVersion);
  }
  m.format_version = static_cast<int>(v.get<int64_t>());
  m.accel_version = r.string(j, "", "accel_version");
  m.world_size = static_cast<int>(r.integer(j, "", "world_size", 1, 1 << 20));
  m.strategy = r.string(j, "", "strategy");
  m.zero_stage = static_cast<int>(r.integer(j, "", "zero_stage", 0, 3));
  m.precision = r.string(j, "", "precision");
  if (m.precision != "no" && m.precision != "bf16" && m.precision != "fp16") {
    const json p = m.precision;
    r.bad("precision", "\"no\", \"bf16\" or \"fp16\"", &p);
  }
  m.layout = r.string(j, "", "layout");
  if (m.layout != "full" && m.layout != "sharded") {
    const json l = m.layout;
    r.bad("layout", "\"full\" or \"sharded\"", &l);
  }
  const json& plist = r.array(r.at(j, "", "parameters", "an array"), "parameters");
  for (size_t i = 0; i < plist.size(); ++i) {
    const std::string fp = "parameters[" + std::to_string(i) + "]";
    const json& p = r.object(plist[i], fp);
    ParamEntry pe;
    pe.name = r.string(p, fp + ".", "name");
    if (pe.name.empty()) r.bad(fp + ".name", "a non-empty string", &p["name"]);
    const json& shape = r.array(r.at(p, fp + ".", "shape", "an array"), fp + ".shape");
    if (shape.size() > 16) r.bad(fp + ".shape", "at most 16 dimensions", &shape);
    for (size_t d = 0; d < shape.size(); ++d)
      pe.shape.push_back(r.value(shape[d], fp + ".shape[" + std::to_string(d) + "]", 0, int64_t{1} << 40));
    if (p.contains("dtype") && p["dtype"] != "F32") r.bad(fp + ".dtype", "\"F32\"", &p["dtype"]);
    m.parameters.push_back(std::move(pe));
  }
  const json& opt = r.at(j, "", "optimizer", "null or an object");
  if (!opt.is_null()) {
    r.object(opt, "optimizer");
    m.optimizer_kind = r.string(opt, "optimizer.", "kind");
    const json& st = r.array(r.at(opt, "optimizer.", "state", "an array"), "optimizer.state");
    for (size_t i = 0; i < st.size(); ++i) {
      if (!st[i].is_string()) r.bad("optimizer.state[" + std::to_string(i) + "]", "a string", &st[i]);
      m.optimizer_state.push_back(st[i].get<std::string>());
    }
  }
  m.files = r.files(j, "");
  if (m.layout == "sharded") {
    const json& shards = r.array(r.at(j, "", "shards", "an array"), "shards");
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string fp = "shards[" + std::to_string(i) + "]";
      const json& s = r.object(shards[i], fp);
      Shard sh;
      sh.rank = static_cast<int>(r.integer(s, fp + ".", "rank", 0, m.world_size - 1));
      sh.model = r.file_name(s, fp + ".", "model");
      if (s.contains("optimizer")) sh.optimizer = r.file_name(s, fp + ".", "optimizer");
      sh.pieces = r.pieces(s, fp + ".");
      for (const std::string* f : {&sh.model, sh.optimizer ? &*sh.optimizer : nullptr})
        if (f && !m.files.count(*f)) fail(Status::Format, path, ": field '", fp, "' names '", *f, "', which 'files' does not list");
      m.shards.push_back(std::move(sh));
    }
  }
  return m;
}

RankState parse_rank(std::string_view text, const std::string& path) {
  const Reader r{path};
  const json j = r.parse(text);
  r.object(j, "(the file)");
  RankState s;
  s.rank = static_cast<int>(r.integer(j, "", "rank", 0, (1 << 20) - 1));
  s.optimizer_steps = r.integer(j, "", "optimizer_steps", 0);
  s.micro_steps = r.integer(j, "", "micro_steps", 0);
  const json& ls = r.at(j, "", "loss_scale", "a finite number > 0");
  if (!ls.is_number() || !std::isfinite(ls.get<double>()) || ls.get<double>() <= 0)
    r.bad("loss_scale", "a finite number > 0", &ls);
  s.loss_scale = ls.get<double>();
  s.growth_tracker = static_cast<int>(r.integer(j, "", "growth_tracker", 0, std::numeric_limits<int32_t>::max()));
  const json& ss = r.at(j, "", "scheduler_steps", "null or an integer >= 0");
  if (!ss.is_null()) s.scheduler_steps = r.value(ss, "scheduler_steps", 0, std::numeric_limits<int64_t>::max());
  s.optimizer_state_steps = r.integer(j, "", "optimizer_state_steps", 0);
  const json& loaders = r.array(r.at(j, "", "loaders", "an array"), "loaders");
  for (size_t i = 0; i < loaders.size(); ++i) {
    const std::string fp = "loaders[" + std::to_string(i) + "]";
    const json& l = r.object(loaders[i], fp);
    s.loaders.push_back({r.integer(l, fp + ".", "epoch", 0), r.integer(l, fp + ".", "position", 0)});
  }
  s.pieces = r.pieces(j, "");
  s.files = r.files(j, "");
  return s;
}

std::string to_json(const Manifest& m) {
  json j;
  j["format"] = "accel-checkpoint";
  j["format_version"] = m.format_version;
  j["accel_version"] = m.accel_version;
  j["world_size"] = m.world_size;
  j["strategy"] = m.strategy;
  j["zero_stage"] = m.zero_stage;
  j["precision"] = m.precision;
  j["layout"] = m.layout;
  json plist = json::array();
  for (const auto& p : m.parameters) plist.push_back({{"name", p.name}, {"shape", p.shape}, {"dtype", "F32"}});
  j["parameters"] = plist;
  j["optimizer"] = m.optimizer_kind ? json{{"kind", *m.optimizer_kind}, {"state", m.optimizer_state}} : json(nullptr);
  if (m.layout == "sharded") {
    json shards = json::array();
    for (const auto& s : m.shards) {
      json sh = {{"rank", s.rank}, {"model", s.model}, {"pieces", pieces_json(s.pieces)}};
      if (s.optimizer) sh["optimizer"] = *s.optimizer;
      shards.push_back(sh);
    }
    j["shards"] = shards;
  }
  j["files"] = files_json(m.files);
  return j.dump(1);
}

std::string to_json(const RankState& s) {
  json j;
  j["rank"] = s.rank;
  j["optimizer_steps"] = s.optimizer_steps;
  j["micro_steps"] = s.micro_steps;
  j["loss_scale"] = s.loss_scale;
  j["growth_tracker"] = s.growth_tracker;
  j["scheduler_steps"] = s.scheduler_steps ? json(*s.scheduler_steps) : json(nullptr);
  j["optimizer_state_steps"] = s.optimizer_state_steps;
  json loaders = json::array();
  for (const auto& l : s.loaders) loaders.push_back({{"epoch", l.epoch}, {"position", l.position}});
  j["loaders"] = loaders;
  j["pieces"] = pieces_json(s.pieces);
  j["files"] = files_json(s.files);
  return j.dump(1);
}

}  // namespace accel::ckpt
