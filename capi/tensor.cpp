// The C ABI: tensors (accel.h's section "Tensors").
#include "base/text.h"
#include "capi/internal.h"
#include "runtime/models/transformer.h"

#include <sys/sysinfo.h>

#include <fstream>

using namespace accel::capi;

namespace {

// The most memory this process can fill: RAM + swap, or its cgroup's limit (v2: memory.max,
// plus memory.swap.max where that is a number, else the machine's swap) where that is lower.
// 0 when neither can be read. `what` names the limit for messages.
uint64_t host_memory_ceiling(std::string& what) {
  struct sysinfo si {};
  uint64_t limit = 0;
  uint64_t swap = 0;
  if (::sysinfo(&si) == 0) {
    swap = static_cast<uint64_t>(si.totalswap) * si.mem_unit;
    limit = static_cast<uint64_t>(si.totalram) * si.mem_unit + swap;
    what = "RAM + swap";
  }
  auto number = [](const char* path, uint64_t& v) {
    std::ifstream f(path);
    std::string s;
    if (!(f >> s) || s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
    v = std::strtoull(s.c_str(), nullptr, 10);
    return true;
  };
  uint64_t mem = 0;
  if (number("/sys/fs/cgroup/memory.max", mem)) {
    uint64_t cg_swap = swap;
    number("/sys/fs/cgroup/memory.swap.max", cg_swap);
    if (limit == 0 || mem + cg_swap < limit) {
      limit = mem + cg_swap;
      what = "this cgroup's memory.max + swap";
    }
  }
  return limit;
}

}  // namespace

extern "C" {

// ---------------------------------------------------------------------------------------
// Tensors

size_t accel_dtype_size(accel_dtype d) {
  switch (raw(d)) {
    case ACCEL_FLOAT32: case ACCEL_INT32: return 4;
    case ACCEL_FLOAT16: case ACCEL_BFLOAT16: return 2;
    case ACCEL_INT64: case ACCEL_FLOAT64: return 8;
    case ACCEL_UINT8: case ACCEL_INT8: return 1;
  }
  return 0;
}

accel_status accel_tensor_create(accel_dtype dtype, const int64_t* shape, size_t ndim, const void* data,
                                 accel_tensor** out) {
  return guard(nullptr, "accel_tensor_create", [&] {
    NEED(out);
    auto st = to_scalar(raw(dtype));
    ACCEL_CHECK(ndim <= 16, Status::InvalidArgument, "ndim must be in [0, 16], got ", ndim);
    ACCEL_CHECK(ndim == 0 || shape != nullptr, Status::InvalidArgument, "shape is NULL with ndim ", ndim);
    std::vector<int64_t> dims(shape, shape + ndim);
    int64_t numel = 1;
    for (size_t i = 0; i < ndim; ++i) {
      ACCEL_CHECK(dims[i] >= 0, Status::InvalidArgument, "shape[", i, "] must be >= 0, got ", dims[i]);
      ACCEL_CHECK(dims[i] == 0 || numel <= INT64_MAX / 16 / dims[i], Status::InvalidArgument, "shape: ",
                  "the product of the dimensions overflows (shape[", i, "] = ", dims[i], ")");
      numel *= dims[i];
    }
    ACCEL_CHECK(numel == 0 || data != nullptr, Status::InvalidArgument, "data is NULL for a tensor of ", numel, " elements");
    // The copy below writes every byte: a size past what the machine can hold would fail
    // after minutes (or meet the OOM killer where the kernel overcommits), so refuse it now.
    // (Asked only from 64 MiB on: reading the limits costs microseconds, the copy milliseconds.)
    const uint64_t bytes = static_cast<uint64_t>(numel) * c10::elementSize(st);
    if (bytes >= (uint64_t{64} << 20)) {
      std::string what;
      const uint64_t ceiling = host_memory_ceiling(what);
      ACCEL_CHECK(ceiling == 0 || bytes <= ceiling, Status::OutOfMemory, "a tensor of ",
                  accel::text::format_bytes(bytes), " is more than this machine can hold (", what, ": ",
                  accel::text::format_bytes(ceiling), ")");
    }
    auto t = torch::empty(dims, torch::TensorOptions().dtype(st));
    if (numel > 0) std::memcpy(t.data_ptr(), data, static_cast<size_t>(bytes));
    *out = wrap(std::move(t));
  });
}

void accel_tensor_destroy(accel_tensor* tensor) { delete tensor; }

accel_status accel_tensor_copy_to_host(const accel_tensor* tensor, void* dst, size_t dst_bytes) {
  return guard(nullptr, "accel_tensor_copy_to_host", [&] {
    NEED(tensor);
    copy_out(tensor->t.detach().to(torch::kCPU), dst, dst_bytes);
  });
}

accel_status accel_tensor_copy_to_host_as(const accel_tensor* tensor, accel_dtype dtype, void* dst, size_t dst_bytes) {
  return guard(nullptr, "accel_tensor_copy_to_host_as", [&] {
    NEED(tensor);
    copy_out(tensor->t.detach().to(torch::kCPU, to_scalar(raw(dtype))), dst, dst_bytes);
  });
}

accel_status accel_tensor_item(const accel_tensor* tensor, double* out) {
  return guard(nullptr, "accel_tensor_item", [&] {
    NEED(tensor);
    NEED(out);
    ACCEL_CHECK(tensor->t.numel() == 1, Status::InvalidArgument, "item of a tensor with ", tensor->t.numel(),
                " elements (needs exactly 1)");
    *out = tensor->t.detach().to(torch::kCPU, torch::kDouble).item<double>();
  });
}

accel_status accel_tensor_dtype(const accel_tensor* tensor, accel_dtype* out) {
  return guard(nullptr, "accel_tensor_dtype", [&] {
    NEED(tensor);
    NEED(out);
    *out = from_scalar(tensor->t.scalar_type());
  });
}

accel_status accel_tensor_ndim(const accel_tensor* tensor, size_t* out) {
  return guard(nullptr, "accel_tensor_ndim", [&] {
    NEED(tensor);
    NEED(out);
    *out = static_cast<size_t>(tensor->t.dim());
  });
}

accel_status accel_tensor_shape(const accel_tensor* tensor, int64_t* out, size_t capacity) {
  return guard(nullptr, "accel_tensor_shape", [&] {
    NEED(tensor);
    const size_t nd = static_cast<size_t>(tensor->t.dim());
    ACCEL_CHECK(capacity >= nd, Status::InvalidArgument, "the tensor has ", nd, " dimensions, capacity is ", capacity);
    ACCEL_CHECK(nd == 0 || out != nullptr, Status::InvalidArgument, "out is NULL");
    for (size_t i = 0; i < nd; ++i) out[i] = tensor->t.size(static_cast<int64_t>(i));
  });
}

accel_status accel_tensor_numel(const accel_tensor* tensor, int64_t* out) {
  return guard(nullptr, "accel_tensor_numel", [&] {
    NEED(tensor);
    NEED(out);
    *out = tensor->t.numel();
  });
}

accel_status accel_tensor_nbytes(const accel_tensor* tensor, size_t* out) {
  return guard(nullptr, "accel_tensor_nbytes", [&] {
    NEED(tensor);
    NEED(out);
    *out = static_cast<size_t>(tensor->t.numel()) * tensor->t.element_size();
  });
}


}  // extern "C"
