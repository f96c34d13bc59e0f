// Tests of the simulator: every collective x dtype x op against a naive reference, in and
// out of place, over several world sizes; send/recv and groups; every error case; mismatch
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
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "comm/kernels.h"
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
// A naive reference: element by element, ranks in order, with independent conversions
// (c10::Half / c10::BFloat16) and the documented accumulation types.

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

template <class T, class Acc>
void ref_float(void* out, const std::vector<const void*>& in, size_t i, RedOp op, double premul) {
  const int n = static_cast<int>(in.size());
  Acc acc = static_cast<Acc>(static_cast<const T*>(in[0])[i]);
  if (op == RedOp::PreMulSum) acc = acc * static_cast<Acc>(premul);
  for (int r = 1; r < n; ++r) {
    Acc x = static_cast<Acc>(static_cast<const T*>(in[r])[i]);
    switch (op) {
      case RedOp::Sum: case RedOp::Avg: acc = acc + x; break;
      case RedOp::PreMulSum: acc = acc + x * static_cast<Acc>(premul); break;
      case RedOp::Prod: acc = acc * x; break;
      case RedOp::Max: acc = (std::isnan(x) || x > acc) ? x : acc; break;
      case RedOp::Min: acc = (std::isnan(x) || x < acc) ? x : acc; break;
    }
  }
  if (op == RedOp::Avg) acc = acc / static_cast<Acc>(n);
  static_cast<T*>(out)[i] = static_cast<T>(acc);
}

void reference(DataType t, void* out, const std::vector<const void*>& in, size_t count, RedOp op, double premul) {
  for (size_t i = 0; i < count; ++i) {
    switch (t) {
      case DataType::Int8: ref_int<int8_t>(out, in, i, op, premul); break;
      case DataType::Uint8: ref_int<uint8_t>(out, in, i, op, premul); break;
      case DataType::Int32: ref_int<int32_t>(out, in, i, op, premul); break;
      case DataType::Uint32: ref_int<uint32_t>(out, in, i, op, premul); break;
      case DataType::Int64: ref_int<int64_t>(out, in, i, op, premul); break;
      case DataType::Uint64: ref_int<uint64_t>(out, in, i, op, premul); break;
      case DataType::Float16: ref_float<c10::Half, float>(out, in, i, op, premul); break;
      case DataType::BFloat16: ref_float<c10::BFloat16, float>(out, in, i, op, premul); break;
      case DataType::Float32: ref_float<float, float>(out, in, i, op, premul); break;
      case DataType::Float64: ref_float<double, double>(out, in, i, op, premul); break;
    }
  }
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
          reference(t, want.data(), ptrs, count * n, op, premul);
          if (std::memcmp(out, want.data(), want.size()) != 0)
            note(std::string("all_reduce ") + comm::dtype_name(t) + " " + comm::op_name(op) + " rank " + std::to_string(r));
        }
        // reduce_scatter: recv == send + rank * recvcount in place
        {
          Bytes send = ins[r], recv(count * es);
          void* out = in_place ? send.data() + r * count * es : recv.data();
          c.reduce_scatter(send.data(), out, count, t, op, {premul})->wait();
          Bytes full(count * n * es);
          reference(t, full.data(), ptrs, count * n, op, premul);
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
            reference(t, want.data(), ptrs, count * n, op, premul);
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
  EXPECT_EQ(topology_preset("8xA100").gpu_memory, gib(79.15));
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

}  // namespace
}  // namespace accel::sim
