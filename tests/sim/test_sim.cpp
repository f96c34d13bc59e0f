// Tests of the simulator: every collective x dtype x op against a naive reference (NCCL's
// rounding for floating types), in and out of place, over several world sizes; NCCL's
// rounding on random values with NaNs; send/recv and groups; every error case; mismatch
// and missing-rank diagnosis; determinism under scheduling noise (with libtorch's global
// generator in play); memory budgets to the byte and out-of-memory; faults; the trace.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <type_traits>

#include "comm/kernels.h"
#include "sim/replay.h"
#include "sim/settings.h"
#include "runtime/runtime.h"
#include "common.h"

namespace accel::sim {
namespace {

using comm::CommError;
using comm::DataType;
using comm::RedOp;
using comm::Result;

// ---------------------------------------------------------------------------------------
// A naive reference: element by element, integers in rank order, floating types as NCCL's
// device code computes them (below), with independent conversions (c10::Half / c10::BFloat16).

template <class T>
struct Ref {
  static double get(const void* p, size_t i) { return static_cast<double>(static_cast<const T*>(p)[i]); }
};

// Writes value v (small integer) of type t at index i.
void put(DataType t, void* p, size_t i, int v) {
  switch (t) {
    case DataType::Int8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DataType::Uint8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DataType::Int32: static_cast<int32_t*>(p)[i] = v; break;
    case DataType::Uint32: static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v); break;
    case DataType::Int64: static_cast<int64_t*>(p)[i] = v; break;
    case DataType::Uint64: static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v); break;
    case DataType::Float16: static_cast<c10::Half*>(p)[i] = c10::Half(static_cast<float>(v)); break;
    case DataType::BFloat16: static_cast<c10::BFloat16*>(p)[i] = c10::BFloat16(static_cast<float>(v)); break;
    case DataType::Float32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(p)[i] = static_cast<double>(v); break;
  }
}

template <class T>
void ref_int(void* out, const std::vector<const void*>& in, size_t i, RedOp op, double premul) {
  using U = std::make_unsigned_t<T>;
  const int n = static_cast<int>(in.size());
  U acc = static_cast<U>(static_cast<const T*>(in[0])[i]);
  if (op == RedOp::PreMulSum) acc = static_cast<U>(acc * static_cast<U>(static_cast<int64_t>(premul)));
  for (int r = 1; r < n; ++r) {
    T x = static_cast<const T*>(in[r])[i];
    U ux = static_cast<U>(x);
    switch (op) {
      case RedOp::Sum: case RedOp::Avg: acc = static_cast<U>(acc + ux); break;
      case RedOp::PreMulSum: acc = static_cast<U>(acc + static_cast<U>(ux * static_cast<U>(static_cast<int64_t>(premul)))); break;
      case RedOp::Prod: acc = static_cast<U>(acc * ux); break;
      case RedOp::Max: acc = x > static_cast<T>(acc) ? ux : acc; break;
      case RedOp::Min: acc = x < static_cast<T>(acc) ? ux : acc; break;
    }
  }
  T res = static_cast<T>(acc);
  if (op == RedOp::Avg) res = static_cast<T>(res / static_cast<T>(n));
  static_cast<T*>(out)[i] = res;
}

// NCCL's arithmetic for floating types, written from its device code (NVIDIA/nccl):
// src/device/reduce_kernel.h's portable definitions, FuncSum<half> =
// __float2half(__half2float(x) + __half2float(y)) (the same bits as __hadd), FuncProd alike,
// FuncMinMax = fminf / fmaxf (a NaN operand is dropped), Apply_PreOp<FuncPreMulSum> = x *
// scalar in the type; src/enqueue.cc hostToDevRedOp: avg = FuncPreMulSum by
// T(float(1.0 / nRanks)) (double: 1.0 / nRanks); src/device/all_reduce.h runRing: the
// buffer is cut into nRanks chunks, chunk c is sent first by ring position c + 1 and
// reduced one rank at a time up to position c (reduce_scatter.h: segment r likewise ends at
// rank r; reduce.h: the chain runs from the root's successor to the root); NVLS
// (Apply_LoadMultimem, .acc::f32) adds fp16 and bf16 in fp32 and rounds once. The
// algorithm is the one the cost model picked ("ring", "nvls", "tree", "nvls_tree").
// c10::Half / c10::BFloat16 round from float independently of the simulator's converters.
struct Order {
  std::string algo = "ring";
  int owner = -1;      // reduce-scatter segment / reduce root; -1: an all-reduce's chunks
  size_t count = 0;    // the all-reduce's elements
  int per_node = 8;
};

template <class T>
struct NcclMath {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;  // holds a T exactly
  static A get(const void* p, size_t i) { return static_cast<A>(static_cast<const T*>(p)[i]); }
  static A rnd(A x) { return static_cast<A>(static_cast<T>(x)); }
  static A add(A x, A y) { return rnd(x + y); }
  static A mul(A x, A y) { return rnd(x * y); }
  static A op2(RedOp op, A x, A y) {
    switch (op) {
      case RedOp::Prod: return mul(x, y);
      case RedOp::Max: return std::fmax(x, y);
      case RedOp::Min: return std::fmin(x, y);
      default: return add(x, y);
    }
  }
};

template <class T>
void ref_float(void* out, const std::vector<const void*>& in, size_t i, RedOp op, double premul, const Order& o) {
  using M = NcclMath<T>;
  using A = typename M::A;
  const int n = static_cast<int>(in.size());
  const bool pre = op == RedOp::Avg || op == RedOp::PreMulSum;
  const A scalar = M::rnd(static_cast<A>(op == RedOp::Avg ? (std::is_same_v<T, double> ? 1.0 / n : static_cast<float>(1.0 / n))
                                                          : premul));
  auto x = [&](int r) { return pre ? M::mul(M::get(in[r], i), scalar) : M::get(in[r], i); };
  std::string algo = o.algo;
  if ((algo == "nvls" || algo == "nvls_tree") && pre) algo = "ring";  // NCCL has no NVLS premulsum
  const int per = std::min(o.per_node, n), nodes = (n + per - 1) / per;
  if (algo == "nvls_tree" && nodes == 1) algo = "nvls";
  if (algo == "tree" && nodes == 1) algo = "ring";
  A acc = 0;
  // the switch: every rank's value into an fp32 (double: fp64) accumulator, one rounding
  auto nvls = [&](int lo, int hi) {
    A a = x(lo);
    for (int r = lo + 1; r < hi; ++r) a = op == RedOp::Max ? std::fmax(a, x(r)) : op == RedOp::Min ? std::fmin(a, x(r)) : a + x(r);
    return M::rnd(a);
  };
  if (algo == "ring") {
    const int owner = o.owner >= 0 ? o.owner : static_cast<int>(i / ((o.count + n - 1) / n));
    acc = x((owner + 1) % n);
    for (int k = 2; k <= n; ++k) acc = M::op2(op, acc, x((owner + k) % n));
  } else if (algo == "nvls") {
    acc = nvls(0, n);
  } else {  // per node, then the nodes in order
    for (int g = 0; g < nodes; ++g) {
      const int lo = g * per, hi = std::min(n, lo + per);
      A part;
      if (algo == "nvls_tree") {
        part = nvls(lo, hi);
      } else {  // tree: up the node's chain, from its last GPU to its first
        part = x(hi - 1);
        for (int r = hi - 2; r >= lo; --r) part = M::op2(op, part, x(r));
      }
      acc = g == 0 ? part : M::op2(op, acc, part);
    }
  }
  T res = static_cast<T>(acc);
  if (std::isnan(static_cast<A>(res))) {  // one canonical quiet NaN
    if constexpr (sizeof(T) == 2) {
      const uint16_t q = 0x7fff;
      std::memcpy(&res, &q, 2);
    } else {
      res = std::numeric_limits<T>::quiet_NaN();
    }
  }
  static_cast<T*>(out)[i] = res;
}

void reference(DataType t, void* out, const std::vector<const void*>& in, size_t count, RedOp op, double premul,
               const Order& o = {}) {
  for (size_t i = 0; i < count; ++i) {
    switch (t) {
      case DataType::Int8: ref_int<int8_t>(out, in, i, op, premul); break;
      case DataType::Uint8: ref_int<uint8_t>(out, in, i, op, premul); break;
      case DataType::Int32: ref_int<int32_t>(out, in, i, op, premul); break;
      case DataType::Uint32: ref_int<uint32_t>(out, in, i, op, premul); break;
      case DataType::Int64: ref_int<int64_t>(out, in, i, op, premul); break;
      case DataType::Uint64: ref_int<uint64_t>(out, in, i, op, premul); break;
      case DataType::Float16: ref_float<c10::Half>(out, in, i, op, premul, o); break;
      case DataType::BFloat16: ref_float<c10::BFloat16>(out, in, i, op, premul, o); break;
      case DataType::Float32: ref_float<float>(out, in, i, op, premul, o); break;
      case DataType::Float64: ref_float<double>(out, in, i, op, premul, o); break;
    }
  }
}

// The order the simulator's cost model gives NCCL's algorithm for this collective.
Order order_of(const Topology& topo, CollKind kind, DataType t, RedOp op, size_t count, int n, int owner) {
  const uint64_t bytes = count * comm::dtype_size(t);  // nccl-tests' size: the whole buffer
  Order o;
  o.algo = collective_cost(topo, kind, bytes, n, comm::nvls_supported(t, op)).algorithm;
  o.owner = owner;
  o.count = count;
  o.per_node = topo.gpus_per_node;
  return o;
}

using Bytes = std::vector<uint8_t>;

Bytes input(DataType t, int rank, size_t count, uint64_t salt) {
  Bytes b(count * comm::dtype_size(t));
  for (size_t i = 0; i < count; ++i) {
    int v = static_cast<int>((rank * 7 + i * 3 + salt) % 5) + 1;  // 1..5: exact in every type
    if ((i + rank) % 4 == 0 && t != DataType::Uint8 && t != DataType::Uint32 && t != DataType::Uint64) v = -v;
    put(t, b.data(), i, v);
  }
  return b;
}

const DataType kTypes[] = {DataType::Int8,   DataType::Uint8,   DataType::Int32,    DataType::Uint32,  DataType::Int64,
                           DataType::Uint64, DataType::Float16, DataType::BFloat16, DataType::Float32, DataType::Float64};
const RedOp kOps[] = {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg, RedOp::PreMulSum};

struct CollCase {
  int n;
  bool in_place;
};

class Collectives : public ::testing::TestWithParam<CollCase> {};

TEST_P(Collectives, MatchTheReferenceForEveryTypeAndOp) {
  const int n = GetParam().n;
  const bool in_place = GetParam().in_place;
  const size_t count = n >= 64 ? 5 : 37;  // odd sizes on purpose
  World w(world(n));
  std::vector<std::string> failures;
  std::mutex fm;
  auto note = [&](const std::string& s) {
    std::lock_guard<std::mutex> lk(fm);
    if (failures.size() < 20) failures.push_back(s);
  };
  for (DataType t : kTypes) {
    const size_t es = comm::dtype_size(t);
    // every rank's inputs, known to all for the reference
    std::vector<Bytes> ins;
    for (int r = 0; r < n; ++r) ins.push_back(input(t, r, count * n, static_cast<uint64_t>(t)));
    std::vector<const void*> ptrs;
    for (auto& b : ins) ptrs.push_back(b.data());
    auto rep = w.run([&](Rank& rk) {
      auto& c = rk.comm();
      const int r = rk.rank();
      for (RedOp op : kOps) {
        const double premul = 3.0;
        // all_reduce
        {
          Bytes send = ins[r], recv(send.size());
          void* out = in_place ? send.data() : recv.data();
          c.all_reduce(send.data(), out, count * n, t, op, {premul})->wait();
          Bytes want(send.size());
          reference(t, want.data(), ptrs, count * n, op, premul,
                    order_of(w.topology(), CollKind::AllReduce, t, op, count * n, n, -1));
          if (std::memcmp(out, want.data(), want.size()) != 0)
            note(std::string("all_reduce ") + comm::dtype_name(t) + " " + comm::op_name(op) + " rank " + std::to_string(r));
        }
        // reduce_scatter: recv == send + rank * recvcount in place
        {
          Bytes send = ins[r], recv(count * es);
          void* out = in_place ? send.data() + r * count * es : recv.data();
          c.reduce_scatter(send.data(), out, count, t, op, {premul})->wait();
          Bytes full(count * n * es);
          reference(t, full.data(), ptrs, count * n, op, premul,
                    order_of(w.topology(), CollKind::ReduceScatter, t, op, count * n, n, r));
          if (std::memcmp(out, full.data() + r * count * es, count * es) != 0)
            note(std::string("reduce_scatter ") + comm::dtype_name(t) + " " + comm::op_name(op) + " rank " + std::to_string(r));
        }
        // reduce to a root
        {
          const int root = (static_cast<int>(op) + 1) % n;
          Bytes send = ins[r], recv(send.size(), 0xEE);
          void* out = in_place ? send.data() : recv.data();
          c.reduce(send.data(), out, count * n, t, op, root, {premul})->wait();
          if (r == root) {
            Bytes want(send.size());
            reference(t, want.data(), ptrs, count * n, op, premul,
                      order_of(w.topology(), CollKind::Reduce, t, op, count * n, n, root));
            if (std::memcmp(out, want.data(), want.size()) != 0)
              note(std::string("reduce ") + comm::dtype_name(t) + " " + comm::op_name(op) + " rank " + std::to_string(r));
          } else if (!in_place && recv != Bytes(send.size(), 0xEE)) {
            note("reduce wrote a non-root's recv buffer");
          }
        }
      }
      // all_gather: send == recv + rank * sendcount in place
      {
        Bytes recv(count * n * es, 0);
        Bytes own(ins[r].begin(), ins[r].begin() + count * es);
        const void* send = own.data();
        if (in_place) {
          std::memcpy(recv.data() + r * count * es, own.data(), count * es);
          send = recv.data() + r * count * es;
        }
        c.all_gather(send, recv.data(), count, t)->wait();
        for (int q = 0; q < n; ++q)
          if (std::memcmp(recv.data() + q * count * es, ins[q].data(), count * es) != 0)
            note(std::string("all_gather ") + comm::dtype_name(t) + " rank " + std::to_string(r) + " block " + std::to_string(q));
      }
      // broadcast from every root
      for (int root = 0; root < std::min(n, 3); ++root) {
        Bytes buf = ins[r], recv(buf.size(), 0);
        void* out = in_place ? buf.data() : recv.data();
        c.broadcast(buf.data(), out, count * n, t, root)->wait();
        if (std::memcmp(out, ins[root].data(), buf.size()) != 0)
          note(std::string("broadcast ") + comm::dtype_name(t) + " root " + std::to_string(root) + " rank " + std::to_string(r));
      }
    });
    ASSERT_TRUE(rep.ok()) << rep.first_error();
  }
  EXPECT_TRUE(failures.empty()) << failures.size() << " mismatches, first: " << failures.front();
}

INSTANTIATE_TEST_SUITE_P(Sim, Collectives,
                         ::testing::Values(CollCase{1, false}, CollCase{1, true}, CollCase{2, false}, CollCase{2, true},
                                           CollCase{3, false}, CollCase{3, true}, CollCase{8, false}, CollCase{8, true},
                                           CollCase{64, false}, CollCase{64, true}),
                         [](const auto& info) {
                           return std::to_string(info.param.n) + (info.param.in_place ? "ranks_in_place" : "ranks");
                         });

// ---------------------------------------------------------------------------------------
// NCCL's rounding (issue 38 item 2): random values that do not add exactly, with NaNs, per
// algorithm the cost model picks, against the reference above.

// A value of type t: random magnitudes over a few binades (a cheap hash: large buffers),
// every 53rd a NaN on some ranks, every 1009th a NaN on all of them.
void put_random(DataType t, void* p, size_t i, int rank) {
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(rank) + 1) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  float v = std::ldexp(static_cast<float>(h & 0xffffff) / 8388608.f - 1.f, static_cast<int>((h >> 24) % 7) - 3);
  if ((i + static_cast<size_t>(rank) * 11) % 53 == 0 || i % 1009 == 5) v = std::nanf("");
  switch (t) {
    case DataType::Float16: static_cast<c10::Half*>(p)[i] = c10::Half(v); break;
    case DataType::BFloat16: static_cast<c10::BFloat16*>(p)[i] = c10::BFloat16(v); break;
    case DataType::Float32: static_cast<float*>(p)[i] = v; break;
    case DataType::Float64: static_cast<double*>(p)[i] = static_cast<double>(v) * (1.0 + 1e-9 * static_cast<double>(h >> 40)); break;
    default: break;
  }
}

// The reference's element i (of the buffers' element 0 at ptrs) written to out[i].
void ref_at(DataType t, void* out, const std::vector<const void*>& in, size_t i, RedOp op, double premul, const Order& o) {
  switch (t) {
    case DataType::Float16: ref_float<c10::Half>(out, in, i, op, premul, o); break;
    case DataType::BFloat16: ref_float<c10::BFloat16>(out, in, i, op, premul, o); break;
    case DataType::Float32: ref_float<float>(out, in, i, op, premul, o); break;
    case DataType::Float64: ref_float<double>(out, in, i, op, premul, o); break;
    default: break;
  }
}

bool is_nan(DataType t, const void* p) {
  switch (t) {
    case DataType::Float16: return std::isnan(static_cast<float>(*static_cast<const c10::Half*>(p)));
    case DataType::BFloat16: return std::isnan(static_cast<float>(*static_cast<const c10::BFloat16*>(p)));
    case DataType::Float32: return std::isnan(*static_cast<const float*>(p));
    case DataType::Float64: return std::isnan(*static_cast<const double*>(p));
    default: return false;
  }
}

struct RoundCase {
  const char* topology;
  int n;
  size_t count;        // elements
  const char* algo;    // what the cost model picks for an fp16/bf16 sum of that size
  size_t stride;       // the reference checks every stride-th element of large buffers (and more)
};

class Rounding : public ::testing::TestWithParam<RoundCase> {};

TEST_P(Rounding, ReductionsRoundAsNcclsAlgorithmDoes) {
  const RoundCase rc = GetParam();
  WorldOptions o = world(rc.n, 60.0);
  o.topology = rc.topology;
  o.engine_threads = 2;  // large buffers on two threads: the ring's chunks cross their slices
  World w(o);
  const int n = rc.n;
  const size_t count = rc.count, seg = count / n;
  const bool large = rc.stride > 1;
  // the elements checked: all, or every stride-th, the all-NaN ones and the chunks' edges
  std::vector<size_t> idx;
  for (size_t i = 0; i < count; ++i)
    if (!large || i % rc.stride == 0 || i % 1009 == 5 || (i + 1) % seg < 2) idx.push_back(i);
  // (large buffers: what NVLS changes, fp16 and bf16 sums and maxima, and avg's ring)
  std::vector<DataType> types = {DataType::Float16, DataType::BFloat16};
  std::vector<RedOp> ops = {RedOp::Sum, RedOp::Avg, RedOp::Max};
  if (!large) {
    types.insert(types.end(), {DataType::Float32, DataType::Float64});
    ops.insert(ops.end(), {RedOp::Prod, RedOp::Min, RedOp::PreMulSum});
  }
  std::set<std::string> algos;
  for (DataType t : types) {
    const size_t es = comm::dtype_size(t);
    std::vector<Bytes> ins(n, Bytes(count * es));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) put_random(t, ins[r].data(), i, r);
    std::vector<const void*> ptrs;
    for (auto& b : ins) ptrs.push_back(b.data());
    for (RedOp op : ops) {
      const double premul = 0.3;  // not exact in binary
      const Order ar = order_of(w.topology(), CollKind::AllReduce, t, op, count, n, -1);
      algos.insert(ar.algo);
      const std::string what = std::string(comm::dtype_name(t)) + " " + comm::op_name(op) + " (" + ar.algo + ")";
      if ((t == DataType::Float16 || t == DataType::BFloat16) && op == RedOp::Sum) {
        EXPECT_EQ(ar.algo, rc.algo) << what;
      }
      if (!comm::nvls_supported(t, op)) {
        EXPECT_NE(ar.algo.substr(0, 4), "nvls") << what;
      }
      const int root = n - 1;
      std::vector<Bytes> out(n, Bytes(count * es)), rs(n, Bytes(seg * es)), red(n, Bytes(count * es));
      auto rep = w.run([&](Rank& rk) {
        const int r = rk.rank();
        rk.comm().all_reduce(ins[r].data(), out[r].data(), count, t, op, {premul})->wait();
        if (!large) {
          rk.comm().reduce_scatter(ins[r].data(), rs[r].data(), seg, t, op, {premul})->wait();
          rk.comm().reduce(ins[r].data(), red[r].data(), count, t, op, root, {premul})->wait();
        }
      });
      ASSERT_TRUE(rep.ok()) << rep.first_error();
      const Order oroot = order_of(w.topology(), CollKind::Reduce, t, op, count, n, root);
      Bytes want(count * es), want_rs(count * es), want_red(count * es), once(es);
      size_t differ_once = 0, nan_out = 0, all_nan = 0;
      for (size_t i : idx) {
        ref_at(t, want.data(), ptrs, i, op, premul, ar);
        for (int r = 0; r < n; ++r)
          ASSERT_EQ(std::memcmp(out[r].data() + i * es, want.data() + i * es, es), 0)
              << what << ": all_reduce, rank " << r << ", element " << i;
        // what one fp32 (fp64) rounding of the rank-order sum would give
        std::vector<const void*> at;
        for (const void* p : ptrs) at.push_back(static_cast<const char*>(p) + i * es);
        comm::reduce(once.data(), at.data(), n, 0, 1, t, op, premul);
        differ_once += std::memcmp(once.data(), want.data() + i * es, es) != 0 && !(is_nan(t, once.data()) && is_nan(t, want.data() + i * es));
        if (t == DataType::Float32) nan_out += std::isnan(reinterpret_cast<const float*>(want.data())[i]);
        all_nan += i % 1009 == 5;
        if (large) continue;
        if (i < seg * n) {
          const Order os = order_of(w.topology(), CollKind::ReduceScatter, t, op, count, n, static_cast<int>(i / seg));
          ref_at(t, want_rs.data(), ptrs, i, op, premul, os);
          ASSERT_EQ(std::memcmp(rs[i / seg].data() + (i % seg) * es, want_rs.data() + i * es, es), 0)
              << what << ": reduce_scatter, element " << i;
        }
        ref_at(t, want_red.data(), ptrs, i, op, premul, oroot);
        ASSERT_EQ(std::memcmp(red[root].data() + i * es, want_red.data() + i * es, es), 0)
            << what << ": reduce, element " << i;
      }
      // max and min drop a NaN unless every rank has one
      if (t == DataType::Float32 && (op == RedOp::Max || op == RedOp::Min)) {
        EXPECT_EQ(nan_out, all_nan) << what;
      }
      // fp16 and bf16 added pairwise in the type (ring, tree) round visibly differently from
      // one rounding of an fp32 sum; NVLS's fp32 accumulator does not
      if ((t == DataType::Float16 || t == DataType::BFloat16) && (op == RedOp::Sum || op == RedOp::Avg)) {
        if (ar.algo == "nvls" && op == RedOp::Sum)
          EXPECT_EQ(differ_once, 0u) << what;
        else
          EXPECT_GT(differ_once, idx.size() / 20) << what << ": " << differ_once << " of " << idx.size();
      }
    }
  }
  EXPECT_TRUE(algos.count(rc.algo)) << "the case did not exercise " << rc.algo;
}

INSTANTIATE_TEST_SUITE_P(Sim, Rounding,
                         ::testing::Values(RoundCase{"8xA100", 3, 3 * 1111, "ring", 1},
                                           RoundCase{"8xA100", 8, 8 * 1024, "ring", 1},
                                           RoundCase{"8xH100", 8, 8 << 20, "nvls", 4099},
                                           RoundCase{"2x8xH100-IB", 16, 16 * 512, "tree", 1},
                                           RoundCase{"2x8xH100-IB", 16, 4 << 20, "nvls_tree", 4099}),
                         [](const auto& info) {
                           return std::string(info.param.algo) + "_" + std::to_string(info.param.n) + "ranks";
                         });

TEST(Kernels, HalfAndBFloat16ConversionsMatchC10) {
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> d(-70000.f, 70000.f);
  for (int i = 0; i < 20000; ++i) {
    float f = i < 10000 ? d(gen) : std::ldexp(d(gen), -30);  // normal, then subnormal range
    c10::Half h(f);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    ASSERT_EQ(comm::float_to_half(f), hb) << f;
    ASSERT_EQ(comm::half_to_float(hb), static_cast<float>(h)) << f;
    c10::BFloat16 b(f);
    uint16_t bb;
    std::memcpy(&bb, &b, 2);
    ASSERT_EQ(comm::float_to_bf16(f), bb) << f;
    ASSERT_EQ(comm::bf16_to_float(bb), static_cast<float>(b)) << f;
  }
  EXPECT_TRUE(std::isinf(comm::half_to_float(comm::float_to_half(1e6f))));
  EXPECT_TRUE(std::isnan(comm::half_to_float(comm::float_to_half(NAN))));
}

// The simulator's in-type rounding (a few integer operations on a float) gives the bits the
// converters give: every fp16 and bf16 value times scalars that land in the normal,
// subnormal and overflow ranges (a one-rank premulsum: x * T(s), rounded once), and sums
// of random pairs (a two-rank sum), against c10's conversions.
TEST(Kernels, NcclRoundingInTheTypeMatchesTheConverters) {
  for (DataType t : {DataType::Float16, DataType::BFloat16}) {
    const bool f16 = t == DataType::Float16;
    auto from = [&](uint16_t b) {
      return f16 ? static_cast<float>(c10::Half(b, c10::Half::from_bits())) : static_cast<float>(c10::BFloat16(b, c10::BFloat16::from_bits()));
    };
    auto to = [&](float v) {
      uint16_t b;
      if (f16) {
        c10::Half h(v);
        std::memcpy(&b, &h, 2);
      } else {
        c10::BFloat16 h(v);
        std::memcpy(&b, &h, 2);
      }
      if (std::isnan(v)) b = 0x7fff;  // the canonical NaN
      return b;
    };
    std::vector<uint16_t> all(65536), got(65536);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
    const void* one[] = {all.data()};
    for (double s : {0.3, 3.0, 1.0 / 3, 1e-3, 7e-6, 1.5e4, 2.0}) {
      comm::reduce_nccl(got.data(), one, 1, 0, all.size(), t, RedOp::PreMulSum, s, {});
      const float scalar = from(to(static_cast<float>(s)));
      for (size_t i = 0; i < all.size(); ++i)
        ASSERT_EQ(got[i], to(from(all[i]) * scalar)) << comm::dtype_name(t) << " " << from(all[i]) << " * " << s;
    }
    std::mt19937 gen(7);
    std::vector<uint16_t> a(1 << 20), b(1 << 20), sum(1 << 20);
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = static_cast<uint16_t>(gen());
      b[i] = static_cast<uint16_t>((a[i] & 0x8000u) ^ (gen() % 3 ? 0x8000u : 0u)) | static_cast<uint16_t>(gen() & 0x7fffu);
    }
    const void* two[] = {a.data(), b.data()};
    comm::reduce_nccl(sum.data(), two, 2, 0, a.size(), t, RedOp::Sum, 0.0, {});
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(sum[i], to(from(a[i]) + from(b[i]))) << comm::dtype_name(t) << " " << from(a[i]) << " + " << from(b[i]);
  }
}

TEST(Collectives, LargeAllReduceUsesTheParallelEngineAndStaysExact) {
  const size_t count = (1 << 20) + 3;
  WorldOptions o = world(4);
  o.engine_threads = 2;
  World w(o);
  std::vector<std::vector<float>> out(4);
  auto rep = w.run([&](Rank& rk) {
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>((i * 13 + rk.rank()) % 1000) * 0.25f;
    out[rk.rank()].resize(count);
    rk.comm().all_reduce(v.data(), out[rk.rank()].data(), count, DataType::Float32, RedOp::Sum)->wait();
  });
  ASSERT_TRUE(rep.ok()) << rep.first_error();
  for (size_t i = 0; i < count; i += 9973) {
    float want = 0;
    for (int r = 0; r < 4; ++r) want += static_cast<float>((i * 13 + r) % 1000) * 0.25f;
    for (int r = 0; r < 4; ++r) ASSERT_EQ(out[r][i], want) << i;
  }
}

// ---------------------------------------------------------------------------------------

TEST(SendRecv, RingExchangeInAGroupAndOrderedCompletion) {
  const int n = 5;
  World w(world(n));
  std::vector<std::vector<int32_t>> got(n);
  auto rep = w.run([&](Rank& rk) {
    const int r = rk.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<int32_t> mine(10, r * 100), from_prev(10, -1);
    auto& c = rk.comm();
    c.group_start();
    auto s = c.send(mine.data(), 10, DataType::Int32, next);
    auto v = c.recv(from_prev.data(), 10, DataType::Int32, prev);
    c.group_end();
    s->wait();
    v->wait();
    got[r] = from_prev;
  });
  ASSERT_TRUE(rep.ok()) << rep.first_error();
  for (int r = 0; r < n; ++r) EXPECT_EQ(got[r], std::vector<int32_t>(10, ((r + n - 1) % n) * 100));
}

TEST(SendRecv, DependentPairsWithoutAGroupAreDiagnosedNotHung) {
  World w(world(2));
  auto start = std::chrono::steady_clock::now();
  auto rep = w.run([&](Rank& rk) {
    int peer = 1 - rk.rank();
    std::vector<float> a(4, 1.f), b(4);
    auto& c = rk.comm();
    // both send first then receive, in stream order: each send waits for a recv that is
    // behind the other rank's send, as on real NCCL streams
    auto s = c.send(a.data(), 4, DataType::Float32, peer);
    auto v = c.recv(b.data(), 4, DataType::Float32, peer);
    s->wait();
    v->wait();
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  ASSERT_FALSE(rep.ok());
  for (const auto& r : rep.ranks) {
    EXPECT_EQ(r.status, Status::InvalidState) << r.error;  // ncclInvalidUsage
    EXPECT_NE(r.error.find("group_start/group_end"), std::string::npos) << r.error;
  }
}

TEST(SendRecv, UnmatchedSendFailsWhenThePeerFinishes) {
  World w(world(2));
  auto rep = w.run([&](Rank& rk) {
    if (rk.rank() == 0) {
      float x = 1;
      rk.comm().send(&x, 1, DataType::Float32, 1)->wait();
    }
  });
  ASSERT_EQ(rep.ranks[0].status, Status::InvalidState);
  EXPECT_NE(rep.ranks[0].error.find("rank 1 finished without the matching recv"), std::string::npos) << rep.ranks[0].error;
  EXPECT_EQ(rep.ranks[1].status, Status::Ok);
}

TEST(SendRecv, CountMismatchIsInvalidUsage) {
  World w(world(2));
  auto rep = w.run([&](Rank& rk) {
    std::vector<float> b(8);
    auto& c = rk.comm();
    c.group_start();
    auto op = rk.rank() == 0 ? c.send(b.data(), 8, DataType::Float32, 1) : c.recv(b.data(), 4, DataType::Float32, 0);
    c.group_end();
    op->wait();
  });
  for (const auto& r : rep.ranks) {
    EXPECT_EQ(r.status, Status::InvalidState);
    EXPECT_NE(r.error.find("send/recv mismatch"), std::string::npos) << r.error;
  }
}

// ---------------------------------------------------------------------------------------
// Errors

TEST(Errors, InvalidArgumentsAreReportedAtTheCall) {
  World w(world(3));
  auto rep = w.run([&](Rank& rk) {
    auto& c = rk.comm();
    float x[3] = {0};
    auto expect = [&](auto&& call, Result want, const std::string& words) {
      try {
        call();
        ADD_FAILURE() << "no error; expected " << words;
      } catch (const CommError& e) {
        EXPECT_EQ(e.result(), want) << e.what();
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      }
    };
    expect([&] { c.broadcast(x, x, 3, DataType::Float32, 3); }, Result::InvalidArgument, "root 3 is not a rank of this 3-rank world");
    expect([&] { c.reduce(x, x, 3, DataType::Float32, RedOp::Sum, -1); }, Result::InvalidArgument, "root -1");
    expect([&] { c.all_reduce(x, x, 3, static_cast<DataType>(42), RedOp::Sum); }, Result::InvalidArgument, "invalid data type 42");
    expect([&] { c.all_reduce(x, x, 3, DataType::Float32, static_cast<RedOp>(9)); }, Result::InvalidArgument, "invalid reduction op 9");
    expect([&] { c.all_reduce(nullptr, x, 3, DataType::Float32, RedOp::Sum); }, Result::InvalidArgument, "NULL buffer");
    expect([&] { c.send(x, 1, DataType::Float32, 7); }, Result::InvalidArgument, "peer 7");
    expect([&] { c.group_end(); }, Result::InvalidUsage, "group_end without group_start");
    // none of these reached the wire: the next collective is #1 everywhere and succeeds
    c.all_reduce(x, x, 3, DataType::Float32, RedOp::Sum)->wait();
  });
  EXPECT_TRUE(rep.ok()) << rep.first_error();
}

TEST(Errors, MismatchedCollectivesFailEveryRankWithTheCallsNamed) {
  World w(world(4, 30.0));
  auto start = std::chrono::steady_clock::now();
  auto rep = w.run([&](Rank& rk) {
    std::vector<float> x(16, 1.f);
    auto& c = rk.comm();
    c.all_reduce(x.data(), x.data(), 16, DataType::Float32, RedOp::Sum)->wait();  // #1 agrees
    if (rk.rank() == 2)
      c.broadcast(x.data(), x.data(), 16, DataType::Float32, 0)->wait();
    else
      c.all_reduce(x.data(), x.data(), rk.rank() == 3 ? 8 : 16, DataType::Float32, RedOp::Sum)->wait();
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);  // not the 30 s timeout
  for (const auto& r : rep.ranks) {
    EXPECT_EQ(r.status, Status::InvalidState) << r.error;
    EXPECT_NE(r.error.find("mismatched collectives at call #2"), std::string::npos) << r.error;
  }
  // rank 3 posts right after the first collective completes and is the first to disagree
  const std::string& msg = rep.ranks[0].error;
  EXPECT_NE(msg.find("rank 0 called all_reduce #2(count=16, float32, sum); rank 3 called all_reduce #2(count=8, float32, sum)"),
            std::string::npos)
      << msg;
  // a rank that arrives later with yet another call sees its own call named too
  EXPECT_NE(rep.ranks[2].error.find("rank 2 called broadcast #2(count=16, float32, root=0)"), std::string::npos)
      << rep.ranks[2].error;
}

TEST(Errors, AMissingRankIsNamed) {
  World w(world(3, 30.0));
  auto start = std::chrono::steady_clock::now();
  auto rep = w.run([&](Rank& rk) {
    float x = 1;
    if (rk.rank() == 1) return;  // forgets the collective
    rk.comm().all_reduce(&x, &x, 1, DataType::Float32, RedOp::Sum)->wait();
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  EXPECT_EQ(rep.ranks[1].status, Status::Ok);
  for (int r : {0, 2}) {
    EXPECT_EQ(rep.ranks[r].status, Status::InvalidState);
    EXPECT_NE(rep.ranks[r].error.find("rank 1 finished without calling it"), std::string::npos) << rep.ranks[r].error;
  }
}

TEST(Errors, TimeoutWhenARankStallsOutsideTheSimulator) {
  World w(world(2, 0.3));
  std::atomic<double> failed_after{0};
  auto start = std::chrono::steady_clock::now();
  auto rep = w.run([&](Rank& rk) {
    float x = 1;
    if (rk.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    try {
      rk.comm().all_reduce(&x, &x, 1, DataType::Float32, RedOp::Sum)->wait();
    } catch (...) {
      if (rk.rank() == 0) failed_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      throw;
    }
  });
  EXPECT_EQ(rep.ranks[0].status, Status::Timeout) << rep.ranks[0].error;
  EXPECT_NE(rep.ranks[0].error.find("ranks that have not called it: 1"), std::string::npos) << rep.ranks[0].error;
  EXPECT_LT(failed_after.load(), 1.2);  // well before rank 1 wakes up
  EXPECT_NE(rep.ranks[1].status, Status::Ok);
}

// ---------------------------------------------------------------------------------------
// Faults

TEST(Faults, KilledRankMakesTheOthersFailPromptlyWithRemoteError) {
  WorldOptions o = world(4, 30.0);
  o.faults = parse_faults("kill:2@collective:3");
  World w(o);
  auto start = std::chrono::steady_clock::now();
  std::vector<int> completed(4, 0);
  auto rep = w.run([&](Rank& rk) {
    float x = 1;
    for (int i = 0; i < 10; ++i) {
      rk.comm().all_reduce(&x, &x, 1, DataType::Float32, RedOp::Sum)->wait();
      ++completed[rk.rank()];
    }
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  EXPECT_EQ(rep.ranks[2].status, Status::Communication);
  EXPECT_NE(rep.ranks[2].error.find("killed by fault injection at its collective #3"), std::string::npos);
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(rep.ranks[r].status, Status::Communication) << rep.ranks[r].error;
    EXPECT_NE(rep.ranks[r].error.find("rank 2 died"), std::string::npos) << rep.ranks[r].error;
    EXPECT_EQ(completed[r], 2);
  }
}

TEST(Faults, KillAtStepAndDelay) {
  WorldOptions o = world(2);
  o.faults = parse_faults("kill:1@step:4");
  World w(o);
  auto rep = w.run([&](Rank& rk) {
    float x = 1;
    for (int step = 1; step <= 6; ++step) {
      rk.notify_step(step);
      rk.comm().all_reduce(&x, &x, 1, DataType::Float32, RedOp::Sum)->wait();
    }
  });
  EXPECT_NE(rep.ranks[1].error.find("killed by fault injection at step 4"), std::string::npos);
  EXPECT_NE(rep.ranks[0].error.find("rank 1 died"), std::string::npos);

  WorldOptions d = world(2);
  d.faults = parse_faults("delay:1:0.5");
  World slow(d), fast(world(2));
  auto body = [](Rank& rk) {
    float x = 1;
    rk.comm().charge_compute(0.1, "forward");
    rk.comm().all_reduce(&x, &x, 1, DataType::Float32, RedOp::Sum)->wait();
  };
  auto a = slow.run(body), b = fast.run(body);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(a.predicted_seconds - b.predicted_seconds, 0.5, 1e-9);  // everyone waits for the straggler
  EXPECT_NEAR(a.ranks[0].virtual_seconds, a.ranks[1].virtual_seconds, 1e-12);
  EXPECT_THROW(parse_faults("explode:1"), Error);
  WorldOptions bad = world(2);
  bad.faults = parse_faults("kill:5@collective:1");
  EXPECT_THROW(World{bad}, Error);
}

// The one grammar of the fault list (docs/simulator.md, "Faults"): spaces around an item are
// fine, an empty item or a space inside one is refused with the list or the item quoted.
TEST(Faults, Grammar) {
  const auto list = parse_faults("kill:1@collective:3, kill:2@step:0 ,\tdelay:0:1e-3", 4);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].kind, Fault::Kind::KillAtCollective);
  EXPECT_EQ(list[0].rank, 1);
  EXPECT_EQ(list[0].at, 3);
  EXPECT_EQ(list[1].kind, Fault::Kind::KillAtStep);
  EXPECT_EQ(list[1].at, 0);
  EXPECT_EQ(list[2].kind, Fault::Kind::Delay);
  EXPECT_DOUBLE_EQ(list[2].seconds, 1e-3);
  const std::pair<const char*, const char*> bad[] = {
      {"kill:0@collective:1,,", "faults: 'kill:0@collective:1,,': item 2 is empty"},
      {"kill:0@collective:1,", "item 2 is empty"},
      {",kill:0@collective:1", "item 1 is empty"},
      {"delay:0:1, ,delay:1:1", "item 2 is empty"},
      {" ", "item 1 is empty"},
      {"kill: 1@step:2", "faults: cannot read 'kill: 1@step:2'"},
      {"kill:1@step: 2", "cannot read 'kill:1@step: 2'"},
      {"kill:+1@step:2", "cannot read 'kill:+1@step:2'"},
      {"kill:1@step:-1", "cannot read 'kill:1@step:-1'"},
      {"delay:0: 1", "cannot read 'delay:0: 1'"},
      {"delay:0:0x10", "cannot read 'delay:0:0x10'"},
      {"delay:0:-1", "'delay:0:-1': SECONDS must be finite and >= 0, got -1"},
      {"kill:1@stpe:2", "'kill:1@stpe:2': kill at 'collective' or 'step'"},
      {"kill:1@collective:0", "K must be >= 1"},
      {"kill:99999999999@step:1", "names rank"},
      {"kill:4@step:1", "'kill:4@step:1' names rank 4 of a 4-rank world"},
  };
  for (const auto& [spec, message] : bad) {
    try {
      parse_faults(spec, 4);
      ADD_FAILURE() << spec << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << spec << ": " << e.what();
    }
  }
}

// ---------------------------------------------------------------------------------------
// Determinism

struct Outcome {
  std::vector<Bytes> data;
  std::string trace;
  double predicted = 0;
  bool operator==(const Outcome& o) const { return data == o.data && trace == o.trace && predicted == o.predicted; }
};

Outcome run_workload(uint64_t noise) {
  WorldOptions o = world(6);
  o.noise_seed = noise;
  o.record_trace = true;
  o.engine_threads = 2;
  World w(o);
  Outcome out;
  out.data.resize(6);
  // libtorch's process-wide generator, shared by all ranks: dropout and randn on every
  // rank, interleaved with communication. Which rank gets which draws depends on the order
  // the ranks run in; the maestro makes that order the same on every run.
  torch::manual_seed(1234);
  auto rep = w.run([&](Rank& rk) {
    auto x = torch::randn({256});
    auto x0 = x.clone();
    auto y = torch::dropout(torch::ones({256}), 0.3, /*train=*/true);
    rk.comm().charge_compute(1e-3 * (rk.rank() + 1), "forward");
    auto z = (x * y).contiguous();
    rk.comm().all_reduce(z.data_ptr(), z.data_ptr(), 256, DataType::Float32, RedOp::Sum)->wait();
    auto more = torch::randn({64});
    std::vector<float> g(64 * 6);
    rk.comm().all_gather(more.data_ptr(), g.data(), 64, DataType::Float32)->wait();
    Bytes b(z.numel() * 4 + g.size() * 4 + 256 * 4);
    std::memcpy(b.data(), z.data_ptr(), z.numel() * 4);
    std::memcpy(b.data() + z.numel() * 4, g.data(), g.size() * 4);
    std::memcpy(b.data() + z.numel() * 4 + g.size() * 4, x0.data_ptr(), 256 * 4);
    out.data[rk.rank()] = b;
  });
  EXPECT_TRUE(rep.ok()) << rep.first_error();
  out.trace = w.trace_json();
  out.predicted = rep.predicted_seconds;
  return out;
}

TEST(Determinism, BitIdenticalAcrossRunsAndSchedulingNoise) {
  Outcome first = run_workload(0);
  for (uint64_t noise = 1; noise <= 6; ++noise) {
    Outcome again = run_workload(noise);
    ASSERT_TRUE(again.data == first.data) << "data differs with noise seed " << noise;
    ASSERT_EQ(again.trace, first.trace);
    ASSERT_EQ(again.predicted, first.predicted);
  }
  // and the workload really depends on the order of the generator draws
  EXPECT_NE(first.data[0], first.data[1]);
}

// ---------------------------------------------------------------------------------------
// Memory budgets

TEST(Memory, AccountingToTheByteAndPeaks) {
  WorldOptions o = world(2);
  o.device_capacity = parse_bytes("64MiB");
  World w(o);
  std::vector<uint64_t> seen(6);
  auto rep = w.run([&](Rank& rk) {
    World& wd = rk.world();
    const int r = rk.rank();
    uint64_t base = wd.current_bytes(r);
    {
      auto a = torch::empty({1000}, torch::kFloat);         // 4000 bytes
      auto b = torch::empty({10, 10}, torch::kDouble);      // 800 bytes
      if (r == 0) {
        seen[0] = wd.current_bytes(r) - base;
        auto c = torch::empty({1 << 20}, torch::kByte);     // 1 MiB, freed at once
      }
      if (r == 0) seen[1] = wd.current_bytes(r) - base;
    }
    if (r == 0) seen[2] = wd.current_bytes(r) - base;
    if (r == 1) {
      auto big = torch::empty({3 << 20}, torch::kFloat);  // 12 MiB
      seen[3] = wd.current_bytes(r) - base;
    }
  });
  ASSERT_TRUE(rep.ok()) << rep.first_error();
  EXPECT_EQ(seen[0], 4800u);
  EXPECT_EQ(seen[1], 4800u);
  EXPECT_EQ(seen[2], 0u);
  EXPECT_EQ(seen[3], 12u << 20);
  EXPECT_EQ(rep.ranks[0].peak_bytes, 4800u + (1u << 20));
  EXPECT_EQ(rep.ranks[1].peak_bytes, 12u << 20);
  EXPECT_EQ(rep.ranks[0].current_bytes, 0u);
  // allocations outside a rank are not charged
  auto outside = torch::empty({1000});
  EXPECT_EQ(w.current_bytes(0), 0u);
}

TEST(Memory, OverBudgetIsAnOutOfMemoryErrorShapedLikeCuda) {
  WorldOptions o = world(2);
  o.device_capacity = parse_bytes("1MiB");
  World w(o);
  auto rep = w.run([&](Rank& rk) {
    auto keep = torch::empty({100000}, torch::kFloat);  // 400 KB fits
    if (rk.rank() == 1) auto too_much = torch::empty({200000}, torch::kFloat);  // +800 KB does not
  });
  EXPECT_EQ(rep.ranks[0].status, Status::Ok);
  EXPECT_EQ(rep.ranks[1].status, Status::OutOfMemory);
  const std::string& m = rep.ranks[1].error;
  // PyTorch 2.x's layout (its format_size: 1 MiB exactly is "1024.00 KiB"), the GPU the rank's
  // on its node, then what is simulated
  EXPECT_EQ(m.rfind("CUDA out of memory. Tried to allocate 781.25 KiB. GPU 1 has a total capacity of 1024.00 KiB of "
                    "which 633.38 KiB is free. Including non-PyTorch memory, this process has 390.62 KiB memory in use. "
                    "Of the allocated memory 390.62 KiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but "
                    "unallocated. (simulated: rank 1, peak 390.62 KiB)",
                    0),
            0u)
      << m;
  EXPECT_EQ(rep.ranks[1].peak_bytes, 400000u);
  EXPECT_EQ(parse_bytes("16GiB"), 16ull << 30);
  EXPECT_EQ(parse_bytes("80GB"), 80000000000ull);
  EXPECT_EQ(parse_bytes("512"), 512u);
  EXPECT_THROW(parse_bytes("12 parsecs"), Error);
}

// The presets carry their GPUs' memory as CUDA reports it, the default budget of every door
// (the C ABI's options, the launcher's flags and a launched process's variables share
// parse_settings); "unlimited" (any case) removes it, a size replaces it. Over it, the message
// is PyTorch 2.x's, parseable as a real one (GPU N: the rank's GPU on its node).
TEST(Memory, PresetsCarryTheirGPUsMemoryAndTheMessageIsPyTorchs) {
  const auto gib = [](double g) { return static_cast<uint64_t>(g * 1024.0 * 1024.0 * 1024.0); };
  EXPECT_EQ(topology_preset("8xH100").gpu_memory, gib(79.15));
  EXPECT_EQ(topology_preset("4x8xH100-IB").gpu_memory, gib(79.15));
  EXPECT_EQ(topology_preset("2x8xH100-EFA").gpu_memory, gib(79.15));
  EXPECT_EQ(topology_preset("8xH200").gpu_memory, gib(139.80));
  EXPECT_EQ(topology_preset("2x8xH200-RoCE").gpu_memory, gib(139.80));
  EXPECT_EQ(topology_preset("4x8xH200-IB").gpu_memory, gib(139.80));
  EXPECT_EQ(topology_preset("8xA100").gpu_memory, gib(79.15));
  EXPECT_EQ(topology_preset("2x8xA100-EFA").gpu_memory, gib(79.15));
  EXPECT_EQ(topology_preset("8xA100-40GB").gpu_memory, gib(39.39));
  EXPECT_EQ(topology_preset("2x8xA100-IB").gpu_memory, gib(79.15));
  EXPECT_EQ(topology_preset("8xPCIe").gpu_memory, gib(23.68));
  EXPECT_EQ(topology_preset("4xGH200").gpu_memory, gib(79.15 * 96.0 / 80.0));
  // the 40 GB A100 is the 80 GB one's links and calibration
  EXPECT_DOUBLE_EQ(collective_cost(topology_preset("8xA100-40GB"), CollKind::AllReduce, 1 << 26, 8).seconds,
                   collective_cost(topology_preset("8xA100"), CollKind::AllReduce, 1 << 26, 8).seconds);
  for (const auto& name : topology_preset_names())
    EXPECT_GT(topology_preset(name.rfind("Nx", 0) == 0 ? "2" + name.substr(1) : name).gpu_memory, gib(16)) << name;

  SettingsText t;
  t.topology = "8xH200";
  EXPECT_EQ(parse_settings(t).device_capacity, gib(139.80));
  for (const char* none : {"unlimited", "Unlimited", "UNLIMITED"}) {
    t.device_memory = none;
    EXPECT_EQ(parse_settings(t).device_capacity, 0u) << none;
  }
  t.device_memory = "16GiB";
  EXPECT_EQ(parse_settings(t).device_capacity, 16ull << 30);
  t.device_memory = "0";
  EXPECT_THROW(parse_settings(t), Error);
  t.device_memory = "limitless";
  EXPECT_THROW(parse_settings(t), Error);
  WorldSettings ws;  // the C ABI's defaults: 8xH100, device_memory NULL
  EXPECT_EQ(world_options(ws).device_capacity, gib(79.15));
  ws.device_memory = "unlimited";
  EXPECT_EQ(world_options(ws).device_capacity, 0u);

  // rank 9 of a 2-node world is GPU 1 of its node
  MemoryBudget b(10, 1 << 20, 0, 8);
  std::string why;
  ASSERT_TRUE(b.try_charge(9, 1000, &why));
  EXPECT_FALSE(b.try_charge(9, 2 << 20, &why));
  EXPECT_EQ(why,
            "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 1 has a total capacity of 1024.00 KiB of which "
            "1023.02 KiB is free. Including non-PyTorch memory, this process has 1000 bytes memory in use. Of the "
            "allocated memory 1000 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. "
            "(simulated: rank 9, peak 1000 bytes)");
  // what a handler of real out-of-memory errors reads from one (the numbers and units in turn)
  double asked = 0, total = 0, free = 0;
  int gpu = -1;
  char u1[8] = {0}, u2[8] = {0}, u3[8] = {0};
  ASSERT_EQ(std::sscanf(why.c_str(),
                        "CUDA out of memory. Tried to allocate %lf %7[a-zA-Z]. GPU %d has a total capacity of %lf %7s "
                        "of which %lf %7s is free.",
                        &asked, u1, &gpu, &total, u2, &free, u3),
            7)
      << why;
  EXPECT_EQ(std::string(u1) + std::to_string(gpu) + u2 + u3, "MiB1KiBKiB");
  EXPECT_DOUBLE_EQ(asked, 2.0);
  EXPECT_DOUBLE_EQ(total, 1024.0);
  EXPECT_DOUBLE_EQ(free, 1023.02);
}

// ---------------------------------------------------------------------------------------
// Cost model and trace

TEST(CostModel, PresetsAndTheTrace) {
  for (const char* name : {"8xH100", "8xA100", "8xPCIe", "4x8xH100-IB"}) {
    Topology t = topology_preset(name);
    auto small = collective_cost(t, CollKind::AllReduce, 1 << 20, 8);
    auto large = collective_cost(t, CollKind::AllReduce, 1ull << 33, 8);
    EXPECT_GT(large.seconds, small.seconds) << name;
    double busbw = (1ull << 33) / large.seconds * busbw_factor(CollKind::AllReduce, 8);
    const double peak = peak_busbw(t, CollKind::AllReduce, 8);
    EXPECT_GT(busbw, 0.8 * peak) << name;  // large messages approach the algorithm's bus bandwidth
    EXPECT_LE(busbw, peak * 1.0000001) << name;
  }
  EXPECT_THROW(topology_preset("8xTPU"), Error);
  EXPECT_NEAR(busbw_factor(CollKind::AllReduce, 8), 1.75, 1e-12);
  EXPECT_NEAR(busbw_factor(CollKind::AllGather, 8), 0.875, 1e-12);

  WorldOptions o = world(3);
  o.record_trace = true;
  World w(o);
  auto rep = w.run([&](Rank& rk) {
    std::vector<float> x(1 << 16, 1.f);
    rk.comm().charge_compute(0.001 * (rk.rank() + 1), "forward");
    rk.comm().all_reduce(x.data(), x.data(), x.size(), DataType::Float32, RedOp::Sum)->wait();
  });
  ASSERT_TRUE(rep.ok());
  auto j = nlohmann::json::parse(w.trace_json());
  int collectives = 0, waits = 0, computes = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["name"] == "all_reduce") ++collectives;
    if (e["name"] == "wait") ++waits;
    if (e["name"] == "forward") ++computes;
  }
  EXPECT_EQ(collectives, 3);
  EXPECT_EQ(computes, 3);
  EXPECT_EQ(waits, 2);  // ranks 0 and 1 wait for rank 2's longer forward
  const double ar = collective_cost(w.topology(), CollKind::AllReduce, (1 << 16) * 4, 3).seconds;
  EXPECT_NEAR(rep.predicted_seconds, 0.003 + ar, 1e-12);
}

TEST(Scale, TwoHundredFiftySixRanksFinishQuickly) {
  auto start = std::chrono::steady_clock::now();
  World w(world(256, 30.0));
  auto rep = w.run([&](Rank& rk) {
    std::vector<float> x(1024, static_cast<float>(rk.rank()));
    for (int i = 0; i < 5; ++i) rk.comm().all_reduce(x.data(), x.data(), x.size(), DataType::Float32, RedOp::Avg)->wait();
    std::vector<float> g(256);
    float mine = static_cast<float>(rk.rank());
    rk.comm().all_gather(&mine, g.data(), 1, DataType::Float32)->wait();
    rk.comm().barrier();
    if (g[255] != 255.f) throw std::runtime_error("bad gather");
  });
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(rep.ok()) << rep.first_error();
  EXPECT_LT(secs, 60.0);
  RecordProperty("seconds", std::to_string(secs));
}


TEST(Local, OneRankBackendFollowsTheSameRules) {
  auto c = comm::make_local_communicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  std::vector<float> a = {1, 2, 3}, b(3);
  c->all_reduce(a.data(), b.data(), 3, DataType::Float32, RedOp::PreMulSum, {2.0})->wait();
  EXPECT_EQ(b, (std::vector<float>{2, 4, 6}));
  c->all_gather(a.data(), b.data(), 3, DataType::Float32)->wait();
  EXPECT_EQ(b, a);
  EXPECT_THROW(c->broadcast(a.data(), b.data(), 3, DataType::Float32, 1), CommError);
  // send/recv to oneself only inside a group, where they pair up
  c->group_start();
  c->send(a.data(), 3, DataType::Float32, 0);
  std::vector<float> got(3);
  c->recv(got.data(), 3, DataType::Float32, 0);
  c->group_end();
  EXPECT_EQ(got, a);
  try {
    c->send(a.data(), 3, DataType::Float32, 0);
    ADD_FAILURE() << "a lone send to oneself must fail";
  } catch (const CommError& e) {
    EXPECT_EQ(e.result(), Result::InvalidUsage);
  }
  try {
    c->group_end();
    ADD_FAILURE();
  } catch (const CommError& e) {
    EXPECT_EQ(e.result(), Result::InvalidUsage);
  }
  c->barrier();
}


// Simulated ranks train on the CPU, where the simulated GPUs' memory is, also on a machine
// with CUDA: auto is the CPU there, and CUDA is refused with the reason (a GPU run found
// ranks placing their tensors on the real GPU, which the simulator's collectives cannot copy).
TEST(Sim, RanksTrainOnTheCpuAndRefuseCuda) {
  World w(world(2));
  std::vector<std::string> devices(2), refusals(2);
  std::vector<int> statuses(2, 0);
  const auto rep = w.run([&](Rank& rk) {
    std::shared_ptr<comm::Communicator> c(&rk.comm(), [](comm::Communicator*) {});
    Options o;  // device auto
    Accelerator acc(o, c);
    devices[static_cast<size_t>(rk.rank())] = acc.device().str();
    o.device = DeviceKind::CUDA;
    try {
      Accelerator cuda(o, c);
    } catch (const Error& e) {
      statuses[static_cast<size_t>(rk.rank())] = static_cast<int>(e.status());
      refusals[static_cast<size_t>(rk.rank())] = e.what();
    }
  });
  ASSERT_TRUE(rep.ok()) << rep.first_error();
  for (int r : {0, 1}) {
    EXPECT_EQ(devices[static_cast<size_t>(r)], "cpu");
    EXPECT_EQ(statuses[static_cast<size_t>(r)], static_cast<int>(Status::Unsupported));
    EXPECT_NE(refusals[static_cast<size_t>(r)].find("device CUDA under the simulator: simulated ranks run on the CPU"),
              std::string::npos)
        << refusals[static_cast<size_t>(r)];
  }
}

// ---------------------------------------------------------------------------------------
// The replay (sim/replay.h): ranks that are not threads, with the World's timing rules.

// A data-parallel step as a World's ranks run it: compute, each bucket's all-reduce posted
// as its gradients are ready, a wait for all; rank `slow` computes `factor` times as long.
RunReport threaded_ddp(const std::string& topology, int n, const std::vector<uint64_t>& buckets, double fwd, double bwd,
                       int slow, double factor) {
  WorldOptions o = world(n, 60.0);
  o.topology = topology;
  World w(o);
  return w.run([&](Rank& rk) {
    const double f = rk.rank() == slow ? factor : 1.0;
    std::vector<std::vector<float>> bufs;
    for (uint64_t b : buckets) bufs.emplace_back(b / 4, 1.0f);
    std::vector<std::shared_ptr<comm::Work>> works;
    rk.comm().charge_compute(fwd * f, "forward");
    for (auto& b : bufs) {
      rk.comm().charge_compute(bwd / static_cast<double>(bufs.size()) * f, "backward");
      works.push_back(rk.comm().all_reduce(b.data(), b.data(), b.size(), DataType::Float32, RedOp::Sum));
    }
    for (auto& x : works) x->wait();
  });
}

ReplayProgram replay_ddp(const std::vector<uint64_t>& buckets, double fwd, double bwd) {
  ReplayProgram p;
  p.name = "ddp";
  p.compute(fwd);
  for (uint64_t b : buckets) {
    p.compute(bwd / static_cast<double>(buckets.size()));
    p.post(CollKind::AllReduce, b);
  }
  p.wait_all();
  return p;
}

TEST(Replay, PredictsWhatTheThreadedWorldPredicts) {
  // sizes that pick different algorithms (LL tree, NVLSTree), compute that hides some of it,
  // and a straggler
  const std::vector<uint64_t> buckets = {64 << 10, 1 << 20, 4 << 20, 256 << 10};
  for (int slow : {-1, 5}) {
    const RunReport threads = threaded_ddp("2x8xH100-IB", 16, buckets, 2e-4, 4e-4, slow, 3.0);
    ASSERT_TRUE(threads.ok()) << threads.first_error();
    ReplayOptions o;
    o.topology = "2x8xH100-IB";
    o.world_size = 16;
    o.programs.push_back(replay_ddp(buckets, 2e-4, 4e-4));
    if (slow >= 0) o.slowdown.push_back({slow, 3.0});
    const ReplayReport rep = replay(o);
    ASSERT_TRUE(rep.ok) << rep.error;
    EXPECT_NEAR(rep.predicted_seconds, threads.predicted_seconds, 1e-12) << "straggler " << slow;
    EXPECT_EQ(rep.collectives, buckets.size());
    EXPECT_EQ(rep.events, 16u * (2 + 2 * buckets.size()));
    // every rank's own end, as the World reports it
    double fastest = threads.ranks[0].virtual_seconds;
    for (const auto& r : threads.ranks) fastest = std::min(fastest, r.virtual_seconds);
    EXPECT_NEAR(rep.fastest_seconds, fastest, 1e-12);
    if (slow >= 0) {
      ReplayOptions even = o;
      even.slowdown.clear();
      EXPECT_GT(rep.predicted_seconds, replay(even).predicted_seconds);
    }
  }
}

TEST(Replay, AHundredThousandRanksInOneThread) {
  // 12,500 nodes of 8 H100: a data-parallel step of 8 buckets, and ZeRO-3 over 4 layers
  const Topology topo = topology_preset("12500x8xH100-IB");
  for (const char* strategy : {"ddp", "zero3"}) {
    ReplayOptions o;
    o.topology = "12500x8xH100-IB";
    o.world_size = 100000;
    o.programs.push_back(step_program(topo, strategy, 1e8, 4096, 4, 50u << 20));
    const ReplayReport rep = replay(o);
    ASSERT_TRUE(rep.ok) << rep.error;
    EXPECT_EQ(rep.events, 100000u * o.programs[0].steps.size()) << strategy;
    EXPECT_EQ(rep.collectives, o.programs[0].posts()) << strategy;
    EXPECT_DOUBLE_EQ(rep.fastest_seconds, rep.predicted_seconds) << strategy;  // the ranks are alike
    const StepEstimate est = estimate_step(topo, strategy, 1e8, 4096, 100000, 4, 50u << 20);
    EXPECT_GE(rep.predicted_seconds, est.compute) << strategy;
    EXPECT_GE(rep.predicted_seconds, rep.comm_seconds) << strategy;
  }
}

TEST(Replay, MismatchedAndMissingCallsNameTheRanks) {
  ReplayProgram good = replay_ddp({1 << 20, 1 << 20}, 1e-4, 1e-4);
  ReplayProgram wider = replay_ddp({1 << 20, 2 << 20}, 1e-4, 1e-4);
  ReplayProgram skips = replay_ddp({1 << 20}, 1e-4, 1e-4);
  ReplayOptions o;
  o.topology = "1000x8xH100-IB";
  o.world_size = 8000;
  o.programs = {good, wider, skips};
  o.program_of.assign(8000, 0);
  o.program_of[4321] = 1;
  ReplayReport rep = replay(o);
  EXPECT_FALSE(rep.ok);
  EXPECT_EQ(rep.status, Status::InvalidState);
  EXPECT_NE(rep.error.find("mismatched collectives: rank 0's call 1 is all_reduce of 1.00 MiB float32 sum, rank "
                           "4321's is all_reduce of 2.00 MiB float32 sum"),
            std::string::npos)
      << rep.error;
  o.program_of[4321] = 2;
  rep = replay(o);
  EXPECT_FALSE(rep.ok);
  EXPECT_NE(rep.error.find("collective 1 (all_reduce of 1.00 MiB float32 sum) was posted by 7999 of 8000 ranks"),
            std::string::npos) << rep.error;
  EXPECT_NE(rep.error.find("rank 4321 (ended its program after 1 calls)"), std::string::npos) << rep.error;
  // what the options get wrong is an error before anything runs
  ReplayProgram early;
  early.steps.push_back({});
  early.steps[0].kind = ReplayStep::Wait;
  early.steps[0].post = 0;
  o.programs = {early};
  o.program_of.clear();
  EXPECT_THROW(replay(o), Error);
  o.programs = {good};
  o.world_size = 8001;
  try {
    replay(o);
    ADD_FAILURE() << "8001 ranks on 8000 GPUs";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'1001x8xH100-IB'"), std::string::npos) << e.what();
  }
}

// A World's recording (WorldOptions::record_program) replays to the World's own time: every
// kind of collective, asynchronous ones waited for later, a barrier, and ranks that differ
// (rank 2 computes more); through its JSON and back. Ranks that differ replay only at their
// size; ranks alike replay on any; send/recv is named as not replayed.
TEST(Replay, ARecordedWorldReplaysToItsOwnTime) {
  for (bool alike : {false, true}) {
    WorldOptions o = world(4);
    o.topology = "8xA100";
    o.record_program = true;
    World w(o);
    auto rep = w.run([&](Rank& rk) {
      auto& c = rk.comm();
      std::vector<float> a(1 << 16, 1.f), b(1 << 18, 0.f);
      c.charge_compute(alike || rk.rank() != 2 ? 1e-4 : 3e-4, "forward");
      auto x = c.all_reduce(a.data(), a.data(), a.size(), DataType::Float32, RedOp::Sum);
      c.charge_compute(2e-4, "backward");
      auto y = c.all_reduce(b.data(), b.data(), b.size(), DataType::BFloat16, RedOp::Avg);
      x->wait();
      y->wait();
      c.reduce_scatter(b.data(), a.data(), b.size() / 4, DataType::Float32, RedOp::Sum)->wait();
      c.all_gather(a.data(), b.data(), a.size(), DataType::Float32)->wait();
      c.broadcast(a.data(), a.data(), 100, DataType::Float32, 1)->wait();
      c.reduce(a.data(), b.data(), 1000, DataType::Float32, RedOp::Max, 3)->wait();
      c.barrier();
      c.charge_compute(5e-5, "step");
    });
    ASSERT_TRUE(rep.ok()) << rep.first_error();
    const ReplayRecording rec = parse_recording(recording_json(w.recording()));
    EXPECT_EQ(rec.world_size, 4);
    EXPECT_EQ(rec.topology, "8xA100");
    EXPECT_DOUBLE_EQ(rec.predicted_seconds, rep.predicted_seconds);
    EXPECT_EQ(rec.programs.size(), alike ? 1u : 2u);
    EXPECT_EQ(rec.programs[0].posts(), 7u);
    EXPECT_TRUE(rec.approximate.empty()) << rec.approximate;
    const ReplayReport again = replay(replay_options(rec, 4, rec.topology));
    ASSERT_TRUE(again.ok) << again.error;
    EXPECT_NEAR(again.predicted_seconds, rep.predicted_seconds, 1e-12 * rep.predicted_seconds);
    if (alike) {
      const ReplayReport big = replay(replay_options(rec, 4096, "512x8xH100-IB"));
      ASSERT_TRUE(big.ok) << big.error;
      EXPECT_EQ(big.collectives, 7u);
    } else {
      EXPECT_THROW(replay_options(rec, 8, "8xA100"), Error);
    }
  }
  // send/recv is recorded as not replayed
  WorldOptions o = world(2);
  o.record_program = true;
  World w(o);
  auto rep = w.run([&](Rank& rk) {
    std::vector<float> v(4, 1.f);
    auto& c = rk.comm();
    if (rk.rank() == 0)
      c.send(v.data(), 4, DataType::Float32, 1)->wait();
    else
      c.recv(v.data(), 4, DataType::Float32, 0)->wait();
  });
  ASSERT_TRUE(rep.ok()) << rep.first_error();
  EXPECT_NE(w.recording().approximate.find("send/recv"), std::string::npos);
  EXPECT_THROW(parse_recording("{\"accel_sim_recording\":1,\"world_size\":2}"), Error);
  EXPECT_THROW(parse_recording("not json"), Error);
}

// WorldOptions::algorithms (NCCL_ALGO's syntax): the cost model picks among the allowed
// algorithms and the data is reduced in the chosen one's order.
TEST(Algorithms, ForcingTheRingChangesTheTimeAndTheRounding) {
  const size_t count = 8u << 20;  // 16 MiB of bf16 on 8 H100: NVLS unless forced
  std::vector<Bytes> ins(8, Bytes(count * 2));
  for (int r = 0; r < 8; ++r)
    for (size_t i = 0; i < count; ++i) put_random(DataType::BFloat16, ins[r].data(), i, r);
  std::vector<const void*> ptrs;
  for (auto& b : ins) ptrs.push_back(b.data());
  auto run_with = [&](const std::string& algos, Bytes* out0, std::string* algo) {
    WorldOptions o = world(8, 60.0);
    o.algorithms = algos;
    o.record_trace = true;
    World w(o);
    std::vector<Bytes> out(8, Bytes(count * 2));
    auto rep = w.run([&](Rank& rk) {
      rk.comm().all_reduce(ins[rk.rank()].data(), out[rk.rank()].data(), count, DataType::BFloat16, RedOp::Sum)->wait();
    });
    EXPECT_TRUE(rep.ok()) << rep.first_error();
    const auto trace = nlohmann::json::parse(w.trace_json());
    for (const auto& e : trace["traceEvents"])
      if (e.value("name", "") == "all_reduce") *algo = e["args"].value("algorithm", "");
    *out0 = out[0];
    return rep.predicted_seconds;
  };
  Bytes nvls_out, ring_out;
  std::string nvls_algo, ring_algo;
  const double t_nvls = run_with("", &nvls_out, &nvls_algo);
  const double t_ring = run_with("Ring", &ring_out, &ring_algo);
  EXPECT_EQ(nvls_algo, "nvls");
  EXPECT_EQ(ring_algo, "ring");
  EXPECT_LT(t_nvls, t_ring);
  comm::NcclOrder ring;
  ring.count = count;
  comm::NcclOrder nvls;
  nvls.algo = comm::NcclAlgo::Nvls;
  Bytes want_ring(count * 2), want_nvls(count * 2);
  comm::reduce_nccl(want_ring.data(), ptrs.data(), 8, 0, count, DataType::BFloat16, RedOp::Sum, 0, ring);
  comm::reduce_nccl(want_nvls.data(), ptrs.data(), 8, 0, count, DataType::BFloat16, RedOp::Sum, 0, nvls);
  EXPECT_TRUE(ring_out == want_ring);
  EXPECT_TRUE(nvls_out == want_nvls);
  EXPECT_FALSE(ring_out == nvls_out);  // the two orders round differently
  // "^NVLS" excludes it the same way
  Bytes excl_out;
  std::string excl_algo;
  run_with("^nvls", &excl_out, &excl_algo);
  EXPECT_EQ(excl_algo, "ring");
  // a call the allowed algorithms leave nothing for fails on every rank, naming why
  WorldOptions o = world(2);
  o.algorithms = "NVLS";
  World w(o);
  auto rep = w.run([&](Rank& rk) {
    std::vector<float> x(8, 1.f), y(16);
    rk.comm().all_gather(x.data(), y.data(), 8, DataType::Float32)->wait();
  });
  ASSERT_FALSE(rep.ok());
  for (const auto& r : rep.ranks)
    EXPECT_NE(r.error.find("no algorithm for all_gather of 64 bytes over 2 ranks on 8xH100: the algorithms allowed "
                           "('NVLS') exclude the cost model's (ring)"),
              std::string::npos)
        << r.error;
  WorldOptions bad = world(2);
  bad.algorithms = "Treee";
  try {
    World b(bad);
    ADD_FAILURE() << "an unknown algorithm was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown algorithm 'Treee'"), std::string::npos) << e.what();
    EXPECT_EQ(e.status(), Status::InvalidArgument);
  }
}

}  // namespace
}  // namespace accel::sim
