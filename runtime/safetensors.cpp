#include "runtime/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <tuple>
#include <cstring>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "base/files.h"
#include "base/status.h"

namespace accel::safetensors {

size_t dtype_size(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
      {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2},  {"U8", 1},   {"BOOL", 1}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

std::string serialize(const std::vector<TensorView>& tensors, const std::map<std::string, std::string>& metadata) {
  std::string out = serialize_header(tensors, metadata);
  for (const auto& t : tensors) out.append(static_cast<const char*>(t.data), t.nbytes);
  return out;
}

std::string serialize_header(const std::vector<TensorView>& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& t : tensors) {
    ACCEL_CHECK(!t.name.empty() && t.name != "__metadata__", Status::InvalidArgument, "bad tensor name '", t.name, "'");
    ACCEL_CHECK(!header.contains(t.name), Status::InvalidArgument, "duplicate tensor name '", t.name, "'");
    size_t esize = dtype_size(t.dtype);
    ACCEL_CHECK(esize != 0, Status::InvalidArgument, "unknown safetensors dtype '", t.dtype, "'");
    size_t numel = 1;
    for (int64_t d : t.shape) {
      ACCEL_CHECK(d >= 0, Status::InvalidArgument, "negative dimension in '", t.name, "'");
      numel *= static_cast<size_t>(d);
    }
    ACCEL_CHECK(numel * esize == t.nbytes, Status::InvalidArgument, "tensor '", t.name, "' has ", t.nbytes,
                " bytes, its shape and dtype need ", numel * esize);
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string json = header.dump();
  while ((8 + json.size()) % 8 != 0) json.push_back(' ');
  std::string out;
  out.reserve(8 + json.size());
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += json;
  return out;
}

namespace {

[[noreturn]] void io_fail(const std::string& what, const std::string& path);

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

Header parse(const uint8_t* data, size_t size, const std::string& what) {
  ACCEL_CHECK(size >= 8, Status::Format, what, ": ", size, " bytes, too short for a safetensors header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  ACCEL_CHECK(n <= kMaxHeaderBytes, Status::Format, what, ": header of ", n, " bytes exceeds the ", kMaxHeaderBytes,
              "-byte limit");
  ACCEL_CHECK(n <= size - 8, Status::Format, what, ": header length ", n, " runs past the end of the file (",
              size, " bytes)");
  ACCEL_CHECK(n >= 2 && data[8] == '{', Status::Format, what, ": the header is not a JSON object");
  const char* begin = reinterpret_cast<const char*>(data) + 8;
  std::vector<std::string> keys;
  std::string duplicate;
  std::vector<std::string> seen;
  nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    if (depth == 1 && ev == nlohmann::json::parse_event_t::key) {
      const std::string k = parsed.get<std::string>();
      if (std::find(seen.begin(), seen.end(), k) != seen.end()) duplicate = k;
      seen.push_back(k);
    }
    return true;
  };
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(begin, begin + n, cb);
  } catch (const nlohmann::json::exception& e) {
    fail(Status::Format, what, ": the header is not valid JSON: ", e.what());
  }
  ACCEL_CHECK(h.is_object(), Status::Format, what, ": the header is not a JSON object");
  ACCEL_CHECK(duplicate.empty(), Status::Format, what, ": tensor '", duplicate, "' appears twice in the header");
  Header out;
  out.data_start = 8 + n;
  const uint64_t data_size = size - out.data_start;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      ACCEL_CHECK(v.is_object(), Status::Format, what, ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        ACCEL_CHECK(m.value().is_string(), Status::Format, what, ": metadata '", m.key(), "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    ACCEL_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
                Status::Format, what, ": tensor '", name, "' needs dtype, shape and data_offsets");
    TensorInfo t;
    t.name = name;
    ACCEL_CHECK(v["dtype"].is_string(), Status::Format, what, ": tensor '", name, "': dtype is not a string");
    t.dtype = v["dtype"].get<std::string>();
    const size_t esize = dtype_size(t.dtype);
    ACCEL_CHECK(esize != 0, Status::Format, what, ": tensor '", name, "' has unknown dtype '", t.dtype, "'");
    ACCEL_CHECK(v["shape"].is_array() && v["shape"].size() <= 64, Status::Format, what, ": tensor '", name,
                "': shape is not an array of at most 64 dimensions");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      ACCEL_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), Status::Format, what,
                  ": tensor '", name, "' has a dimension that is not a non-negative integer");
      const uint64_t dim = d.get<uint64_t>();
      ACCEL_CHECK(dim <= static_cast<uint64_t>(INT64_MAX) && !mul_overflows(numel, dim, &numel), Status::Format, what,
                  ": tensor '", name, "': its shape's element count overflows");
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    ACCEL_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                Status::Format, what, ": tensor '", name, "': data_offsets is not two non-negative integers");
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    ACCEL_CHECK(t.begin <= t.end && t.end <= data_size, Status::Format, what, ": tensor '", name, "': data_offsets [",
                t.begin, ", ", t.end, "] out of range for ", data_size, " bytes of data");
    uint64_t need = 0;
    ACCEL_CHECK(!mul_overflows(numel, esize, &need) && need == t.end - t.begin, Status::Format, what, ": tensor '",
                name, "': shape x dtype is ", need, " bytes but data_offsets span ", t.end - t.begin);
    out.tensors.push_back(std::move(t));
  }
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  uint64_t at = 0;
  for (const auto& t : out.tensors) {
    ACCEL_CHECK(t.begin == at, Status::Format, what, ": tensor '", t.name, "' at [", t.begin, ", ", t.end, ") ",
                t.begin < at ? "overlaps the tensor before it" : "leaves a hole after the tensor before it");
    at = t.end;
  }
  ACCEL_CHECK(at == data_size, Status::Format, what, ": the tensors cover ", at, " of the ", data_size,
              " bytes of data");
  return out;
}

std::string crc32_hex(const void* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  size_t done = 0;
  while (done < n) {  // zlib takes 32-bit lengths
    const uInt k = static_cast<uInt>(std::min<size_t>(n - done, 1u << 30));
    crc = crc32(crc, p + done, k);
    done += k;
  }
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08lx", static_cast<unsigned long>(crc));
  return buf;
}

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_fail("cannot open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    io_fail("cannot stat", path);
  }
  std::string out(static_cast<size_t>(std::max<off_t>(st.st_size, 0)), '\0');
  size_t done = 0;
  for (;;) {
    if (done == out.size()) out.resize(out.size() + (1 << 16));  // the file grew, or has no size
    ssize_t r = ::read(fd, &out[done], out.size() - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      errno = e;
      io_fail("cannot read", path);
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  out.resize(done);
  return out;
}

namespace {
[[noreturn]] void io_fail(const std::string& what, const std::string& path) {
  int e = errno;
  fail(status_of_errno(e), what, " '", path, "': ", std::strerror(e));
}
}  // namespace

namespace {

// Writes the parts to a temporary file beside `path`, fsyncs it, renames it into place and
// fsyncs the directory (base/files.h); throws Error (the status from errno) on failure.
void write_parts_atomic(const std::string& path, const std::vector<std::pair<const char*, size_t>>& parts) {
  if (files::Result r = files::write_atomic(path, parts, files::Durability::Sync); !r)
    fail(status_of_errno(r.err), r.message);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  write_parts_atomic(path, {{bytes.data(), bytes.size()}});
}

std::pair<uint64_t, std::string> write_tensors_atomic(const std::string& path, const std::string& header,
                                                      const std::vector<TensorView>& tensors) {
  std::vector<std::pair<const char*, size_t>> parts{{header.data(), header.size()}};
  uLong crc = crc32(0L, Z_NULL, 0);
  uint64_t total = header.size();
  auto add_crc = [&](const char* p, size_t n) {
    for (size_t done = 0; done < n;) {
      const uInt k = static_cast<uInt>(std::min<size_t>(n - done, 1u << 30));
      crc = crc32(crc, reinterpret_cast<const Bytef*>(p + done), k);
      done += k;
    }
  };
  add_crc(header.data(), header.size());
  for (const auto& t : tensors) {
    parts.push_back({static_cast<const char*>(t.data), t.nbytes});
    add_crc(static_cast<const char*>(t.data), t.nbytes);
    total += t.nbytes;
  }
  write_parts_atomic(path, parts);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08lx", static_cast<unsigned long>(crc));
  return {total, buf};
}

}  // namespace accel::safetensors
