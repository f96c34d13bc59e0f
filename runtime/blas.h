// The BLAS that libtorch's CPU matmuls run on, found at run time: Debian's libtorch reaches
// BLAS through the libblas.so.3 alternative (netlib's reference BLAS unless an optimized one
// is installed), so the library loaded in this process is what counts, not the build.
// Torch-free (dlsym and /proc/self/maps).
#pragma once

#include <string>

namespace accel::blas {

struct Info {
  std::string name;     // "OpenBLAS", "BLIS", "netlib (reference)", "MKL", "unknown"
  std::string path;     // the loaded library's path, resolved ("" when none is loaded yet)
  std::string details;  // the library's own build string (OpenBLAS's config, BLIS's version)
  int threads = 0;      // the BLAS's own thread count, where it exposes one (0: unknown)
};

// What is loaded now. libtorch loads BLAS with the process; call after it is loaded.
Info info();

// Sets the BLAS's own thread count where it has one (OpenBLAS, BLIS); a BLAS that uses
// OpenMP follows libtorch's intra-op setting already. Returns false when it has none.
bool set_threads(int n);

// Sets the calling thread's intra-op thread count, leaving other threads' as they are: the
// OpenMP runtime's per-thread count, in the OpenMP runtime that the library holding
// `anchor` (a function of libtorch) uses (a PyTorch wheel carries a libgomp of its own),
// and MKL's thread-local count where MKL is loaded. False when no OpenMP runtime is found.
bool set_calling_thread_threads(int n, const void* anchor);

// The CPU's kernel sets, as libtorch, oneDNN and OpenBLAS choose among them at run time.
struct Cpu {
  std::string model;                 // /proc/cpuinfo's model name ("" where it has none)
  bool avx2 = false, avx512 = false;  // AVX2 + FMA; AVX-512 F/BW/VL/DQ (with the OS saving ZMM state)
  bool avx512_bf16 = false, amx_bf16 = false;  // bf16 instructions, each with its OS state saved
};
const Cpu& cpu();

// Whether bf16 matmuls are fast on this CPU: it has AVX-512 BF16 or AMX-BF16 and
// ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) does not hold oneDNN below them. `why` (optional)
// gets what was found ("AVX-512 BF16", "no AVX-512 BF16 or AMX-BF16", "..., held below it by
// ONEDNN_MAX_CPU_ISA=AVX2").
bool cpu_bf16_native(std::string* why = nullptr);

}  // namespace accel::blas
