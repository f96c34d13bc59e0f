// Shared by the language-model tests (test_lm.cpp, test_lm_data_errors.cpp): the fixtures' paths,
// a temporary directory, safetensors files read and written, comparisons, simulated ranks.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>

#include "runtime/compat.h"
#include "runtime/models/memory_estimate.h"
#include "runtime/models/transformer.h"
#include "runtime/runtime.h"
#include "runtime/safetensors.h"
#include "base/status.h"
#include "sim/world.h"

namespace accel::lm_test {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline const std::string kFixtures = ACCEL_LM_FIXTURES;

inline std::string fixture(const std::string& name) { return kFixtures + "/" + name; }

// A fresh temporary directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const char* t = std::getenv("TMPDIR");
    static int n = 0;
    path_ = fs::path(t ? t : "/tmp") / ("accel_test_lm_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  // A copy of a fixture directory inside this one.
  std::string copy_of(const std::string& name) const {
    const fs::path to = path_ / name;
    fs::copy(fixture(name), to, fs::copy_options::recursive);
    return to.string();
  }

 private:
  fs::path path_;
};

inline torch::ScalarType torch_dtype(const std::string& st) {
  if (st == "F32") return torch::kFloat;
  if (st == "BF16") return torch::kBFloat16;
  if (st == "F16") return torch::kHalf;
  if (st == "I64") return torch::kLong;
  if (st == "I32") return torch::kInt;
  if (st == "U8") return torch::kByte;
  if (st == "I8") return torch::kChar;
  ADD_FAILURE() << "dtype " << st;
  return torch::kFloat;
}

inline std::string st_dtype(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return "F32";
    case torch::kBFloat16: return "BF16";
    case torch::kHalf: return "F16";
    case torch::kLong: return "I64";
    case torch::kInt: return "I32";
    default: ADD_FAILURE() << "dtype"; return "";
  }
}

// A safetensors file's tensors, in file order.
inline std::vector<std::pair<std::string, torch::Tensor>> read_st(const std::string& path) {
  const std::string bytes = safetensors::read_file(path);
  const auto h = safetensors::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& t : h.tensors)
    out.emplace_back(t.name, torch::from_blob(const_cast<char*>(bytes.data()) + h.data_start + t.begin, t.shape,
                                              torch::TensorOptions().dtype(torch_dtype(t.dtype)))
                                 .clone());
  return out;
}

inline std::map<std::string, torch::Tensor> read_map(const std::string& path) {
  std::map<std::string, torch::Tensor> m;
  for (auto& [n, t] : read_st(path)) m[n] = t;
  return m;
}

inline void write_st(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& ts) {
  std::vector<torch::Tensor> keep;
  std::vector<safetensors::TensorView> views;
  for (const auto& [n, t] : ts) {
    keep.push_back(t.contiguous());
    views.push_back({n, st_dtype(t.scalar_type()), t.sizes().vec(), keep.back().data_ptr(),
                     static_cast<size_t>(t.numel()) * t.element_size()});
  }
  fs::remove(path);
  safetensors::write_file_atomic(path, safetensors::serialize(views, {{"format", "pt"}}));
}

inline double max_rel(const torch::Tensor& a, const torch::Tensor& ref) {
  const double denom = ref.abs().max().item<double>();
  return (a.to(torch::kFloat) - ref).abs().max().item<double>() / std::max(denom, 1e-30);
}

template <class F>
void expect_error(F&& f, Status status, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error (expected status " << static_cast<int>(status) << ")";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.status()), static_cast<int>(status)) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "'" << p << "' not in: " << e.what();
  }
}

// Runs fn(acc, rank) on `world` simulated ranks, each with a CPU Accelerator of strategy s
// and `accumulation` gradient accumulation steps (seed 1).
inline sim::RunReport on_ranks(int world, Strategy s, int64_t accumulation,
                        const std::function<void(Accelerator&, sim::Rank&)>& fn, Precision precision = Precision::No) {
  sim::WorldOptions wo;
  wo.world_size = world;
  wo.timeout_seconds = 30;
  sim::World w(wo);
  return w.run([&](sim::Rank& rk) {
    Options o;
    o.seed = 1;
    o.device = DeviceKind::CPU;
    o.strategy = s;
    o.gradient_accumulation_steps = accumulation;
    o.precision = precision;
    std::shared_ptr<comm::Communicator> c(&rk.comm(), [](comm::Communicator*) {});
    Accelerator acc(o, c);
    fn(acc, rk);
  });
}

}  // namespace accel::lm_test
