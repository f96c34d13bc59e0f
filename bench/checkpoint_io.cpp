// bench_checkpoint_io: save_state / load_state throughput of a ~500 MB training state
// (an MLP's fp32 weights plus AdamW's two moments) against this disk's raw sequential write
// speed, measured in the same run in the same directory.
//
//   {"bench":"checkpoint_io","state_mb":…,"disk_write_mb_s":…,"save_mb_s":…,"load_mb_s":…,
//    "save_vs_disk":…,"load_vs_disk":…}
//
// disk_write_mb_s: 500 MB written with write(2) in 8 MiB blocks, then fsync, into a fresh
// file (the best of the rounds). save_mb_s: the state's bytes / the time of save_state
// (serialising, CRC-32 of every file, writing, fsync of files and directories, the rename).
// load_mb_s: the bytes / the time of load_state (reading, checking the CRCs, parsing,
// copying into the model and the optimizer), from the page cache as a resume right after
// a save would. The target is save_vs_disk >= 0.5 and load_vs_disk >= 0.5.
//
//   bench_checkpoint_io [--quick] [--dir DIR] [--rounds N]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/runtime.h"

namespace {
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double disk_write(const fs::path& file, size_t bytes) {
  std::vector<char> block(8u << 20);
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i * 131);
  const auto t0 = Clock::now();
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror("bench_checkpoint_io: open");
    std::exit(1);
  }
  size_t done = 0;
  while (done < bytes) {
    const size_t n = std::min(block.size(), bytes - done);
    ssize_t w = ::write(fd, block.data(), n);
    if (w <= 0) {
      std::perror("bench_checkpoint_io: write");
      std::exit(1);
    }
    done += static_cast<size_t>(w);
  }
  ::fsync(fd);
  ::close(fd);
  const double s = seconds_since(t0);
  fs::remove(file);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace accel;
  int rounds = 3;
  int64_t width = 3232;  // 4 layers of 3232x3232 (+ bias): 41.8 M parameters, 502 MB with AdamW's state
  const char* tmp = std::getenv("TMPDIR");
  fs::path dir = fs::path(tmp ? tmp : "/tmp") / ("accel_bench_ckpt_" + std::to_string(::getpid()));
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      rounds = 1;
      width = 1024;
    } else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) {
      dir = fs::path(argv[++i]) / ("accel_bench_ckpt_" + std::to_string(::getpid()));
    } else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      ++i;  // other benchmarks' options (scripts/bench passes them to all)
    } else if (!std::strcmp(argv[i], "--breakdown")) {
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--dir DIR] [--rounds N]\n", argv[0]);
      return 2;
    }
  }
  fs::create_directories(dir);
  Options o;
  o.device = DeviceKind::CPU;
  Accelerator acc(o);
  MLPConfig cfg;
  cfg.sizes = {width, width, width, width, width};
  std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
  auto opt = std::make_shared<Optimizer>(model, AdamWConfig{});
  acc.prepare(model, opt, nullptr, nullptr);
  // one step creates AdamW's moments
  auto x = torch::randn({2, width});
  acc.backward(cross_entropy(acc.forward(*model, {x}), torch::zeros({2}, torch::kLong)));
  acc.step();
  const double bytes = 3.0 * 4.0 * static_cast<double>(model->num_elements());
  const double mb = bytes / 1e6;
  std::fprintf(stderr, "bench_checkpoint_io: %.0f MB of state in %s\n", mb, dir.c_str());

  double disk = 1e30, save = 1e30, load = 1e30;
  for (int r = 0; r < rounds; ++r) {
    std::fprintf(stderr, "bench_checkpoint_io: round %d/%d\n", r + 1, rounds);
    disk = std::min(disk, disk_write(dir / "raw.bin", static_cast<size_t>(bytes)));
    const fs::path ck = dir / "checkpoint";
    fs::remove_all(ck);
    auto t0 = Clock::now();
    acc.save_state(ck.string());
    save = std::min(save, seconds_since(t0));
    t0 = Clock::now();
    acc.load_state(ck.string());
    load = std::min(load, seconds_since(t0));
  }
  fs::remove_all(dir);
  std::printf("{\"bench\":\"checkpoint_io\",\"state_mb\":%.1f,\"disk_write_mb_s\":%.1f,\"save_mb_s\":%.1f,\"load_mb_s\":%.1f,"
              "\"save_vs_disk\":%.3f,\"load_vs_disk\":%.3f,\"rounds\":%d}\n",
              mb, mb / disk, mb / save, mb / load, disk / save, disk / load, rounds);
  return 0;
}
