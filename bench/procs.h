// Helpers of the benchmarks that run real processes (bench_gloo_allreduce,
// bench_ddp_processes, bench_launch, bench_sim_processes): this executable's path, a free TCP
// port, starting a process with its stdin/stdout on given descriptors, waiting for a group of
// processes with a deadline, medians, the memcpy bound (also bench_sim_allreduce's), JSON
// numbers and a temporary directory. Header-only, POSIX (Linux), torch-free.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace bench {

inline double mono_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double real_s() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline std::string json_num(double v, const char* fmt) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

inline std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
  }
  return o + "\"";
}

// The memcpy bound of the all-reduce benchmarks: a memcpy of `bytes` split across `threads`
// threads (started per call, as the simulator's engine starts its own), in seconds.
inline double timed_memcpy(void* dst, const void* src, size_t bytes, int threads) {
  const double t0 = mono_s();
  std::vector<std::thread> pool;
  const size_t per = ((bytes + threads - 1) / threads + 4095) & ~size_t(4095);
  for (int t = 1; t < threads; ++t) {
    const size_t b = std::min(bytes, per * t), e = std::min(bytes, b + per);
    if (b < e)
      pool.emplace_back([=] { std::memcpy(static_cast<char*>(dst) + b, static_cast<const char*>(src) + b, e - b); });
  }
  std::memcpy(dst, src, std::min(bytes, per));
  for (auto& th : pool) th.join();
  return mono_s() - t0;
}

struct Bound {
  double bound_s = NAN, memcpy_gbps = NAN;  // memcpy_gbps: bytes copied per second (1e9)
};

// The time this machine takes to memcpy `total_bytes`: timed on min(total_bytes, src.size())
// bytes with the machine's cores as threads and with one thread (the faster median of
// `reps` after a warm-up), scaled linearly.
inline Bound memcpy_bound(double total_bytes, std::vector<char>& src, std::vector<char>& dst, int reps) {
  const size_t b = std::min(static_cast<size_t>(total_bytes), src.size());
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<double> tn, t1;
  for (int i = 0; i < reps + 1; ++i) {
    const double a = timed_memcpy(dst.data(), src.data(), b, hw);
    const double c = hw > 1 ? timed_memcpy(dst.data(), src.data(), b, 1) : a;
    if (i > 0) tn.push_back(a), t1.push_back(c);
  }
  const double best = std::min(median(tn), median(t1));
  Bound out;
  out.memcpy_gbps = static_cast<double>(b) / best / 1e9;
  out.bound_s = total_bytes / (out.memcpy_gbps * 1e9);
  return out;
}

// This executable (the benchmarks re-run themselves as worker processes).
inline std::string self_exe() {
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return "";
  exe[len] = '\0';
  return exe;
}

// A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick; the window until
// the rendezvous server binds it is short).
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

inline std::string make_temp_dir(const char* prefix) {
  std::string t = std::string("/tmp/") + prefix + "-XXXXXX";
  std::vector<char> buf(t.begin(), t.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) return "";
  return buf.data();
}

inline void remove_dir(const std::string& dir) {
  if (dir.empty() || dir.rfind("/tmp/", 0) != 0) return;
  const std::string rm = "rm -rf '" + dir + "'";
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "bench: could not remove %s\n", dir.c_str());
}

// Starts `args` (args[0] is the program's path). The child's stdin is `in_fd` (-1: inherited)
// and its stdout `out_fd` (-1: this process's stderr, so that stdout carries only results);
// `env` holds NAME=VALUE pairs set in the child. Returns the pid, or -1.
inline pid_t spawn(const std::vector<std::string>& args, int in_fd = -1, int out_fd = -1,
                   const std::vector<std::string>& env = {}) {
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> e = env;
  const pid_t pid = fork();
  if (pid == 0) {
    if (in_fd >= 0) dup2(in_fd, 0);
    dup2(out_fd >= 0 ? out_fd : 2, 1);
    for (auto& kv : e) putenv(kv.data());
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

inline std::string describe_status(int st) {
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return "was killed by signal " + std::to_string(WTERMSIG(st));
  return "stopped";
}

// Waits for every pid; past `limit_s` seconds the ones left are SIGKILLed. Returns "" when
// every one exited 0, else what went wrong (the first failure, or the timeout).
inline std::string wait_all(const std::vector<pid_t>& pids, double limit_s, const char* what = "worker") {
  const double deadline = mono_s() + limit_s;
  std::vector<bool> reaped(pids.size(), false);
  size_t left = pids.size();
  std::string failure;
  int failed = 0;
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (reaped[i]) continue;
      int st = 0;
      if (waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        reaped[i] = true;
        --left;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
          ++failed;
          if (failure.empty()) failure = std::string(what) + " " + std::to_string(i) + " " + describe_status(st);
        }
      }
    }
    if (left > 0 && mono_s() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (!reaped[i]) kill(pids[i], SIGKILL);
      for (size_t i = 0; i < pids.size(); ++i)
        if (!reaped[i]) waitpid(pids[i], nullptr, 0);
      return "timed out after " + std::to_string(static_cast<int>(limit_s)) + " s" +
             (failure.empty() ? "" : " (" + failure + ")");
    }
    if (left > 0) usleep(5000);
  }
  if (failed) return std::to_string(failed) + " " + what + "(s) failed (" + failure + ")";
  return "";
}

}  // namespace bench
