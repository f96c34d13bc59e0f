// The checkpoint's metadata files (docs/checkpoints.md), parsed and validated into memory.
// Torch-free: shared by the runtime's save/load, `accel merge-weights` and the fuzzer.
//
// Every reader here checks every field's presence, JSON type and domain before it returns,
// and throws Error(Status::Format) naming the file and the field ("ck/rank-0.json: field
// 'optimizer_steps' must be an integer >= 0, got \"3\""), so a load can refuse a lying file
// before it changes anything.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace accel::ckpt {

constexpr int kFormatVersion = 1;

struct FileEntry {
  uint64_t bytes = 0;
  std::string crc32;  // 8 lowercase hex digits
};

struct ParamEntry {
  std::string name;
  std::vector<int64_t> shape;
};

// A range [start, start + len) of the flattened parameter `param` that one process held.
struct Piece {
  size_t param = 0;
  int64_t start = 0, len = 0;
};

struct Shard {
  int rank = 0;
  std::string model;                    // its weights file
  std::optional<std::string> optimizer; // its optimizer-state file
  std::vector<Piece> pieces;
};

struct Manifest {
  int format_version = kFormatVersion;
  std::string accel_version;
  int world_size = 1;
  std::string strategy;
  int zero_stage = 0;
  std::string precision;                 // "no", "bf16", "fp16"
  std::string layout;                    // "full" or "sharded"
  std::vector<ParamEntry> parameters;
  std::optional<std::string> optimizer_kind;   // absent: saved without an optimizer
  std::vector<std::string> optimizer_state;    // its state kinds ("exp_avg", ...)
  std::map<std::string, FileEntry> files;      // every other file of the checkpoint
  std::vector<Shard> shards;                   // layout "sharded": one per process
};

struct LoaderPosition {
  int64_t epoch = 0, position = 0;
};

// rank-<R>.json: one process's counters, loss scaler, scheduler and data positions.
struct RankState {
  int rank = 0;
  int64_t optimizer_steps = 0, micro_steps = 0;
  double loss_scale = 1.0;
  int growth_tracker = 0;
  std::optional<int64_t> scheduler_steps;
  int64_t optimizer_state_steps = 0;
  std::vector<LoaderPosition> loaders;
  std::vector<Piece> pieces;
  std::map<std::string, FileEntry> files;
};

// Parse and validate; `path` names the file in messages. Structural checks only (types,
// domains, names, that the shards' files are listed); checks against a model are the
// caller's.
Manifest parse_manifest(std::string_view text, const std::string& path);
RankState parse_rank(std::string_view text, const std::string& path);

std::string to_json(const Manifest& m);
std::string to_json(const RankState& r);

// The names in a project and a checkpoint, made here and parsed here only.
namespace names {
inline constexpr const char* kManifest = "manifest.json";
inline constexpr const char* kModel = "model.safetensors";          // a replicated model
inline constexpr const char* kOptimizer = "optimizer.safetensors";  // a replicated optimizer
std::string model_shard(int rank);      // model-rank<R>.safetensors (ZeRO-3, a rank's shard)
std::string optimizer_shard(int rank);  // optimizer-rank<R>.safetensors (ZeRO, a rank's shard)
std::string rng(int rank);              // rng-rank<R>.safetensors
std::string rank_state(int rank);       // rank-<R>.json
std::string checkpoint_dir(int64_t index);  // checkpoint_<N>, under a project's checkpoints/
// N of "checkpoint_<N>" (decimal, at most 15 digits); -1 for any other name.
int64_t checkpoint_index(const std::string& dir_name);
}  // namespace names

// A name a checkpoint may hold: manifest.json, model.safetensors, optimizer.safetensors,
// model-rank<R>.safetensors, optimizer-rank<R>.safetensors, rng-rank<R>.safetensors,
// rank-<R>.json (and, with `temporary`, a writer's "<one of those>.tmp.<pid>").
bool is_checkpoint_file_name(const std::string& name, bool temporary = false);

}  // namespace accel::ckpt
