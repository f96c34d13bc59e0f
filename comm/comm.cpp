// Data types, reduction kernels and the single-rank (local) backend.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "comm/communicator.h"
#include "comm/kernels.h"

namespace accel::comm {

size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::Int8: case DataType::Uint8: return 1;
    case DataType::Float16: case DataType::BFloat16: return 2;
    case DataType::Int32: case DataType::Uint32: case DataType::Float32: return 4;
    case DataType::Int64: case DataType::Uint64: case DataType::Float64: return 8;
  }
  return 0;
}

const char* dtype_name(DataType t) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16"};
  int i = static_cast<int>(t);
  return i >= 0 && i < kNumDataTypes ? names[i] : "unknown-dtype";
}

const char* op_name(RedOp op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  int i = static_cast<int>(op);
  return i >= 0 && i < kNumRedOps ? names[i] : "unknown-op";
}

bool Work::wait_for(std::chrono::milliseconds d) {
  // polls from 10 us up to every 100 us, as the nccl backend's wait does: a finished
  // operation is seen within 10% of a millisecond-long one
  const auto deadline = std::chrono::steady_clock::now() + d;
  auto nap = std::chrono::microseconds(10);
  while (!test()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::microseconds(100));
  }
  wait();
  return true;
}

const char* collective_name(Collective c) {
  static const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "send", "recv", "barrier"};
  int i = static_cast<int>(c);
  return i >= 0 && i < kNumCollectives ? names[i] : "unknown-collective";
}

bool collective_has_op(Collective c) {
  return c == Collective::AllReduce || c == Collective::ReduceScatter || c == Collective::Reduce;
}
bool collective_has_root(Collective c) { return c == Collective::Broadcast || c == Collective::Reduce; }

std::string describe_call(Collective k, uint64_t number, uint64_t count, DataType t, RedOp op, int root, int peer) {
  std::string s = collective_name(k);
  const bool p2p = k == Collective::Send || k == Collective::Recv;
  if (!p2p) s += " #" + std::to_string(number);
  if (k == Collective::Barrier) return s;
  s += "(count=" + std::to_string(count) + ", " + dtype_name(t);
  if (collective_has_op(k)) s += std::string(", ") + op_name(op);
  if (collective_has_root(k)) s += ", root=" + std::to_string(root);
  if (k == Collective::Send) s += ", to rank " + std::to_string(peer);
  if (k == Collective::Recv) s += ", from rank " + std::to_string(peer);
  return s + ")";
}

const char* result_name(Result r) {
  switch (r) {
    case Result::Success: return "ncclSuccess";
    case Result::UnhandledCudaError: return "ncclUnhandledCudaError";
    case Result::SystemError: return "ncclSystemError";
    case Result::InternalError: return "ncclInternalError";
    case Result::InvalidArgument: return "ncclInvalidArgument";
    case Result::InvalidUsage: return "ncclInvalidUsage";
    case Result::RemoteError: return "ncclRemoteError";
    case Result::InProgress: return "ncclInProgress";
    case Result::Timeout: return "timeout";
  }
  return "unknown-result";
}

Status to_status(Result r) {
  switch (r) {
    case Result::Success: return Status::Ok;
    case Result::InvalidArgument: return Status::InvalidArgument;
    case Result::InvalidUsage: return Status::InvalidState;
    case Result::Timeout: return Status::Timeout;
    case Result::InternalError: return Status::Internal;
    default: return Status::Communication;
  }
}

void check_dtype(DataType t) {
  int i = static_cast<int>(t);
  if (i < 0 || i >= kNumDataTypes) throw CommError(Result::InvalidArgument, "invalid data type " + std::to_string(i));
}

void check_op(DataType t, RedOp op) {
  check_dtype(t);
  int i = static_cast<int>(op);
  if (i < 0 || i >= kNumRedOps) throw CommError(Result::InvalidArgument, "invalid reduction op " + std::to_string(i));
}

// ---------------------------------------------------------------------------------------
// fp16 / bf16

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = man;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (m & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);  // inf / NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00u;                                       // rounds to inf
  if (ax < 0x38800000u) {  // subnormal or zero in half
    if (ax < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 + (113 - e) - 1
    uint32_t h = m >> (shift);
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return sign | static_cast<uint16_t>(h);
  }
  uint32_t h = ((ax >> 13) - (112u << 10));
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// ---------------------------------------------------------------------------------------
// Reduction kernels

namespace {

// Integers accumulate in their unsigned twin (wrapping, no signed overflow); floats in themselves.
template <class T, bool = std::is_floating_point_v<T>>
struct AccOf {
  using type = T;
};
template <class T>
struct AccOf<T, false> {
  using type = std::make_unsigned_t<T>;
};

template <class T>
struct Native {
  using Acc = typename AccOf<T>::type;
  static Acc load(const void* p, size_t i) { return static_cast<Acc>(static_cast<const T*>(p)[i]); }
  static void store(void* p, size_t i, Acc v) { static_cast<T*>(p)[i] = static_cast<T>(v); }
  static constexpr bool is_float = std::is_floating_point_v<T>;
  static constexpr bool is_signed = std::is_signed_v<T>;
};

struct Half {
  using Acc = float;
  static Acc load(const void* p, size_t i) { return half_to_float(static_cast<const uint16_t*>(p)[i]); }
  static void store(void* p, size_t i, Acc v) { static_cast<uint16_t*>(p)[i] = float_to_half(v); }
  static constexpr bool is_float = true;
  static constexpr bool is_signed = true;
};

struct BF16 {
  using Acc = float;
  static Acc load(const void* p, size_t i) { return bf16_to_float(static_cast<const uint16_t*>(p)[i]); }
  static void store(void* p, size_t i, Acc v) { static_cast<uint16_t*>(p)[i] = float_to_bf16(v); }
  static constexpr bool is_float = true;
  static constexpr bool is_signed = true;
};

// The kernel works through [begin, end) in blocks that stay in L1: each block's
// accumulator is loaded from the first source, then the other sources are folded in, in
// order. Sum, Avg and Prod fold four sources per pass over the block: the same operations
// in the same order for every element, so the same values as one source per pass, with a
// quarter of the accumulator's loads and stores. With 512 elements per block the four
// sources' slices and the accumulator fit in L1 together. (Together: a 64 MiB x 8-rank
// float32 sum 1.5x faster than one source per pass over 2048-element blocks.)
// One thing the grouping may change is which payload a NaN result carries when several
// inputs are NaN (the compiler picks the operand order of each add, and x86 returns the
// first operand's NaN): a floating block whose result holds a NaN is therefore computed
// again one source per pass, exactly as before, so the bits never depend on the grouping.
template <class Ty>
void reduce_typed(void* dst, const void* const* srcs, int n, size_t begin, size_t end, RedOp op, double premul) {
  using Acc = typename Ty::Acc;
  constexpr size_t kBlock = 512;
  Acc acc[kBlock];
  Acc scale{};
  if constexpr (Ty::is_float) {
    scale = static_cast<Acc>(premul);
  } else {
    scale = static_cast<Acc>(static_cast<int64_t>(premul));
  }
  for (size_t b = begin; b < end; b += kBlock) {
    const size_t len = std::min(kBlock, end - b);
    for (size_t i = 0; i < len; ++i) acc[i] = Ty::load(srcs[0], b + i);
    if (op == RedOp::PreMulSum)
      for (size_t i = 0; i < len; ++i) acc[i] = static_cast<Acc>(acc[i] * scale);
    int s = 1;
    [[maybe_unused]] int nan = 0;  // floating types: a NaN came out of a grouped pass
    if (op == RedOp::Sum || op == RedOp::Avg) {
      for (; s + 4 <= n; s += 4) {
        const void *s0 = srcs[s], *s1 = srcs[s + 1], *s2 = srcs[s + 2], *s3 = srcs[s + 3];
        for (size_t i = 0; i < len; ++i) {
          Acc a = static_cast<Acc>(acc[i] + Ty::load(s0, b + i));
          a = static_cast<Acc>(a + Ty::load(s1, b + i));
          a = static_cast<Acc>(a + Ty::load(s2, b + i));
          acc[i] = a = static_cast<Acc>(a + Ty::load(s3, b + i));
          if constexpr (Ty::is_float) nan |= std::isunordered(a, a);
        }
      }
    } else if (op == RedOp::Prod) {
      for (; s + 4 <= n; s += 4) {
        const void *s0 = srcs[s], *s1 = srcs[s + 1], *s2 = srcs[s + 2], *s3 = srcs[s + 3];
        for (size_t i = 0; i < len; ++i) {
          Acc a = static_cast<Acc>(acc[i] * Ty::load(s0, b + i));
          a = static_cast<Acc>(a * Ty::load(s1, b + i));
          a = static_cast<Acc>(a * Ty::load(s2, b + i));
          acc[i] = a = static_cast<Acc>(a * Ty::load(s3, b + i));
          if constexpr (Ty::is_float) nan |= std::isunordered(a, a);
        }
      }
    }
    if constexpr (Ty::is_float) {
      if (nan) {  // redo the block one source per pass (a NaN stays a NaN through + and *)
        for (size_t i = 0; i < len; ++i) acc[i] = Ty::load(srcs[0], b + i);
        s = 1;
      }
    }
    for (; s < n; ++s) {
      const void* src = srcs[s];
      switch (op) {
        case RedOp::Sum:
        case RedOp::Avg:
          for (size_t i = 0; i < len; ++i) acc[i] = static_cast<Acc>(acc[i] + Ty::load(src, b + i));
          break;
        case RedOp::PreMulSum:
          for (size_t i = 0; i < len; ++i) acc[i] = static_cast<Acc>(acc[i] + static_cast<Acc>(Ty::load(src, b + i) * scale));
          break;
        case RedOp::Prod:
          for (size_t i = 0; i < len; ++i) acc[i] = static_cast<Acc>(acc[i] * Ty::load(src, b + i));
          break;
        case RedOp::Max:
          for (size_t i = 0; i < len; ++i) {
            Acc v = Ty::load(src, b + i);
            if constexpr (Ty::is_float) {
              acc[i] = (std::isnan(v) || v > acc[i]) ? v : acc[i];
            } else if constexpr (Ty::is_signed) {
              using S = std::make_signed_t<Acc>;
              acc[i] = static_cast<S>(v) > static_cast<S>(acc[i]) ? v : acc[i];
            } else {
              acc[i] = v > acc[i] ? v : acc[i];
            }
          }
          break;
        case RedOp::Min:
          for (size_t i = 0; i < len; ++i) {
            Acc v = Ty::load(src, b + i);
            if constexpr (Ty::is_float) {
              acc[i] = (std::isnan(v) || v < acc[i]) ? v : acc[i];
            } else if constexpr (Ty::is_signed) {
              using S = std::make_signed_t<Acc>;
              acc[i] = static_cast<S>(v) < static_cast<S>(acc[i]) ? v : acc[i];
            } else {
              acc[i] = v < acc[i] ? v : acc[i];
            }
          }
          break;
      }
    }
    if (op == RedOp::Avg) {
      if constexpr (Ty::is_float) {
        for (size_t i = 0; i < len; ++i) acc[i] = acc[i] / static_cast<Acc>(n);
      } else if constexpr (Ty::is_signed) {
        using S = std::make_signed_t<Acc>;
        for (size_t i = 0; i < len; ++i) acc[i] = static_cast<Acc>(static_cast<S>(acc[i]) / static_cast<S>(n));
      } else {
        for (size_t i = 0; i < len; ++i) acc[i] = acc[i] / static_cast<Acc>(n);
      }
    }
    for (size_t i = 0; i < len; ++i) Ty::store(dst, b + i, acc[i]);
  }
}

}  // namespace

void reduce(void* dst, const void* const* srcs, int n, size_t begin, size_t end, DataType t, RedOp op, double premul) {
  switch (t) {
    case DataType::Int8: return reduce_typed<Native<int8_t>>(dst, srcs, n, begin, end, op, premul);
    case DataType::Uint8: return reduce_typed<Native<uint8_t>>(dst, srcs, n, begin, end, op, premul);
    case DataType::Int32: return reduce_typed<Native<int32_t>>(dst, srcs, n, begin, end, op, premul);
    case DataType::Uint32: return reduce_typed<Native<uint32_t>>(dst, srcs, n, begin, end, op, premul);
    case DataType::Int64: return reduce_typed<Native<int64_t>>(dst, srcs, n, begin, end, op, premul);
    case DataType::Uint64: return reduce_typed<Native<uint64_t>>(dst, srcs, n, begin, end, op, premul);
    case DataType::Float16: return reduce_typed<Half>(dst, srcs, n, begin, end, op, premul);
    case DataType::BFloat16: return reduce_typed<BF16>(dst, srcs, n, begin, end, op, premul);
    case DataType::Float32: return reduce_typed<Native<float>>(dst, srcs, n, begin, end, op, premul);
    case DataType::Float64: return reduce_typed<Native<double>>(dst, srcs, n, begin, end, op, premul);
  }
  throw CommError(Result::InvalidArgument, "invalid data type");
}

// ---------------------------------------------------------------------------------------
// NCCL's arithmetic (reduce_nccl). References, NVIDIA/nccl: src/device/reduce_kernel.h
// (Apply_Reduce: FuncSum<half> is __hadd, FuncProd<half> __hmul, FuncMinMax<float> fminf /
// fmaxf, FuncMinMax<half> and <bf16> __hmin / __hmax on sm_80+; Apply_PreOp of FuncPreMulSum
// multiplies in the element type; Apply_LoadMultimem: NVLS adds fp16 and bf16 with
// .acc::f32), src/enqueue.cc (hostToDevRedOp: avg is FuncPreMulSum by float(1.0/nRanks) in
// the type for floats, FuncSumPostDiv for integers) and src/device/all_reduce.h,
// reduce_scatter.h, reduce.h (runRing: chunk c starts at ring position c+1 and is reduced
// one rank at a time, ending at position c; the root's successor starts a reduce).

namespace {

inline uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// x rounded to the nearest value of the 16-bit type, kept as a float: the same value as
// half_to_float(float_to_half(x)) / bf16_to_float(float_to_bf16(x)) for every non-NaN x
// (test: Kernels.NcclRoundingInTheTypeMatchesTheConverters), without branches, so that the
// compiler vectorizes the loops that call it.
inline float round_half(float x) {
  // Adding c = 2^(e + 13), e the exponent of |x| (at least -14, the smallest normal half's),
  // rounds |x| to a multiple of 2^(e - 10), the half's spacing there, to nearest even (c's
  // last bit is 0); subtracting c is exact. From 65520 on, a half is inf; NaN stays NaN.
  const float ax = std::fabs(x);
  const float c = std::max(float_of(bits_of(ax) & 0x7f800000u), 0x1.0p-14f) * 0x1.0p13f;
  float r = (ax + c) - c;
  r = ax >= 65520.f ? std::numeric_limits<float>::infinity() : r;
  return std::copysign(r, x);
}

// (No NaN case: a NaN here came from bf16 values, whose low 16 bits are 0 and stay 0, so the
// rounding carries nothing into it.)
inline float round_bf16(float x) {
  const uint32_t u = bits_of(x);
  return float_of((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

// fp16 <-> float without branches (the method of c10's fp16_ieee_to_fp32_value and
// fp16_ieee_from_fp32_value): the same values as half_to_float / float_to_half.
inline float fast_half_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16, sign = w & 0x80000000u, two_w = w + w;
  const float normalized = float_of((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = float_of((two_w >> 17) | (126u << 23)) - 0.5f;
  return float_of(sign | (two_w < (1u << 27) ? bits_of(denormalized) : bits_of(normalized)));
}
inline uint16_t fast_float_to_half(float f) {
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = bits_of(f), shl1_w = w + w, sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = float_of((bias >> 1) + 0x07800000u) + base;
  const uint32_t b = bits_of(base);
  const uint32_t nonsign = ((b >> 13) & 0x7c00u) + (b & 0x0fffu);
  return static_cast<uint16_t>(shl1_w > 0xff000000u ? 0x7fffu : (sign >> 16) | nonsign);  // NaN: canonical
}

// The floating types as NCCL computes with them: Acc holds a value of the type exactly
// (fp16 and bf16 in a float), round() brings a float result back to the type, the way the
// device functions round each operation; NaN is one canonical quiet NaN per type.
struct NHalf {
  using Acc = float;
  static float load(const void* p, size_t i) { return fast_half_to_float(static_cast<const uint16_t*>(p)[i]); }
  static void store(void* p, size_t i, float v) { static_cast<uint16_t*>(p)[i] = fast_float_to_half(v); }
  static float round(float v) { return round_half(v); }
  static float scalar(double s) { return round_half(static_cast<float>(s)); }  // __float2half(float(s))
};
struct NBF16 {
  using Acc = float;
  static float load(const void* p, size_t i) { return bf16_to_float(static_cast<const uint16_t*>(p)[i]); }
  static void store(void* p, size_t i, float v) {  // v is a bf16 value: its high half, NaN canonical
    const uint32_t u = bits_of(v);
    static_cast<uint16_t*>(p)[i] = (u & 0x7fffffffu) > 0x7f800000u ? uint16_t{0x7fff} : static_cast<uint16_t>(u >> 16);
  }
  static float round(float v) { return round_bf16(v); }
  static float scalar(double s) { return round_bf16(static_cast<float>(s)); }
};
template <class T>
struct NFloat {
  using Acc = T;
  static T load(const void* p, size_t i) { return static_cast<const T*>(p)[i]; }
  static void store(void* p, size_t i, T v) {
    static_cast<T*>(p)[i] = std::isnan(v) ? std::numeric_limits<T>::quiet_NaN() : v;
  }
  static T round(T v) { return v; }
  static T scalar(double s) { return static_cast<T>(s); }
};

// fmaxf / fminf, __hmax / __hmin: a NaN operand is dropped (NaN only when both are);
// -0 orders below +0.
template <class A>
inline A nccl_max(A a, A b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
template <class A>
inline A nccl_min(A a, A b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

constexpr size_t kNcclBlock = 512;

// acc[0, len) = the sources src(0), src(1), ..., src(n - 1) combined one at a time in that
// order, each operation rounded to the type (a ring's or a chain's reduction). Avg and
// premulsum pre-multiply every input in the type first (pre).
template <class Ty, bool pre, class Src>
[[gnu::always_inline]] inline void chain_block(typename Ty::Acc* acc, const Src& src, int n, size_t b, size_t len, RedOp op,
                 typename Ty::Acc scale) {
  using Acc = typename Ty::Acc;
  auto in = [&](const void* s, size_t i) {
    const Acc v = Ty::load(s, b + i);
    if constexpr (pre) {
      return Ty::round(static_cast<Acc>(v * scale));
    } else {
      return v;
    }
  };
  {
    const void* s0 = src(0);
    for (size_t i = 0; i < len; ++i) acc[i] = in(s0, i);
  }
  int s = 1;
  if (op == RedOp::Sum || op == RedOp::Avg || op == RedOp::PreMulSum) {
    // four sources per pass over the block: the same operations in the same order
    if constexpr (!pre)
      for (; s + 4 <= n; s += 4) {
        const void *s0 = src(s), *s1 = src(s + 1), *s2 = src(s + 2), *s3 = src(s + 3);
        for (size_t i = 0; i < len; ++i) {
          Acc a = Ty::round(static_cast<Acc>(acc[i] + Ty::load(s0, b + i)));
          a = Ty::round(static_cast<Acc>(a + Ty::load(s1, b + i)));
          a = Ty::round(static_cast<Acc>(a + Ty::load(s2, b + i)));
          acc[i] = Ty::round(static_cast<Acc>(a + Ty::load(s3, b + i)));
        }
      }
    for (; s < n; ++s) {
      const void* sk = src(s);
      for (size_t i = 0; i < len; ++i) acc[i] = Ty::round(static_cast<Acc>(acc[i] + in(sk, i)));
    }
  } else {
    for (; s < n; ++s) {
      const void* sk = src(s);
      if (op == RedOp::Prod)
        for (size_t i = 0; i < len; ++i) acc[i] = Ty::round(static_cast<Acc>(acc[i] * Ty::load(sk, b + i)));
      else if (op == RedOp::Max)
        for (size_t i = 0; i < len; ++i) acc[i] = nccl_max(acc[i], Ty::load(sk, b + i));
      else
        for (size_t i = 0; i < len; ++i) acc[i] = nccl_min(acc[i], Ty::load(sk, b + i));
    }
  }
}

// NVLink SHARP's multimem.ld_reduce: the switch adds every rank's value with an fp32
// accumulator for fp16 and bf16 (in the type for float and double) and rounds once; min and
// max as __hmin / __hmax. Rank order (the switch's own order is not published).
template <class Ty>
[[gnu::always_inline]] inline void switch_block(typename Ty::Acc* acc, const void* const* srcs, int n, size_t b, size_t len, RedOp op) {
  for (size_t i = 0; i < len; ++i) acc[i] = Ty::load(srcs[0], b + i);
  for (int s = 1; s < n; ++s) {
    const void* src = srcs[s];
    if (op == RedOp::Max)
      for (size_t i = 0; i < len; ++i) acc[i] = nccl_max(acc[i], Ty::load(src, b + i));
    else if (op == RedOp::Min)
      for (size_t i = 0; i < len; ++i) acc[i] = nccl_min(acc[i], Ty::load(src, b + i));
    else
      for (size_t i = 0; i < len; ++i) acc[i] += Ty::load(src, b + i);
  }
  for (size_t i = 0; i < len; ++i) acc[i] = Ty::round(acc[i]);
}

template <class Ty>
[[gnu::always_inline]] inline void reduce_nccl_typed(void* dst, const void* const* srcs, int n, size_t begin, size_t end, RedOp op, double premul,
                       const NcclOrder& order, size_t index0) {
  using Acc = typename Ty::Acc;
  const bool pre = op == RedOp::Avg || op == RedOp::PreMulSum;
  const Acc scale = Ty::scalar(op == RedOp::Avg ? 1.0 / n : premul);
  Acc acc[kNcclBlock], part[kNcclBlock];
  const int per_node = std::max(1, std::min(order.ranks_per_node, n));
  const int nodes = (n + per_node - 1) / per_node;
  // which algorithm combines this op (NVLS only does sum, min and max; the cost model never
  // picks it for the others, see nvls_supported)
  NcclAlgo algo = order.algo;
  if ((algo == NcclAlgo::Nvls || algo == NcclAlgo::NvlsTree) && pre) algo = NcclAlgo::Ring;
  if (algo == NcclAlgo::NvlsTree && nodes == 1) algo = NcclAlgo::Nvls;
  if (algo == NcclAlgo::Tree && nodes == 1) algo = NcclAlgo::Ring;
  // the ring: one chunk of ceil(count / n) elements per rank; chunk c's chain starts at c + 1
  const size_t chunk = order.owner >= 0 ? SIZE_MAX : std::max<size_t>(1, (order.count + n - 1) / n);
  for (size_t b = begin; b < end;) {
    size_t len = std::min(kNcclBlock, end - b);
    if (algo == NcclAlgo::Ring) {
      int first;
      if (order.owner >= 0) {
        first = (order.owner + 1) % n;
      } else {
        const size_t c = (index0 + b) / chunk;
        len = std::min(len, (c + 1) * chunk - (index0 + b));
        first = static_cast<int>((c + 1) % static_cast<size_t>(n));
      }
      auto ring = [&](int k) { return srcs[(first + k) % n]; };
      if (pre)
        chain_block<Ty, true>(acc, ring, n, b, len, op, scale);
      else
        chain_block<Ty, false>(acc, ring, n, b, len, op, scale);
    } else if (algo == NcclAlgo::Nvls) {
      switch_block<Ty>(acc, srcs, n, b, len, op);
    } else {
      // across nodes: each node's partial (NVLS: the switch's sum; Tree: a chain from the
      // node's last GPU up to its first), then the nodes' partials added in node order
      for (int g = 0; g < nodes; ++g) {
        const int lo = g * per_node, m = std::min(n, lo + per_node) - lo;
        Acc* out = g == 0 ? acc : part;
        if (algo == NcclAlgo::NvlsTree) {
          switch_block<Ty>(out, srcs + lo, m, b, len, op);
        } else {
          auto up = [&](int k) { return srcs[lo + m - 1 - k]; };  // the node's last GPU first
          if (pre)
            chain_block<Ty, true>(out, up, m, b, len, op, scale);
          else
            chain_block<Ty, false>(out, up, m, b, len, op, scale);
        }
        if (g == 0) continue;
        for (size_t i = 0; i < len; ++i) {
          switch (op) {
            case RedOp::Max: acc[i] = nccl_max(acc[i], part[i]); break;
            case RedOp::Min: acc[i] = nccl_min(acc[i], part[i]); break;
            case RedOp::Prod: acc[i] = Ty::round(static_cast<Acc>(acc[i] * part[i])); break;
            default: acc[i] = Ty::round(static_cast<Acc>(acc[i] + part[i])); break;
          }
        }
      }
    }
    for (size_t i = 0; i < len; ++i) Ty::store(dst, b + i, acc[i]);
    b += len;
  }
}

// The 16-bit types round every addition: a few vector operations each, which AVX2 and
// AVX-512 do 8 and 16 at a time (the baseline build does 4): one clone per instruction set,
// picked when the library loads (the same operations, the same bits). Not under AddressSanitizer
// or ThreadSanitizer: the clones' resolver (an IFUNC) runs while the dynamic loader relocates,
// before the sanitizer's runtime is up, and an instrumented resolver crashes there.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define ACCEL_NCCL_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ACCEL_NCCL_CLONES
#endif
ACCEL_NCCL_CLONES void reduce_nccl_half(void* dst, const void* const* srcs, int n, size_t begin, size_t end, RedOp op,
                                        double premul, const NcclOrder& order, size_t index0) {
  reduce_nccl_typed<NHalf>(dst, srcs, n, begin, end, op, premul, order, index0);
}
ACCEL_NCCL_CLONES void reduce_nccl_bf16(void* dst, const void* const* srcs, int n, size_t begin, size_t end, RedOp op,
                                        double premul, const NcclOrder& order, size_t index0) {
  reduce_nccl_typed<NBF16>(dst, srcs, n, begin, end, op, premul, order, index0);
}

// float and double: memory speed in the cache needs the wider vectors too (a ring's
// additions one source at a time, the same in every clone: every target compiling this file
// has -ffp-contract=off, meson.build, so that avg's and premulsum's multiply and add stay two
// roundings where AVX-512F could fuse them)
ACCEL_NCCL_CLONES void reduce_nccl_float(void* dst, const void* const* srcs, int n, size_t begin, size_t end, RedOp op,
                                         double premul, const NcclOrder& order, size_t index0) {
  reduce_nccl_typed<NFloat<float>>(dst, srcs, n, begin, end, op, premul, order, index0);
}
ACCEL_NCCL_CLONES void reduce_nccl_double(void* dst, const void* const* srcs, int n, size_t begin, size_t end, RedOp op,
                                          double premul, const NcclOrder& order, size_t index0) {
  reduce_nccl_typed<NFloat<double>>(dst, srcs, n, begin, end, op, premul, order, index0);
}

}  // namespace

double avg_factor(DataType t, int n) {
  const double inv = 1.0 / std::max(1, n);
  switch (t) {
    case DataType::Float16: return NHalf::scalar(inv);
    case DataType::BFloat16: return NBF16::scalar(inv);
    case DataType::Float32: return NFloat<float>::scalar(inv);
    case DataType::Float64: return inv;
    default: return 1.0;
  }
}

bool nvls_supported(DataType t, RedOp op) {
  switch (t) {
    case DataType::Int32: case DataType::Uint32: case DataType::Int64: case DataType::Uint64:
    case DataType::Float16: case DataType::BFloat16:
      return op == RedOp::Sum || op == RedOp::Max || op == RedOp::Min;
    case DataType::Float32: case DataType::Float64:
      return op == RedOp::Sum;
    default:
      return false;
  }
}

NcclAlgo nccl_algo(const std::string& algorithm) {
  if (algorithm == "nvls") return NcclAlgo::Nvls;
  if (algorithm == "nvls_tree") return NcclAlgo::NvlsTree;
  if (algorithm == "tree") return NcclAlgo::Tree;
  return NcclAlgo::Ring;
}

void reduce_nccl(void* dst, const void* const* srcs, int n, size_t begin, size_t end, DataType t, RedOp op,
                 double premul, const NcclOrder& order, size_t index0) {
  switch (t) {
    case DataType::Float16: return reduce_nccl_half(dst, srcs, n, begin, end, op, premul, order, index0);
    case DataType::BFloat16: return reduce_nccl_bf16(dst, srcs, n, begin, end, op, premul, order, index0);
    case DataType::Float32: return reduce_nccl_float(dst, srcs, n, begin, end, op, premul, order, index0);
    case DataType::Float64: return reduce_nccl_double(dst, srcs, n, begin, end, op, premul, order, index0);
    default:
      // integers: wrapping sums and products, min and max and avg's truncating division do
      // not depend on the order, and match FuncSumPostDiv
      return reduce(dst, srcs, n, begin, end, t, op, premul);
  }
}

// ---------------------------------------------------------------------------------------
// The local backend: one rank.

namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }

  std::shared_ptr<Work> all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                   PreMul premul) override {
    check_op(t, op);
    need(send, recv, count);
    ::accel::comm::reduce(recv, &send, 1, 0, count, t, op, premul.value);
    return done();
  }
  std::shared_ptr<Work> reduce_scatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                       PreMul premul) override {
    return all_reduce(send, recv, recvcount, t, op, premul);
  }
  std::shared_ptr<Work> all_gather(const void* send, void* recv, size_t sendcount, DataType t) override {
    check_dtype(t);
    need(send, recv, sendcount);
    if (send != recv) std::memmove(recv, send, sendcount * dtype_size(t));
    return done();
  }
  std::shared_ptr<Work> broadcast(const void* send, void* recv, size_t count, DataType t, int root) override {
    check_root(root);
    return all_gather(send, recv, count, t);
  }
  std::shared_ptr<Work> reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
                               PreMul premul) override {
    check_root(root);
    return all_reduce(send, recv, count, t, op, premul);
  }
  std::shared_ptr<Work> send(const void* buf, size_t count, DataType t, int peer) override {
    check_dtype(t);
    check_peer(peer);
    pending_sends_.push_back({buf, count, t});
    if (group_depth_ == 0) unmatched("send");
    return done();
  }
  std::shared_ptr<Work> recv(void* buf, size_t count, DataType t, int peer) override {
    check_dtype(t);
    check_peer(peer);
    pending_recvs_.push_back({buf, count, t});
    if (group_depth_ == 0) unmatched("recv");
    return done();
  }
  void barrier() override {}
  void group_start() override { ++group_depth_; }
  void group_end() override {
    if (group_depth_ == 0) throw CommError(Result::InvalidUsage, "group_end without group_start");
    if (--group_depth_ > 0) return;
    if (pending_sends_.size() != pending_recvs_.size()) unmatched(pending_sends_.size() > pending_recvs_.size() ? "send" : "recv");
    for (size_t i = 0; i < pending_sends_.size(); ++i) {
      const auto& s = pending_sends_[i];
      const auto& r = pending_recvs_[i];
      if (s.count != r.count || s.t != r.t)
        throw CommError(Result::InvalidUsage, "send/recv to self differ: send " + std::to_string(s.count) + " " +
                                                  dtype_name(s.t) + ", recv " + std::to_string(r.count) + " " + dtype_name(r.t));
      std::memmove(const_cast<void*>(r.buf), s.buf, s.count * dtype_size(s.t));
    }
    pending_sends_.clear();
    pending_recvs_.clear();
  }

 private:
  struct P2P {
    const void* buf;
    size_t count;
    DataType t;
  };
  static std::shared_ptr<Work> done() { return std::make_shared<DoneWork>(); }
  static void need(const void* send, const void* recv, size_t count) {
    if (count > 0 && (send == nullptr || recv == nullptr)) throw CommError(Result::InvalidArgument, "NULL buffer");
  }
  static void check_root(int root) {
    if (root != 0) throw CommError(Result::InvalidArgument, "root " + std::to_string(root) + " is not a rank of a 1-rank world");
  }
  static void check_peer(int peer) {
    if (peer != 0) throw CommError(Result::InvalidArgument, "peer " + std::to_string(peer) + " is not a rank of a 1-rank world");
  }
  void unmatched(const char* what) {
    pending_sends_.clear();
    pending_recvs_.clear();
    throw CommError(Result::InvalidUsage, std::string("a ") + what +
                                              " to oneself outside a group (or without its matching half) can never complete");
  }

  int group_depth_ = 0;
  std::vector<P2P> pending_sends_, pending_recvs_;
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator() { return std::make_unique<LocalCommunicator>(); }

}  // namespace accel::comm
