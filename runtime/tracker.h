// Trackers: a step's named scalars written as JSON lines, CSV and TensorBoard event files
// (accel_init_trackers / accel_log / accel_end_training; docs/trackers.md). Torch-free.
//
// In the log directory:
// - metrics.jsonl: a line per accel_log, {"step":S,"wall_time":T,"values":{"NAME":V,...}}
//   (a value that is not finite is null);
// - metrics.csv: a row per scalar, "wall_time,step,name,value" (the header once);
// - events.out.tfevents.TIME.HOST.PID: TensorBoard's event file, a TFRecord of Event protos
//   (the first the file version "brain.Event:2", then one per accel_log holding a Summary
//   of simple values), each record framed by its length and masked CRC-32Cs.
// The JSON lines and CSV files are appended to (a resumed run continues them); the event
// file is new for each accel_init_trackers, as TensorBoard's writers do. Each call's lines
// and record are flushed before it returns. Nothing but a regular file is ever written to.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace accel::tracker {

enum Writer : uint32_t { JsonLines = 1, Csv = 2, TensorBoard = 4 };
constexpr uint32_t kAllWriters = JsonLines | Csv | TensorBoard;

// The writers ACCEL_LOG_WITH names: "jsonl", "csv", "tensorboard" or "all", comma-separated
// (InvalidArgument naming the variable and the word it does not know).
uint32_t parse_writers(const std::string& text, const char* what);

// A writer set: a non-zero OR of the three (InvalidArgument naming the value).
void check_writers(uint32_t writers);

// One call's scalar names: at least one, none empty, none twice (InvalidArgument naming it).
void check_names(const std::vector<std::string>& names);

// CRC-32C (Castagnoli), and TensorBoard's masked form of it.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
uint32_t masked_crc32c(const void* data, size_t n);

// An Event proto's bytes: wall_time and step, then the file version (when not empty) or a
// Summary of simple values.
std::string event_bytes(double wall_time, int64_t step, const std::string& file_version,
                        const std::vector<std::string>& names, const std::vector<float>& values);
// A TFRecord: length (little-endian uint64), its masked CRC, the data, the data's masked CRC.
std::string tfrecord(const std::string& data);

class Tracker {
 public:
  // Opens the writers in `dir` (created where missing). IO naming the path for what cannot be
  // created or opened; InvalidArgument for a path that is not a directory, or a log file that
  // is not a regular file (a symbolic link, a device, a FIFO).
  Tracker(const std::string& dir, uint32_t writers);
  ~Tracker();
  Tracker(const Tracker&) = delete;
  Tracker& operator=(const Tracker&) = delete;

  // One step's scalars (names non-empty; values any double), written and flushed by every
  // writer. IO when a write fails (the disk full).
  void log(int64_t step, const std::vector<std::string>& names, const std::vector<double>& values);
  // Flushes and closes the files (IO when a close fails); log afterwards is InvalidState.
  void close();

  const std::string& dir() const { return dir_; }
  const std::string& event_file() const { return event_path_; }

 private:
  std::string dir_, event_path_;
  uint32_t writers_;
  std::FILE* jsonl_ = nullptr;
  std::FILE* csv_ = nullptr;
  std::FILE* events_ = nullptr;
  std::mutex mu_;
};

}  // namespace accel::tracker
