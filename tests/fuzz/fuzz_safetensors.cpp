// libFuzzer harness for the safetensors reader (runtime/safetensors.cpp): any input either
// parses into tensors that lie inside the data area, or is refused with a Format error.
// Never a crash, a sanitizer report, or another exception. Built with clang by
// tests/fuzz/run_fuzzer.sh (the test suite's "fuzz_safetensors").
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "runtime/safetensors.h"
#include "base/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace accel;
  try {
    const safetensors::Header h = safetensors::parse(data, size, "input");
    uint64_t at = 0;
    for (const auto& t : h.tensors) {
      // tiled in order, inside the file, sized by shape x dtype
      if (t.begin != at || t.end < t.begin || h.data_start + t.end > size) std::abort();
      uint64_t numel = 1;
      for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
      if (numel * safetensors::dtype_size(t.dtype) != t.end - t.begin) std::abort();
      at = t.end;
    }
    if (h.data_start + at != size) std::abort();
  } catch (const Error& e) {
    if (e.status() != Status::Format) std::abort();
  }
  return 0;
}
