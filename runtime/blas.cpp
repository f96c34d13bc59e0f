// The BLAS loaded in this process (see blas.h).
#include "runtime/blas.h"

#include <cpuid.h>
#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace accel::blas {

namespace {

// The library mapped at `path` (already loaded: RTLD_NOLOAD), for symbols that a BLAS
// exports only from its own object (BLIS's libblas.so.3 is not in the global scope).
void* loaded(const std::string& path) {
  return path.empty() ? nullptr : ::dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
}

std::string& mapped_path() {
  static std::string p;
  return p;
}

template <class F>
F symbol(const char* name) {
  if (void* f = ::dlsym(RTLD_DEFAULT, name)) return reinterpret_cast<F>(f);
  if (void* h = loaded(mapped_path())) {
    void* f = ::dlsym(h, name);
    ::dlclose(h);  // a reference dropped, the library stays (libtorch holds it)
    return reinterpret_cast<F>(f);
  }
  return nullptr;
}

// The first mapped library whose file name contains one of the needles.
std::string mapped(std::initializer_list<const char*> needles) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string file = path.substr(path.rfind('/') + 1);
    for (const char* n : needles)
      if (file.find(n) != std::string::npos) {
        char* real = ::realpath(path.c_str(), nullptr);
        std::string out = real ? real : path;
        std::free(real);
        return out;
      }
  }
  return {};
}

}  // namespace

Info info() {
  Info i;
  i.path = mapped({"libopenblas", "libblis", "libmkl_rt", "libmkl_core", "libblas.so"});
  mapped_path() = i.path;
  if (auto cfg = symbol<char* (*)()>("openblas_get_config")) {
    i.name = "OpenBLAS";
    i.details = cfg();
    if (auto n = symbol<int (*)()>("openblas_get_num_threads")) i.threads = n();
    if (auto p = symbol<int (*)()>("openblas_get_parallel")) {
      const int kind = p();  // 0 sequential, 1 pthreads, 2 OpenMP
      i.details += kind == 2 ? " (OpenMP threads)" : kind == 1 ? " (pthreads)" : " (sequential)";
    }
  } else if (auto ver = symbol<const char* (*)()>("bli_info_get_version_str")) {
    i.name = "BLIS";
    i.details = std::string("version ") + ver();
    if (auto n = symbol<long (*)()>("bli_thread_get_num_threads")) i.threads = static_cast<int>(n());
  } else if (i.path.find("blis") != std::string::npos) {
    i.name = "BLIS";
    i.details = "its libblas.so.3 exports the BLAS only: threads from BLIS_NUM_THREADS";
  } else if (auto mkl = symbol<void (*)(char*, int)>("MKL_Get_Version_String")) {
    i.name = "MKL";  // a PyTorch wheel's libtorch_cpu links it in (x86-64)
    char buf[256] = {0};
    mkl(buf, static_cast<int>(sizeof buf - 1));
    i.details = buf;
    if (auto n = symbol<int (*)()>("MKL_Get_Max_Threads")) i.threads = n();
    Dl_info where{};
    if (::dladdr(reinterpret_cast<void*>(mkl), &where) && where.dli_fname) {
      char* real = ::realpath(where.dli_fname, nullptr);
      i.path = real ? real : where.dli_fname;
      std::free(real);
    }
  } else if (i.path.find("mkl") != std::string::npos) {
    i.name = "MKL";
  } else if (i.path.find("/blas/libblas.so") != std::string::npos) {
    i.name = "netlib (reference BLAS: slow; install libopenblas0-pthread, see README)";
  } else {
    i.name = i.path.empty() ? "none loaded (or linked statically into libtorch)" : "unknown";
  }
  return i;
}

bool set_threads(int n) {
  if (mapped_path().empty()) mapped_path() = mapped({"libopenblas", "libblis", "libmkl_rt", "libmkl_core", "libblas.so"});
  if (auto f = symbol<void (*)(int)>("openblas_set_num_threads")) {
    f(n);
    return true;
  }
  if (auto f = symbol<void (*)(long)>("bli_thread_set_num_threads")) {
    f(n);
    return true;
  }
  return false;
}

bool set_calling_thread_threads(int n, const void* anchor) {
  using SetFn = void (*)(int);
  static const SetFn omp = [anchor]() -> SetFn {
    Dl_info where{};
    if (anchor && ::dladdr(anchor, &where) && where.dli_fname)
      if (void* h = ::dlopen(where.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) {  // searched with its dependencies
        void* f = ::dlsym(h, "omp_set_num_threads");
        ::dlclose(h);
        if (f) return reinterpret_cast<SetFn>(f);
      }
    return reinterpret_cast<SetFn>(::dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  }();
  using MklLocal = int (*)(int);
  static const MklLocal mkl = reinterpret_cast<MklLocal>(::dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local"));
  if (mkl) mkl(n);
  if (!omp) return false;
  omp(n);
  return true;
}

namespace {

Cpu probe_cpu() {
  Cpu c;
  {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("model name", 0) == 0) {
        const size_t colon = line.find(':');
        const size_t from = colon == std::string::npos ? std::string::npos : line.find_first_not_of(' ', colon + 1);
        if (from != std::string::npos) c.model = line.substr(from);
        break;
      }
  }
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return c;
  __cpuid_count(1, 0, a, b, cx, d);
  const bool fma = (cx >> 12) & 1, osxsave = (cx >> 27) & 1;
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  const bool os_avx = (xcr0 & 0x6) == 0x6, os_avx512 = (xcr0 & 0xe6) == 0xe6, os_amx = (xcr0 & 0x60000) == 0x60000;
  __cpuid_count(7, 0, a, b, cx, d);
  const unsigned max_sub = a;
  c.avx2 = os_avx && fma && ((b >> 5) & 1);
  // F (16), DQ (17), BW (30), VL (31): what libtorch's AVX-512 kernels and oneDNN's avx512_core ask for
  c.avx512 = os_avx512 && ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1);
  c.amx_bf16 = os_amx && ((d >> 22) & 1);
  if (max_sub >= 1) {
    __cpuid_count(7, 1, a, b, cx, d);
    c.avx512_bf16 = c.avx512 && ((a >> 5) & 1);
  }
#endif
  return c;
}

}  // namespace

const Cpu& cpu() {
  static const Cpu c = probe_cpu();
  return c;
}

bool cpu_bf16_native(std::string* why) {
  const Cpu& c = cpu();
  const char* v = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!v || !*v) v = std::getenv("DNNL_MAX_CPU_ISA");
  std::string isa = v ? v : "";
  for (char& ch : isa) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  // oneDNN's ceilings below its first bf16 ISA (avx512_core_bf16); unset or others leave it free
  static const char* const below[] = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"};
  bool held = false;
  for (const char* b : below) held |= isa == b;
  const bool has = c.avx512_bf16 || c.amx_bf16;
  if (why) {
    *why = c.amx_bf16 && c.avx512_bf16 ? "AMX-BF16 and AVX-512 BF16"
           : c.amx_bf16                ? "AMX-BF16"
           : c.avx512_bf16             ? "AVX-512 BF16"
                                       : "no AVX-512 BF16 or AMX-BF16";
    if (has && held) *why += ", held below it by ONEDNN_MAX_CPU_ISA=" + isa;
  }
  return has && !held;
}

}  // namespace accel::blas
