// `accel launch`: what the launcher writes (to a descriptor, its own lines prefixed), and the
// texts of times, numbers, signals and wait statuses.
#include "tools/launch/internal.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <string>

namespace accel::launch {

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // a closed terminal or pipe: the output is lost, the launcher goes on
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void write_all(int fd, const std::string& s) { write_all(fd, s.data(), s.size()); }

void say(const std::string& s) { write_all(2, "accel launch: " + s + "\n"); }

std::string signal_name(int sig) { return text::signal_name(sig); }

std::string seconds_text(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

std::string number_text(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// "exited with code 3", "was killed by signal 9 (SIGKILL)".
std::string describe_status(int status) { return text::wait_status_text(status); }

bool succeeded(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

}  // namespace accel::launch
