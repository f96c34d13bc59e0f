// Trackers (tracker.h): JSON lines, CSV and TensorBoard event files. Torch-free.
#include "runtime/tracker.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/paths.h"
#include "base/status.h"

namespace accel::tracker {

namespace fs = std::filesystem;

uint32_t parse_writers(const std::string& text, const char* what) {
  uint32_t w = 0;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(at, end - at);
    while (!word.empty() && word.front() == ' ') word.erase(0, 1);
    while (!word.empty() && word.back() == ' ') word.pop_back();
    if (word == "jsonl" || word == "json")
      w |= JsonLines;
    else if (word == "csv")
      w |= Csv;
    else if (word == "tensorboard")
      w |= TensorBoard;
    else if (word == "all")
      w |= kAllWriters;
    else
      fail(Status::InvalidArgument, what, " '", text, "': '", word,
           "' is not a writer (jsonl, csv, tensorboard, all; comma-separated)");
    at = end + 1;
  }
  return w;
}

void check_writers(uint32_t writers) {
  ACCEL_CHECK(writers != 0 && (writers & ~kAllWriters) == 0, Status::InvalidArgument, "writers must be a non-zero OR of ",
              "ACCEL_LOG_JSONL, ACCEL_LOG_CSV and ACCEL_LOG_TENSORBOARD, got ", writers);
}

void check_names(const std::vector<std::string>& names) {
  ACCEL_CHECK(!names.empty(), Status::InvalidArgument, "count must be >= 1");
  std::set<std::string> seen;
  for (const std::string& n : names) {
    ACCEL_CHECK(!n.empty(), Status::InvalidArgument, "names: a scalar's name is empty");
    ACCEL_CHECK(seen.insert(n).second, Status::InvalidArgument, "names: '", n, "' appears twice in one call");
  }
}

namespace {
const uint32_t* crc_table() {
  static uint32_t table[256];
  static std::once_flag once;
  std::call_once(once, [] {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // Castagnoli, reflected
      table[i] = c;
    }
  });
  return table;
}
}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const uint32_t* t = crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = t[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

namespace {
// Protocol buffers' wire format, the few pieces an Event needs.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
template <class T>
void fixed(std::string& out, T v) {  // little-endian, as x86 and ARM hold it
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void bytes_field(std::string& out, int field, const std::string& b) {
  varint(out, static_cast<uint64_t>(field) << 3 | 2);
  varint(out, b.size());
  out += b;
}
}  // namespace

std::string event_bytes(double wall_time, int64_t step, const std::string& file_version,
                        const std::vector<std::string>& names, const std::vector<float>& values) {
  std::string e;
  varint(e, 1 << 3 | 1);  // wall_time: double
  fixed(e, wall_time);
  varint(e, 2 << 3 | 0);  // step: int64
  varint(e, static_cast<uint64_t>(step));
  if (!file_version.empty()) {
    bytes_field(e, 3, file_version);
    return e;
  }
  std::string summary;
  for (size_t i = 0; i < names.size(); ++i) {
    std::string value;
    bytes_field(value, 1, names[i]);  // tag
    varint(value, 2 << 3 | 5);        // simple_value: float
    fixed(value, values[i]);
    bytes_field(summary, 1, value);  // Summary.value
  }
  bytes_field(e, 5, summary);  // Event.summary
  return e;
}

std::string tfrecord(const std::string& data) {
  std::string r;
  const uint64_t n = data.size();
  fixed(r, n);
  fixed(r, masked_crc32c(r.data(), 8));
  r += data;
  fixed(r, masked_crc32c(data.data(), data.size()));
  return r;
}

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Opens `p` for appending (exclusive: created new, never an existing file), refusing anything
// but a regular file or nothing.
std::FILE* open_log(const fs::path& p, bool exclusive) {
  const std::string what = paths::describe(p);
  if (exclusive && what == "a regular file") return nullptr;  // taken: the caller picks another name
  ACCEL_CHECK(what == "nothing" || what == "a regular file", Status::InvalidArgument, "log file '",
              p.string(), "' is ", what, ": the trackers write only regular files of their own");
  const int flags = O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (exclusive ? O_EXCL : 0);
  const int fd = ::open(p.c_str(), flags, 0644);
  if (fd < 0) {
    if (exclusive && errno == EEXIST) return nullptr;  // the caller picks another name
    fail(Status::IO, "cannot open log file '", p.string(), "': ", std::strerror(errno));
  }
  std::FILE* f = ::fdopen(fd, "a");
  if (!f) {
    const int e = errno;
    ::close(fd);
    fail(Status::IO, "cannot open log file '", p.string(), "': ", std::strerror(e));
  }
  return f;
}

void write_all(std::FILE* f, const std::string& s, const std::string& path) {
  if (std::fwrite(s.data(), 1, s.size(), f) != s.size() || std::fflush(f) != 0)
    fail(Status::IO, "cannot write log file '", path, "': ", std::strerror(errno));
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char b[32];  // the shortest text that reads back as v
  const auto r = std::to_chars(b, b + sizeof b, v);
  return std::string(b, r.ptr);
}
}  // namespace

Tracker::Tracker(const std::string& dir, uint32_t writers) : dir_(dir), writers_(writers) {
  ACCEL_CHECK(!dir.empty(), Status::InvalidArgument, "log_dir is empty");
  check_writers(writers);
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) fail(Status::IO, "cannot create log_dir '", dir, "': ", ec.message());
  }
  ACCEL_CHECK(fs::is_directory(dir, ec), Status::InvalidArgument, "log_dir '", dir, "' is ", paths::describe(dir),
              ", not a directory");
  try {
    if (writers & JsonLines) jsonl_ = open_log(fs::path(dir) / "metrics.jsonl", false);
    if (writers & Csv) {
      const fs::path p = fs::path(dir) / "metrics.csv";
      const bool fresh = paths::describe(p) == "nothing" || fs::file_size(p, ec) == 0;
      csv_ = open_log(p, false);
      if (fresh) write_all(csv_, "wall_time,step,name,value\n", p.string());
    }
    if (writers & TensorBoard) {
      char host[256] = "localhost";
      ::gethostname(host, sizeof host - 1);
      const auto t = static_cast<long long>(now_seconds());
      for (int k = 0; !events_; ++k) {
        ACCEL_CHECK(k < 1000, Status::IO, "cannot pick a new event file name in '", dir, "'");
        std::string name = "events.out.tfevents." + std::to_string(t) + "." + host + "." + std::to_string(::getpid());
        if (k > 0) name += "." + std::to_string(k);
        event_path_ = (fs::path(dir) / name).string();
        events_ = open_log(event_path_, true);
      }
      write_all(events_, tfrecord(event_bytes(now_seconds(), 0, "brain.Event:2", {}, {})), event_path_);
    }
  } catch (...) {
    for (std::FILE* f : {jsonl_, csv_, events_})
      if (f) std::fclose(f);
    throw;
  }
}

Tracker::~Tracker() {
  for (std::FILE* f : {jsonl_, csv_, events_})
    if (f) std::fclose(f);
}

void Tracker::log(int64_t step, const std::vector<std::string>& names, const std::vector<double>& values) {
  std::lock_guard<std::mutex> lk(mu_);
  ACCEL_CHECK(jsonl_ || csv_ || events_, Status::InvalidState, "the trackers were closed (accel_end_training)");
  ACCEL_CHECK(step >= 0, Status::InvalidArgument, "step must be >= 0, got ", step);
  ACCEL_CHECK(names.size() == values.size(), Status::Internal, "names and values differ in number");
  check_names(names);
  const double t = now_seconds();
  if (jsonl_) {
    nlohmann::ordered_json v = nlohmann::ordered_json::object();
    for (size_t i = 0; i < names.size(); ++i)
      v[names[i]] = std::isfinite(values[i]) ? nlohmann::ordered_json(values[i]) : nlohmann::ordered_json(nullptr);
    nlohmann::ordered_json line = {{"step", step}, {"wall_time", t}, {"values", v}};
    write_all(jsonl_, line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
              (fs::path(dir_) / "metrics.jsonl").string());
  }
  if (csv_) {
    std::string rows;
    for (size_t i = 0; i < names.size(); ++i)
      rows += number(t) + "," + std::to_string(step) + "," + csv_field(names[i]) + "," + number(values[i]) + "\n";
    write_all(csv_, rows, (fs::path(dir_) / "metrics.csv").string());
  }
  if (events_) {
    std::vector<float> f(values.begin(), values.end());
    write_all(events_, tfrecord(event_bytes(t, step, "", names, f)), event_path_);
  }
}

void Tracker::close() {
  std::lock_guard<std::mutex> lk(mu_);
  std::string failed;
  for (std::FILE** f : {&jsonl_, &csv_, &events_}) {
    if (*f && std::fclose(*f) != 0 && failed.empty()) failed = std::strerror(errno);
    *f = nullptr;
  }
  if (!failed.empty()) fail(Status::IO, "closing the log files in '", dir_, "': ", failed);
}

}  // namespace accel::tracker
