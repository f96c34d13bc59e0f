// Where the library may write (see paths.h).
#include "runtime/paths.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint_format.h"
#include "base/status.h"

namespace accel::paths {

namespace fs = std::filesystem;

namespace {

// The first `n` bytes of a regular file ("" when unreadable).
std::string head(const fs::path& p, size_t n) {
  std::string out(n, '\0');
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return {};
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::read(fd, &out[done], n - done);
    if (r <= 0) break;
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  out.resize(done);
  return out;
}

bool is_manifest(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(p, ec))) return false;
  const auto size = fs::file_size(p, ec);
  if (ec || size > (64u << 20)) return false;
  const std::string text = head(p, static_cast<size_t>(size));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("format") && j["format"] == "accel-checkpoint";
}

bool is_safetensors(const fs::path& p) {
  const std::string h = head(p, 8);
  if (h.size() != 8) return false;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(h[static_cast<size_t>(i)]);
  if (n < 2 || n > (100u << 20)) return false;
  const std::string all = head(p, static_cast<size_t>(8 + n));
  if (all.size() != 8 + n) return false;
  return nlohmann::json::parse(all.begin() + 8, all.end(), nullptr, false).is_object();
}

bool is_zip(const fs::path& p) { return head(p, 4) == std::string("PK\x03\x04", 4); }

// What World::trace_json writes starts so.
bool is_trace(const fs::path& p) {
  const std::string start = "{\"displayTimeUnit\":";
  return head(p, start.size()) == start;
}

bool is_token_file(const fs::path& p) { return head(p, 8) == std::string("ACCELTOK", 8); }

}  // namespace

std::string describe(const fs::path& p) {
  std::error_code ec;
  const fs::file_status s = fs::symlink_status(p, ec);
  switch (s.type()) {
    case fs::file_type::not_found: return "nothing";
    case fs::file_type::regular: return "a regular file";
    case fs::file_type::directory: return "a directory";
    case fs::file_type::symlink: {
      const fs::path to = fs::read_symlink(p, ec);
      return ec ? std::string("a symbolic link") : "a symbolic link to '" + to.string() + "'";
    }
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::fifo: return "a FIFO";
    case fs::file_type::socket: return "a socket";
    default: return ec ? "something unreadable (" + ec.message() + ")" : "something unknown";
  }
}

bool is_checkpoint_dir(const fs::path& dir, bool need_manifest) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return false;
  bool manifest = false;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!fs::is_regular_file(it->symlink_status(ec)) || !ckpt::is_checkpoint_file_name(name, /*temporary=*/true))
      return false;
    if (name == ckpt::names::kManifest) manifest = is_manifest(it->path());
  }
  return !ec && (manifest || !need_manifest);
}

void check_checkpoint_target(const fs::path& target, const std::string& arg) {
  std::error_code ec;
  const fs::file_status s = fs::symlink_status(target, ec);
  if (s.type() == fs::file_type::not_found) return;
  if (s.type() == fs::file_type::directory) {
    if (fs::is_empty(target, ec) && !ec) return;
    if (is_checkpoint_dir(target, /*need_manifest=*/true)) return;
    fail(Status::InvalidArgument, arg, " '", target.string(),
         "' is a directory that is not an accel checkpoint (it holds other files): refusing to replace it; "
         "choose a new path, or an earlier checkpoint's");
  }
  fail(Status::InvalidArgument, arg, " '", target.string(), "' is ", describe(target),
       ", not an accel checkpoint: refusing to replace it; choose a new path, or an earlier checkpoint's");
}

void check_leftover(const fs::path& tmp, const fs::path& target) {
  std::error_code ec;
  const fs::file_status s = fs::symlink_status(tmp, ec);
  if (s.type() == fs::file_type::not_found) return;
  if (s.type() == fs::file_type::directory && is_checkpoint_dir(tmp, /*need_manifest=*/false)) return;
  fail(Status::InvalidArgument, "the save to '", target.string(), "' uses the temporary path '", tmp.string(),
       "', where there is ", describe(tmp), " that an accel save did not leave: refusing to delete it; move it away");
}

void check_file_target(const std::string& path, FileKind kind, const std::string& arg) {
  ACCEL_CHECK(!path.empty(), Status::InvalidArgument, arg, " is empty");
  const fs::path p(path);
  std::error_code ec;
  const fs::file_status s = fs::symlink_status(p, ec);
  const char* what = kind == FileKind::Safetensors   ? "a safetensors file"
                     : kind == FileKind::TorchScript ? "a TorchScript file"
                     : kind == FileKind::TokenFile   ? "a token file"
                                                     : "a Chrome trace";
  if (s.type() == fs::file_type::not_found) {
    ACCEL_CHECK(!p.filename().empty() && p.filename() != "." && p.filename() != "..", Status::InvalidArgument, arg,
                " '", path, "' names a directory, not a file");
    return;
  }
  if (s.type() == fs::file_type::regular) {
    const bool same_kind = kind == FileKind::Safetensors   ? is_safetensors(p)
                           : kind == FileKind::TorchScript ? is_zip(p)
                           : kind == FileKind::TokenFile   ? is_token_file(p)
                                                           : is_trace(p);
    ACCEL_CHECK(same_kind, Status::InvalidArgument, arg, " '", path, "' is a regular file that is not ", what,
                ": refusing to replace it; choose a new path, or an earlier one of ", what);
    return;
  }
  fail(Status::InvalidArgument, arg, " '", path, "' is ", describe(p), ", not ", what,
       ": refusing to write there; choose a new path");
}

}  // namespace accel::paths
