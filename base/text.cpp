#include "base/text.h"

#include <sys/wait.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <type_traits>

#include "base/status.h"

namespace accel::text {

uint64_t parse_bytes(const std::string& text, const char* what) {
  // digits, an optional fraction, optional spaces, an optional unit; nothing else
  auto refuse = [&](const std::string& why) {
    fail(Status::InvalidArgument, what, " '", text, "' ", why,
         " (a positive number and a unit: 64MiB, 1.5GiB, 80GB, 1000000; units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  };
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  const size_t int_digits = i;
  size_t frac_digits = 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++frac_digits;
    if (frac_digits == 0) refuse("is not a size");
  }
  if (int_digits == 0) refuse("is not a size");
  const std::string number = text.substr(0, i);
  while (i < text.size() && text[i] == ' ') ++i;
  const std::string unit = text.substr(i);
  static const std::map<std::string, double> units = {
      {"", 1},           {"B", 1},         {"KiB", 1024.0},    {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6},     {"GB", 1e9},        {"TB", 1e12},
      {"K", 1024.0},     {"M", 1048576.0}, {"G", 1073741824.0}};
  auto it = units.find(unit);
  if (it == units.end()) refuse("has an unknown unit '" + unit + "'");
  const double bytes = std::strtod(number.c_str(), nullptr) * it->second;  // digits only: strtod cannot fail
  if (!(bytes < 18446744073709551616.0)) refuse("is too large (at most 16 EiB)");
  const uint64_t out = static_cast<uint64_t>(bytes + 0.5);
  if (out == 0) refuse("is zero (a budget's \"unlimited\" or no size at all means no limit, as its option says)");
  return out;
}

std::string format_bytes(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
  else if (b >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1ull << 20));
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(b) / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(b));
  return buf;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += c;
    }
  }
  return o;
}

std::string errno_text(int e) {
  char buf[256];
  // GNU strerror_r returns the text (possibly not in buf); the XSI one fills buf.
  auto r = ::strerror_r(e, buf, sizeof buf);
  if constexpr (std::is_same_v<decltype(r), char*>) return r;
  else return r == 0 ? buf : "error " + std::to_string(e);
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string wait_status_text(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    std::string s = "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
    if (WCOREDUMP(status)) s += ", core dumped";
    return s;
  }
  return "ended with wait status " + std::to_string(status);
}

}  // namespace accel::text
