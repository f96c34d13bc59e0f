// `accel env`: versions, BLAS, threads, devices and backends. The one subcommand that
// includes libtorch (ATen: its threads, its build, a matmul that loads the BLAS).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "accel/accel.h"
#include "comm/nccl/nccl.h"
#include "runtime/blas.h"
#include "runtime/world.h"
#include "sim/cost.h"
#include "tools/commands.h"

namespace accel::tools {

// `accel env`: what a bug report needs, as `accelerate env` prints it.
int env() {
  {  // a matmul large enough to go through BLAS, so that the BLAS is loaded and initialised
    const at::Tensor a = at::ones({64, 64});
    (void)at::mm(a, a).sum().item<float>();
  }
  const accel::blas::Info b = accel::blas::info();
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const char* obl = std::getenv("OPENBLAS_NUM_THREADS");
  std::printf("- accel version: %s (ACCEL_VERSION_NUMBER %d, libaccel.so.0)\n", accel_version_string(),
              accel_version_number());
  std::printf("- libtorch version: %s (C++ ABI %s)\n", TORCH_VERSION, _GLIBCXX_USE_CXX11_ABI ? "cxx11" : "pre-cxx11");
  std::printf("- BLAS: %s%s%s\n", b.name.c_str(), b.details.empty() ? "" : ", ", b.details.c_str());
  std::printf("- BLAS library: %s\n", b.path.empty() ? "(none mapped)" : b.path.c_str());
  std::printf("- threads: libtorch intra-op %d, inter-op %d, BLAS %s; %u cores; OMP_NUM_THREADS=%s, "
              "OPENBLAS_NUM_THREADS=%s\n",
              static_cast<int>(at::get_num_threads()), static_cast<int>(at::get_num_interop_threads()),
              b.threads > 0 ? std::to_string(b.threads).c_str() : "(follows OpenMP or unknown)",
              std::thread::hardware_concurrency(), omp ? omp : "unset", obl ? obl : "unset");
  std::printf("- libtorch built with: OpenMP %s, MKL %s, LAPACK %s, MKL-DNN %s\n", at::hasOpenMP() ? "yes" : "no",
              at::hasMKL() ? "yes" : "no", at::hasLAPACK() ? "yes" : "no", at::hasMKLDNN() ? "yes" : "no");
  {  // the kernel sets the CPU libraries picked (docs/performance.md, "Kernel sets": how to pick lower ones)
    auto var = [](const char* name) {
      const char* v = std::getenv(name);
      return std::string(v && *v ? v : "unset");
    };
    const accel::blas::Cpu& c = accel::blas::cpu();
    std::printf("- CPU: %s; AVX2 %s, AVX-512 %s, AVX-512 BF16 %s, AMX-BF16 %s; ATEN_CPU_CAPABILITY=%s, "
                "ONEDNN_MAX_CPU_ISA=%s, OPENBLAS_CORETYPE=%s\n",
                c.model.empty() ? "(unknown)" : c.model.c_str(), c.avx2 ? "yes" : "no", c.avx512 ? "yes" : "no",
                c.avx512_bf16 ? "yes" : "no", c.amx_bf16 ? "yes" : "no", var("ATEN_CPU_CAPABILITY").c_str(),
                var("ONEDNN_MAX_CPU_ISA").c_str(), var("OPENBLAS_CORETYPE").c_str());
    std::string why;
    const bool native = accel::blas::cpu_bf16_native(&why);
    std::printf("- bf16 on this CPU: %s (%s); mixed precision auto trains in %s here\n", native ? "native" : "not native",
                why.c_str(), native ? "bf16" : "fp32");
  }
  const bool cuda = torch::cuda::is_available();
  std::printf("- devices: CPU%s\n",
              cuda ? (", CUDA x" + std::to_string(torch::cuda::device_count())).c_str()
                   : "; CUDA: not available (this libtorch or machine has none)");
  std::printf("- communication backends: %s\n", accel::world::backend_names().c_str());
  try {  // the simulated NCCL that ACCEL_BACKEND=sim loads (accel launch --backend sim)
    std::printf("- simulated NCCL (ACCEL_BACKEND=sim): %s\n", accel::comm::sim_nccl_library().c_str());
  } catch (const std::exception& e) {
    std::printf("- simulated NCCL (ACCEL_BACKEND=sim): not loadable: %s\n", e.what());
  }
  try {  // the real NCCL and CUDA runtime that ACCEL_BACKEND=nccl loads (never linked)
    std::printf("- NCCL and CUDA runtime (ACCEL_BACKEND=nccl, loaded at run time): %s\n",
                accel::comm::real_nccl_library().c_str());
  } catch (const std::exception& e) {
    std::printf("- NCCL and CUDA runtime (ACCEL_BACKEND=nccl, loaded at run time): not found: %s\n", e.what());
  }
  std::printf("- simulator topologies:");
  for (const auto& name : accel::sim::topology_preset_names()) std::printf(" %s", name.c_str());
  std::printf("\n");
  return 0;
}

}  // namespace accel::tools
