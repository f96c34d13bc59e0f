#include "base/files.h"

#include <dlfcn.h>
#include <link.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "base/text.h"

namespace accel::files {

namespace fs = std::filesystem;
using text::errno_text;

namespace {

Result failure(int e, const std::string& what, const std::string& path) {
  return {e != 0 ? e : EIO, what + " '" + path + "': " + errno_text(e)};
}

std::string parent_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// "PATH.tmp.PID[.K]", created with O_EXCL.
Result create_temporary(const std::string& path, std::string& tmp, int& fd) {
  const std::string stem = path + ".tmp." + std::to_string(::getpid());
  fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp = attempt ? stem + "." + std::to_string(attempt) : stem;
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt == 100)) return failure(errno, "cannot create", tmp);
  }
  return {};
}

Result rename_into_place(const std::string& tmp, const std::string& path, Durability durability) {
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return {e, "cannot rename '" + tmp + "' to '" + path + "': " + errno_text(e)};
  }
  if (durability == Durability::Sync) fsync_dir(parent_of(path));
  return {};
}

}  // namespace

Result write_atomic(const std::string& path, const std::vector<std::pair<const char*, std::size_t>>& parts,
                    Durability durability) {
  std::string tmp;
  int fd = -1;
  if (Result r = create_temporary(path, tmp, fd); !r) return r;
  for (const auto& [data, size] : parts) {
    size_t done = 0;
    while (done < size) {
      const ssize_t w = ::write(fd, data + done, std::min<size_t>(size - done, size_t{1} << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        const int e = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        return failure(e, "cannot write", tmp);
      }
      done += static_cast<size_t>(w);
    }
  }
  // fd is closed exactly once, whether the fsync fails or not (a second close could close a
  // descriptor another thread has just been given the same number for)
  const int synced = durability == Durability::Sync && ::fsync(fd) != 0 ? errno : 0;
  const int closed = ::close(fd) != 0 ? errno : 0;
  if (synced != 0 || closed != 0) {
    ::unlink(tmp.c_str());
    return failure(synced != 0 ? synced : closed, "cannot flush", tmp);
  }
  return rename_into_place(tmp, path, durability);
}

Result write_atomic(const std::string& path, const std::string& bytes, Durability durability) {
  return write_atomic(path, {{bytes.data(), bytes.size()}}, durability);
}

Result make_temporary(const std::string& path, std::string& tmp) {
  int fd = -1;
  if (Result r = create_temporary(path, tmp, fd); !r) return r;
  ::close(fd);
  return {};
}

Result commit(const std::string& tmp, const std::string& path, Durability durability) {
  if (durability == Durability::Sync) {
    const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      const int e = errno;
      if (fd >= 0) ::close(fd);
      ::unlink(tmp.c_str());
      return failure(e, "cannot flush", tmp);
    }
    ::close(fd);
  }
  return rename_into_place(tmp, path, durability);
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

Result publish_dir(const std::string& tmp, const std::string& target, const std::string& old) {
  std::error_code ec;
  const std::string parent = parent_of(target);
  if (fs::exists(target, ec)) {
#ifdef SYS_renameat2
    if (::syscall(SYS_renameat2, AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), 2 /* RENAME_EXCHANGE */) == 0) {
      fsync_dir(parent);
      fs::remove_all(tmp, ec);
      return {};
    }
#endif
    fs::remove_all(old, ec);
    fs::rename(target, old, ec);
    if (ec) return {ec.value(), "cannot move the earlier '" + target + "' aside: " + ec.message()};
    fs::rename(tmp, target, ec);
    if (ec) return {ec.value(), "cannot rename '" + tmp + "' to '" + target + "': " + ec.message()};
    fsync_dir(parent);
    fs::remove_all(old, ec);
    return {};
  }
  fs::rename(tmp, target, ec);
  if (ec) return {ec.value(), "cannot rename '" + tmp + "' to '" + target + "': " + ec.message()};
  fsync_dir(parent);
  return {};
}

FileLock lock_file(const std::string& path, const std::string& who) {
  FileLock l;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    l.result = {errno, "cannot open the lock file '" + path + "': " + text::errno_text(errno)};
    return l;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (e == EWOULDBLOCK) {
      l.busy = true;
      char buf[512];
      const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
      l.holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
      while (!l.holder.empty() && (l.holder.back() == '\n' || l.holder.back() == '\0')) l.holder.pop_back();
      if (l.holder.empty()) l.holder = "a process that has not written its name yet";
    } else {
      l.result = {e, "cannot lock '" + path + "': " + text::errno_text(e)};
    }
    ::close(fd);
    return l;
  }
  const std::string line = who + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    const int e = errno;
    ::close(fd);
    l.result = {e, "cannot write the lock file '" + path + "': " + text::errno_text(e)};
    return l;
  }
  l.fd = fd;
  return l;
}

void unlock_file(int fd) {
  if (fd >= 0) ::close(fd);
}

bool send_with_descriptors(int sock, const void* data, std::size_t len, const int* fds, std::size_t count) {
  constexpr std::size_t kMax = 4;
  if (count > kMax) {
    errno = EINVAL;
    return false;
  }
  iovec iov{const_cast<void*>(data), len};
  alignas(cmsghdr) char control[CMSG_SPACE(kMax * sizeof(int))] = {};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  if (count > 0) {
    h.msg_control = control;
    h.msg_controllen = CMSG_SPACE(count * sizeof(int));
    cmsghdr* cm = CMSG_FIRSTHDR(&h);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(count * sizeof(int));
    std::memcpy(CMSG_DATA(cm), fds, count * sizeof(int));
  }
  return ::sendmsg(sock, &h, MSG_NOSIGNAL) == static_cast<ssize_t>(len);
}

std::string own_directory() {
  Dl_info info{};
  link_map* map = nullptr;
  if (::dladdr1(reinterpret_cast<void*>(&own_directory), &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0)
    return "";
  std::string path;
  if (map && map->l_name && map->l_name[0]) {
    path = map->l_name;  // a shared object: the path the loader opened
  } else {
    // the program itself (the runtime linked statically): the loader knows it only by its
    // argv[0] ("accel" when found through PATH), the kernel by its file
    char buf[4096];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return "";
    path.assign(buf, static_cast<std::size_t>(n));
  }
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace accel::files
