// `accel launch`: the children's output relayed line by line, prefixed with the rank, to the
// launcher's stdout and stderr and to the log files; progress bars redrawn in place on a
// terminal; each rank's last stderr lines kept for the failure report.
#include "tools/launch/internal.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

namespace accel::launch {

// Reads one chunk; returns false at end of file or error (the stream is closed).
bool Launcher::read_some(Child& c, bool is_err) {
  Stream& s = is_err ? c.err : c.out;
  if (s.fd < 0) return false;
  char buf[kReadChunk];
  ssize_t got = ::read(s.fd, buf, sizeof buf);
  if (got > 0) {
    take(c, is_err, buf, static_cast<size_t>(got));
    return true;
  }
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return false;
  flush_partial(c, is_err);
  close_stream(s);
  return false;
}

// Everything a reaped child wrote is already in its pipes; a descendant still holding
// them open may write more, which is read while the group lives.
// (Bounded: a descendant that keeps writing cannot hold the launcher here.)
void Launcher::drain(Child& c) {
  for (bool is_err : {false, true})
    for (int i = 0; i < 256 && read_some(c, is_err); ++i) {
    }
}

void Launcher::finish_output() {
  for (auto& c : children_) {
    drain(c);
    for (bool is_err : {false, true}) {
      flush_partial(c, is_err);
      close_stream(is_err ? c.err : c.out);
    }
    if (c.log) std::fflush(c.log);
  }
}

void Launcher::take(Child& c, bool is_err, const char* p, size_t n) {
  Stream& s = is_err ? c.err : c.out;
  std::string out;
  size_t begin = 0;
  for (size_t i = 0; i < n; ++i) {
    if (p[i] == '\r' && terminal_ && !is_err && !(i + 1 < n && p[i + 1] == '\n')) {
      // a progress bar's update (ended by a carriage return): redrawn in place under the
      // process's rank, on the launcher's terminal only (never in the log)
      s.partial.append(p + begin, i - begin);
      if (!s.partial.empty()) {
        out += "\r[" + std::to_string(c.rank) + "] " + s.partial + "\033[K";
        bar_open_ = true;
      }
      s.partial.clear();
      begin = i + 1;
      continue;
    }
    if (p[i] != '\n') continue;
    if (bar_open_) {  // the next line takes the bar's place
      out += "\r\033[K";
      bar_open_ = false;
    }
    if (s.partial.empty()) {
      line(c, is_err, p + begin, i - begin, out);
    } else {
      s.partial.append(p + begin, i - begin);
      line(c, is_err, s.partial.data(), s.partial.size(), out);
      s.partial.clear();
    }
    begin = i + 1;
  }
  s.partial.append(p + begin, n - begin);
  if (s.partial.size() >= kMaxLine) {
    line(c, is_err, s.partial.data(), s.partial.size(), out);
    s.partial.clear();
  }
  write_all(is_err ? 2 : 1, out);
  if (c.log) std::fflush(c.log);
}

void Launcher::flush_partial(Child& c, bool is_err) {
  Stream& s = is_err ? c.err : c.out;
  if (s.partial.empty()) return;
  std::string out;
  line(c, is_err, s.partial.data(), s.partial.size(), out);
  s.partial.clear();
  write_all(is_err ? 2 : 1, out);
}

// One line of a child's output: prefixed to the launcher's stream, as it is to the log.
void Launcher::line(Child& c, bool is_err, const char* p, size_t n, std::string& out) {
  out += "[" + std::to_string(c.rank) + "]";
  if (n > 0) {
    out += ' ';
    out.append(p, n);
  }
  out += '\n';
  if (c.log) {
    std::fwrite(p, 1, n, c.log);
    std::fputc('\n', c.log);
  }
  if (is_err) {
    c.last_err.emplace_back(p, n);
    if (c.last_err.size() > kLastLines) c.last_err.pop_front();
  }
}

}  // namespace accel::launch
