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

}  // namespace accel::blas
