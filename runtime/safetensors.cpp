#include "runtime/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "runtime/status.h"

namespace accel::safetensors {

size_t dtype_size(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
      {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2},  {"U8", 1},   {"BOOL", 1}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

std::string serialize(const std::vector<TensorView>& tensors, const std::map<std::string, std::string>& metadata) {
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
  out.reserve(8 + json.size() + offset);
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += json;
  for (const auto& t : tensors) out.append(static_cast<const char*>(t.data), t.nbytes);
  return out;
}

namespace {
[[noreturn]] void io_fail(const std::string& what, const std::string& path) {
  int e = errno;
  fail(Status::IO, what, " '", path, "': ", std::strerror(e));
}
}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_fail("cannot create", tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = e;
      io_fail("cannot write", tmp);
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    errno = e;
    io_fail("cannot flush", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    errno = e;
    io_fail("cannot rename into place", path);
  }
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  if (dir.empty()) dir = "/";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace accel::safetensors
