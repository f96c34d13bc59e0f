// Backends of real processes: Gloo (comm/gloo/, c10d's ProcessGroupGloo behind the
// Communicator) and the nccl backend on the simulated NCCL (ACCEL_BACKEND=sim:
// comm/nccl/ loaded with libaccel-nccl-sim.so, sim/nccl/).
//
// Collectives: ranks as threads of this process meeting through an in-process store (every
// operation, type and op; in-place forms; groups; the rendezvous' errors; timeouts).
// Training: real processes. This binary re-runs itself as the workers with torchrun's
// variables set by hand (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: no launcher), each
// joining its world through world::join_world as accel_init does. A worker writes its status
// and its final weights into a directory; the test compares them with one process trained
// on the global batch.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "base/text.h"
#include "runtime/world.h"
#include "comm/kernels.h"
#include "comm/store.h"
#include "runtime/runtime.h"
#include "sim/world.h"

namespace accel {
namespace {

using namespace std::chrono_literals;
using comm::CommError;
using comm::DataType;
using comm::RedOp;
using comm::Result;

bool has_gloo() { return world::backend_names().find("gloo") != std::string::npos; }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---------------------------------------------------------------------------------------
// Ranks as threads

// Runs fn(rank, communicator) on n threads that meet through one in-process store; returns
// each rank's error message ("" when it succeeded).
std::vector<std::string> on_threads(int n, const std::function<void(int, comm::Communicator&)>& fn,
                                    std::chrono::milliseconds timeout = 20s) {
  auto store = comm::make_memory_store(timeout);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        comm::GroupConfig c;
        c.backend = "gloo";
        c.rank = r;
        c.world_size = n;
        c.store = store;
        c.timeout = timeout;
        auto g = world::make_process_group(c);
        fn(r, *g);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  return errors;
}

void expect_ok(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Sets an environment variable for a scope (the group's transport, the guard), restoring it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The collectives' tests run on both transports of the gloo backend: shared memory between
// the processes of one machine (comm/shm.h, the default there) and Gloo's own (TCP).
class GlooTransports : public ::testing::TestWithParam<bool> {
 protected:
  bool shm() const { return GetParam(); }
  ScopedEnv env_{"ACCEL_GLOO_SHM", GetParam() ? "1" : "0"};
};
INSTANTIATE_TEST_SUITE_P(Gloo, GlooTransports, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "SharedMemory" : "Tcp"; });

template <class T>
std::vector<T> iota_for(int rank, size_t count, int scale) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<T>((static_cast<int>(i) % 7 + 1) * (rank + 1) * scale);
  return v;
}

// Every reduction on every type, against the kernels' rank-order reduction of the same inputs
// (small integers, so every order of summation gives the same values).
TEST_P(GlooTransports, AllReduceEveryTypeAndOp) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  const int n = 3;
  const size_t count = 1000;
  expect_ok(on_threads(n, [&](int r, comm::Communicator& c) {
    EXPECT_EQ(c.backend(), "gloo");
    EXPECT_EQ(c.shared_memory(), shm());
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.size(), n);
    for (int t = 0; t < comm::kNumDataTypes; ++t)
      for (int o = 0; o < comm::kNumRedOps; ++o) {
        const auto dt = static_cast<DataType>(t);
        const auto op = static_cast<RedOp>(o);
        const size_t es = comm::dtype_size(dt);
        // each rank's input as bytes, in the type, for every rank (to compute the expected)
        std::vector<std::vector<uint8_t>> in(n, std::vector<uint8_t>(count * es));
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < count; ++i) {
            const double v = static_cast<double>((i % 5 + 1) * (q + 1)) * (op == RedOp::Prod ? 1 : 1);
            std::vector<const void*> none;
            switch (dt) {
              case DataType::Int8: reinterpret_cast<int8_t*>(in[q].data())[i] = static_cast<int8_t>(v); break;
              case DataType::Uint8: in[q][i] = static_cast<uint8_t>(v); break;
              case DataType::Int32: reinterpret_cast<int32_t*>(in[q].data())[i] = static_cast<int32_t>(v); break;
              case DataType::Uint32: reinterpret_cast<uint32_t*>(in[q].data())[i] = 0x80000000u + static_cast<uint32_t>(v); break;
              case DataType::Int64: reinterpret_cast<int64_t*>(in[q].data())[i] = -static_cast<int64_t>(v); break;
              case DataType::Uint64: reinterpret_cast<uint64_t*>(in[q].data())[i] = (1ull << 63) + static_cast<uint64_t>(v) * (q % 2 ? 1 : 3); break;
              case DataType::Float16: reinterpret_cast<uint16_t*>(in[q].data())[i] = comm::float_to_half(static_cast<float>(v)); break;
              case DataType::BFloat16: reinterpret_cast<uint16_t*>(in[q].data())[i] = comm::float_to_bf16(static_cast<float>(v)); break;
              case DataType::Float32: reinterpret_cast<float*>(in[q].data())[i] = static_cast<float>(v); break;
              case DataType::Float64: reinterpret_cast<double*>(in[q].data())[i] = v; break;
            }
          }
        const double premul = 2.0;
        std::vector<const void*> srcs;
        for (int q = 0; q < n; ++q) srcs.push_back(in[q].data());
        std::vector<uint8_t> want(count * es);
        comm::reduce(want.data(), srcs.data(), n, 0, count, dt, op, premul);
        std::vector<uint8_t> got(count * es, 0xab);
        c.all_reduce(in[r].data(), got.data(), count, dt, op, comm::PreMul{premul})->wait();
        EXPECT_EQ(got, want) << comm::dtype_name(dt) << " " << comm::op_name(op) << " rank " << r;
        // in place
        std::vector<uint8_t> buf = in[r];
        c.all_reduce(buf.data(), buf.data(), count, dt, op, comm::PreMul{premul})->wait();
        EXPECT_EQ(buf, want) << "in place " << comm::dtype_name(dt) << " " << comm::op_name(op);
      }
  }));
}

TEST_P(GlooTransports, ReduceScatterAllGatherBroadcastReduce) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  const int n = 4;
  const size_t per = 257;
  expect_ok(on_threads(n, [&](int r, comm::Communicator& c) {
    EXPECT_EQ(c.shared_memory(), shm());
    // reduce_scatter, out of place and in place (recv == send + rank * recvcount)
    std::vector<float> send = iota_for<float>(r, per * n, 1), recv(per, -1.f);
    c.reduce_scatter(send.data(), recv.data(), per, DataType::Float32, RedOp::Sum)->wait();
    for (size_t i = 0; i < per; ++i) {
      const size_t g = per * static_cast<size_t>(r) + i;
      EXPECT_EQ(recv[i], static_cast<float>((g % 7 + 1) * (1 + 2 + 3 + 4))) << i;
    }
    std::vector<float> inplace = iota_for<float>(r, per * n, 1);
    c.reduce_scatter(inplace.data(), inplace.data() + per * r, per, DataType::Float32, RedOp::Avg)->wait();
    for (size_t i = 0; i < per; ++i) {
      const size_t g = per * static_cast<size_t>(r) + i;
      EXPECT_EQ(inplace[per * r + i], static_cast<float>((g % 7 + 1) * 10) / 4.f);
    }
    // all_gather, out of place and in place (send == recv + rank * sendcount)
    std::vector<int64_t> mine(per, r * 100 + 7), all(per * n, -1);
    c.all_gather(mine.data(), all.data(), per, DataType::Int64)->wait();
    for (int q = 0; q < n; ++q) EXPECT_EQ(all[per * q + 3], q * 100 + 7);
    std::vector<int64_t> all2(per * n, -1);
    for (size_t i = 0; i < per; ++i) all2[per * r + i] = r * 1000 + static_cast<int64_t>(i);
    c.all_gather(all2.data() + per * r, all2.data(), per, DataType::Int64)->wait();
    for (int q = 0; q < n; ++q) EXPECT_EQ(all2[per * q + 5], q * 1000 + 5);
    // broadcast from rank 2 (send != recv on the root)
    std::vector<uint16_t> bsend(per, static_cast<uint16_t>(r + 40)), brecv(per, 0);
    c.broadcast(bsend.data(), brecv.data(), per, DataType::BFloat16, 2)->wait();
    EXPECT_EQ(brecv[per - 1], 42);
    // reduce to rank 1: the non-roots' send stays untouched
    std::vector<double> rs(per, r + 1.0), rr(per, 0.0);
    c.reduce(rs.data(), rr.data(), per, DataType::Float64, RedOp::Max, 1)->wait();
    EXPECT_EQ(rs[0], r + 1.0);
    if (r == 1) {
      EXPECT_EQ(rr[per / 2], 4.0);
    }
    std::vector<uint16_t> hs(per, comm::float_to_bf16(static_cast<float>(r))), hr(per, 0);
    c.reduce(hs.data(), hr.data(), per, DataType::BFloat16, RedOp::Avg, 3)->wait();
    if (r == 3) {
      EXPECT_EQ(comm::bf16_to_float(hr[0]), 1.5f);
    }
    c.barrier();
  }));
}

// send/recv around a ring inside a group, asynchronous works completed in order.
TEST_P(GlooTransports, SendRecvInGroupsAndAsyncWork) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  const int n = 4;
  expect_ok(on_threads(n, [&](int r, comm::Communicator& c) {
    EXPECT_EQ(c.shared_memory(), shm());
    std::vector<int32_t> out(100, r), in(100, -1);
    c.group_start();
    auto s = c.send(out.data(), out.size(), DataType::Int32, (r + 1) % n);
    auto v = c.recv(in.data(), in.size(), DataType::Int32, (r + n - 1) % n);
    EXPECT_THROW(v->wait(), CommError);  // nothing runs before group_end
    c.group_end();
    s->wait();
    v->wait();
    EXPECT_EQ(in[99], (r + n - 1) % n);
    // several in flight, waited in order
    std::vector<std::vector<float>> bufs(5, std::vector<float>(4096, static_cast<float>(r)));
    std::vector<std::shared_ptr<comm::Work>> works;
    for (auto& b : bufs) works.push_back(c.all_reduce(b.data(), b.data(), b.size(), DataType::Float32, RedOp::Sum));
    for (auto& w : works) w->wait();
    for (auto& b : bufs) EXPECT_EQ(b[4095], 6.f);
    EXPECT_THROW(c.group_end(), CommError);
  }));
}

// Work::test() never blocks, composed operations (reduce-scatter) included.
TEST_P(GlooTransports, TestDoesNotBlock) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  expect_ok(on_threads(2, [&](int r, comm::Communicator& c) {
    std::vector<float> send(64, static_cast<float>(r + 1)), recv(32, 0.f);
    if (r == 1) std::this_thread::sleep_for(500ms);  // the peer comes late
    auto w = c.reduce_scatter(send.data(), recv.data(), 32, DataType::Float32, RedOp::Sum);
    if (r == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_FALSE(w->test());
      EXPECT_LT(std::chrono::steady_clock::now() - t0, 250ms) << "test() waited for the peer";
    }
    while (!w->test()) std::this_thread::sleep_for(1ms);
    EXPECT_EQ(recv[31], 3.f);
  }));
}

// A rank that never comes to the collective: the others fail with a timeout, not a hang.
TEST_P(GlooTransports, MissingPeerTimesOut) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  const auto t0 = std::chrono::steady_clock::now();
  auto errors = on_threads(
      2,
      [&](int r, comm::Communicator& c) {
        if (r == 1) {  // skips the all-reduce, alive beyond the timeout
          std::this_thread::sleep_for(4s);
          return;
        }
        std::vector<float> x(16, 1.f);
        try {
          c.all_reduce(x.data(), x.data(), x.size(), DataType::Float32, RedOp::Sum)->wait();
          ADD_FAILURE() << "an all-reduce without its peer completed";
        } catch (const CommError& e) {
          EXPECT_EQ(e.result(), Result::Timeout) << e.what();
          // the call, and where the other process is (comm/guard.h)
          EXPECT_TRUE(contains(e.what(), "all_reduce #1(count=16, float32, sum)") || contains(e.what(), "all_reduce of 16 float32"))
              << e.what();
          EXPECT_TRUE(contains(e.what(), "the other processes: rank 1 (pid ") && contains(e.what(), ") has made no call yet"))
              << e.what();
        }
      },
      2s);
  expect_ok(errors);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 15s);
}

// Collectives larger than a process's slot of the shared segment (4 MiB) go chunk by chunk:
// counts that are not multiples of a chunk, of the processes or of a cache line, in place
// and not, every collective, on 3 processes (parts of a chunk that do not divide evenly).
TEST(GlooThreads, SharedMemoryChunksLargeCollectives) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  ScopedEnv shm("ACCEL_GLOO_SHM", "1");
  const int n = 3;
  const size_t big = (5u << 20) / 2 + 13;  // floats: 10 MiB and a little, three chunks
  expect_ok(on_threads(n, [&](int r, comm::Communicator& c) {
    ASSERT_TRUE(c.shared_memory());
    auto value = [](int q, size_t i) { return static_cast<float>((i % 11) * (q + 1)); };
    std::vector<float> x(big), y(big, -1.f);
    for (size_t i = 0; i < big; ++i) x[i] = value(r, i);
    c.all_reduce(x.data(), y.data(), big, DataType::Float32, RedOp::Sum)->wait();
    c.all_reduce(x.data(), x.data(), big, DataType::Float32, RedOp::Max)->wait();
    for (size_t i = 0; i < big; i += 997) {
      ASSERT_EQ(y[i], static_cast<float>((i % 11) * 6)) << i;
      ASSERT_EQ(x[i], static_cast<float>((i % 11) * 3)) << i;
    }
    EXPECT_EQ(y[big - 1], static_cast<float>(((big - 1) % 11) * 6));
    // reduce_scatter: 700,001 floats each (a chunk holds 349,525 of each process's)
    const size_t per = 700001;
    std::vector<float> rs(per * n), mine(per, -1.f);
    for (size_t i = 0; i < rs.size(); ++i) rs[i] = value(r, i);
    c.reduce_scatter(rs.data(), mine.data(), per, DataType::Float32, RedOp::Avg)->wait();
    for (size_t i = 0; i < per; i += 1009) ASSERT_EQ(mine[i], value(1, per * r + i)) << i;  // (1+2+3)/3 = 2
    EXPECT_EQ(mine[per - 1], value(1, per * r + per - 1));
    c.reduce_scatter(rs.data(), rs.data() + per * r, per, DataType::Float32, RedOp::Sum)->wait();
    for (size_t i = 0; i < per; i += 1009) ASSERT_EQ(rs[per * r + i], static_cast<float>(((per * r + i) % 11) * 6)) << i;
    // all_gather of 1.5 M int32 each, in place
    const size_t each = 1500007;
    std::vector<int32_t> all(each * n, -1);
    for (size_t i = 0; i < each; ++i) all[each * r + i] = static_cast<int32_t>(r * 10000000 + i);
    c.all_gather(all.data() + each * r, all.data(), each, DataType::Int32)->wait();
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < each; i += 4999) ASSERT_EQ(all[each * q + i], static_cast<int32_t>(q * 10000000 + i));
    // broadcast of 9 MiB of bytes from rank 1, reduce of bf16 to rank 2
    std::vector<uint8_t> b(9u << 20, static_cast<uint8_t>(r));
    if (r == 1)
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 7);
    c.broadcast(b.data(), b.data(), b.size(), DataType::Uint8, 1)->wait();
    for (size_t i = 0; i < b.size(); i += 4093) ASSERT_EQ(b[i], static_cast<uint8_t>(i * 7)) << i;
    std::vector<uint16_t> h(big, comm::float_to_bf16(static_cast<float>(r + 1))), hr(r == 2 ? big : 0);
    c.reduce(h.data(), r == 2 ? hr.data() : nullptr, big, DataType::BFloat16, RedOp::Sum, 2)->wait();
    if (r == 2) {
      EXPECT_EQ(comm::bf16_to_float(hr[0]), 6.f);
      EXPECT_EQ(comm::bf16_to_float(hr[big - 1]), 6.f);
    }
    EXPECT_EQ(comm::bf16_to_float(h[big / 2]), static_cast<float>(r + 1));  // the input stays
    c.barrier();
  }));
}

// Without the guard (ACCEL_COMM_CHECK=0), shared memory still never combines the buffers of
// different calls: a mismatch fails every process at once, in the simulator's words; a peer
// that never comes is a timeout naming it.
TEST(GlooThreads, SharedMemoryMismatchAndTimeoutWithoutTheGuard) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  ScopedEnv shm("ACCEL_GLOO_SHM", "1");
  ScopedEnv check("ACCEL_COMM_CHECK", "0");
  const auto t0 = std::chrono::steady_clock::now();
  auto errors = on_threads(2, [&](int r, comm::Communicator& c) {
    std::vector<float> x(r == 0 ? 197 : 4, 1.f);
    c.all_reduce(x.data(), x.data(), x.size(), DataType::Float32, r == 0 ? RedOp::Avg : RedOp::Sum)->wait();
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[static_cast<size_t>(r)];
    EXPECT_TRUE(contains(e, "mismatched collectives at call #1: rank 0 called all_reduce #1(count=197, float32, avg); "
                            "rank 1 called all_reduce #1(count=4, float32, sum); every rank must make the same calls"))
        << e;
    EXPECT_TRUE(contains(e, "(rank " + std::to_string(r) + " of 2)")) << e;
  }
  const auto t1 = std::chrono::steady_clock::now();
  errors = on_threads(
      2,
      [&](int r, comm::Communicator& c) {
        if (r == 1) {
          std::this_thread::sleep_for(2s);
          return;
        }
        std::vector<double> x(8, 1.0);
        try {
          c.broadcast(x.data(), x.data(), x.size(), DataType::Float64, 1)->wait();
          ADD_FAILURE() << "a broadcast without its root completed";
        } catch (const CommError& e) {
          EXPECT_EQ(e.result(), Result::Timeout) << e.what();
          EXPECT_TRUE(contains(e.what(), "broadcast of 8 float64 (rank 0 of 2): timed out after 1000 ms in shared memory, "
                                         "waiting for rank 1 (pid " + std::to_string(::getpid()) + ")"))
              << e.what();
        }
      },
      1s);
  expect_ok(errors);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 10s);
  {
    ScopedEnv bad("ACCEL_GLOO_SHM", "sometimes");
    errors = on_threads(2, [&](int, comm::Communicator&) {});
    for (const auto& e : errors) EXPECT_TRUE(contains(e, "ACCEL_GLOO_SHM='sometimes': expected auto, 1 (on) or 0 (off)")) << e;
  }
}

// The rendezvous: a rank claimed twice, a world size that differs, a rank that never comes.
TEST(GlooThreads, RendezvousErrorsNameTheProcesses) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  auto store = comm::make_memory_store(2s);
  auto join = [&](int rank, int world, std::string* err) {
    try {
      comm::GroupConfig c;
      c.backend = "gloo";
      c.rank = rank;
      c.world_size = world;
      c.store = store;
      c.timeout = 2s;
      world::make_process_group(c);
    } catch (const std::exception& e) {
      *err = e.what();
    }
  };
  std::string e0, e1, e1b;
  {
    std::thread a(join, 0, 3, &e0), b(join, 1, 3, &e1), b2(join, 1, 3, &e1b);
    a.join();
    b.join();
    b2.join();
  }
  // one of the two rank-1 processes is told it is a duplicate; the others time out on rank 2
  const std::string& dup = contains(e1, "claimed by two") ? e1 : e1b;
  EXPECT_TRUE(contains(dup, "rank 1 is claimed by two processes")) << e1 << " | " << e1b;
  EXPECT_TRUE(contains(e0, "rank(s) 2 of 3 did not join within 2000 ms")) << e0;
  EXPECT_TRUE(contains(e0, "joined: 0 (pid ")) << e0;

  auto store2 = comm::make_memory_store(2s);
  store = store2;
  std::string f0, f1;
  {
    std::thread a(join, 0, 2, &f0), b(join, 1, 3, &f1);
    a.join();
    b.join();
  }
  EXPECT_TRUE(contains(f0, "disagree on the world")) << f0;
  EXPECT_TRUE(contains(f0, "rank 1 (pid ")) << f0;
  EXPECT_TRUE(contains(f0, "world_size 3, this process (rank 0) has 2")) << f0;
  EXPECT_TRUE(contains(f1, "disagree on the world")) << f1;

  // a backend that differs (the rendezvous every real-process backend starts with)
  auto store3 = comm::make_memory_store(2s);
  std::string g0, g1;
  auto meet_as = [&](int rank, const char* backend, std::string* err) {
    try {
      comm::GroupConfig c;
      c.backend = backend;
      c.rank = rank;
      c.world_size = 2;
      c.timeout = 2s;
      comm::meet(*store3, c);
    } catch (const std::exception& e) {
      *err = e.what();
    }
  };
  {
    std::thread a(meet_as, 0, "gloo", &g0), b(meet_as, 1, "nccl", &g1);
    a.join();
    b.join();
  }
  EXPECT_TRUE(contains(g0, "rank 1 (pid ")) << g0;
  EXPECT_TRUE(contains(g0, "has backend nccl, this process (rank 0) has gloo")) << g0;
  EXPECT_TRUE(contains(g1, "has backend gloo, this process (rank 1) has nccl")) << g1;
}

// ---------------------------------------------------------------------------------------
// Real processes, started by hand with torchrun's variables

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

enum class OptKind { SGD, AdamW };
constexpr double kMaxNorm = 0.2;
constexpr int kSteps = 12;

struct Case {
  Strategy strategy;
  int n, k;
  OptKind opt;
  int64_t b;
};

std::string case_name(const Case& c) {
  return std::string(strategy_name(c.strategy)) + "_" + std::to_string(c.n) + "procs_k" + std::to_string(c.k) + "_b" +
         std::to_string(c.b) + (c.opt == OptKind::SGD ? "_sgd" : "_adamw");
}

std::shared_ptr<Optimizer> make_opt(const std::shared_ptr<Model>& m, OptKind k) {
  if (k == OptKind::SGD) {
    SGDConfig c;
    c.lr = 0.05;
    c.momentum = 0.9;
    c.weight_decay = 1e-3;
    return std::make_shared<Optimizer>(m, c);
  }
  AdamWConfig c;
  c.lr = 1e-2;
  return std::make_shared<Optimizer>(m, c);
}

std::pair<torch::Tensor, torch::Tensor> data(int64_t rows) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto X = torch::randn({rows, 16}, gen);
  auto Y = torch::randint(0, 5, {rows}, gen, torch::kLong);
  return {X, Y};
}

// Trains kSteps optimizer steps; the weights at the end (gathered when sharded).
std::vector<torch::Tensor> train(Accelerator& acc, int64_t batch, OptKind which, int64_t rows, int kill_at = 0,
                                 int64_t wide = 32, int hog_at = 0) {
  MLPConfig cfg;
  cfg.sizes = {16, wide, 32, 5};
  std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
  if (acc.process_index() > 0) {  // different starting weights: prepare must broadcast process 0's
    torch::NoGradGuard ng;
    for (const auto& p : model->parameters()) p.add_(static_cast<double>(acc.process_index()));
  }
  auto opt = make_opt(model, which);
  auto [X, Y] = data(rows);
  DataLoaderConfig lc;
  lc.batch_size = batch;
  auto loader = std::make_shared<DataLoader>(X, Y, lc);
  acc.prepare(model, opt, nullptr, loader);
  torch::Tensor hog;
  while (acc.optimizer_steps() < kSteps) {
    auto b = acc.next_batch(*loader);
    if (!b) continue;
    acc.backward(cross_entropy(acc.forward(*model, {b->inputs}), b->targets));
    acc.clip_grad_norm(kMaxNorm);
    acc.step();
    if (kill_at > 0 && acc.optimizer_steps() == kill_at) raise(SIGKILL);
    // a buffer of 256 MiB held from step hog_at on (a simulated GPU's budget runs out)
    if (hog_at > 0 && acc.optimizer_steps() == hog_at) hog = torch::ones({64 << 20});
  }
  return acc.full_parameters(*model);
}

// The three classic bugs of a data-parallel program, made by one process (`kind`):
//   skip   process 1 skips the backward and step of its 3rd batch (one optimizer step fewer),
//          then both evaluate (a metric all-reduced);
//   wider  process 1's metric is one element wider than process 0's;
//   alone  process 0 alone reduces a metric after its 2nd step, then both train on.
// `exit`: the process that made the mistake ends (exit code 3) right after it (process 0's
// lone all-reduce posted, not waited for), instead of going on with its program.
void classic_bug(Accelerator& acc, const std::string& kind, bool exit_after) {
  const int rank = acc.process_index();
  MLPConfig cfg;
  cfg.sizes = {16, 32, 32, 5};
  std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
  auto opt = make_opt(model, OptKind::SGD);
  auto [X, Y] = data(256);
  DataLoaderConfig lc;
  lc.batch_size = 4;
  auto loader = std::make_shared<DataLoader>(X, Y, lc);
  acc.prepare(model, opt, nullptr, loader);
  int batches = 0;
  while (acc.optimizer_steps() < 6) {
    auto b = acc.next_batch(*loader);
    if (!b) continue;
    ++batches;
    if (kind == "skip" && rank == 1 && batches == 3) {
      if (exit_after) _exit(3);
      continue;
    }
    acc.backward(cross_entropy(acc.forward(*model, {b->inputs}), b->targets));
    acc.step();
    if (kind == "alone" && rank == 0 && acc.optimizer_steps() == 2) {
      if (exit_after) {  // posted, not waited for: the process ends with it in flight
        static float metric[3] = {1, 1, 1};
        acc.comm().all_reduce(metric, metric, 3, comm::DataType::Float32, comm::RedOp::Sum);
        _exit(3);
      }
      acc.reduce(torch::ones({3}), comm::RedOp::Sum);
    }
    if (kind == "skip" && rank == 1 && acc.optimizer_steps() == 5) break;  // its 6 batches are done
  }
  const int64_t width = kind == "wider" && rank == 1 ? 5 : 4;
  if (kind == "wider" && rank == 1 && exit_after) _exit(3);
  acc.reduce(torch::ones({width}), comm::RedOp::Sum);
}

Options options(const Case& c) {
  Options o;
  o.gradient_accumulation_steps = c.k;
  o.seed = 123;
  o.device = DeviceKind::CPU;
  o.strategy = c.strategy;
  o.bucket_bytes = 4096;  // several buckets
  return o;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A worker: this binary re-run with RANK/WORLD_SIZE/MASTER_* and ACCEL_TEST_GLOO (what to
// do: "train STRATEGY N K B OPT", "die ...", "precision ..."), writing DIR/RANK.status
// ("<accel status> <seconds> <message>") and DIR/RANK.bin (the weights).
TEST(GlooProcess, Worker) {
  const char* job = std::getenv("ACCEL_TEST_GLOO");
  if (!job) GTEST_SKIP() << "run by the GlooProcess tests as one of their processes";
  const std::string dir = std::getenv("ACCEL_TEST_GLOO_DIR");
  const std::string rank = std::getenv("RANK") ? std::getenv("RANK") : "x";
  const std::string slot = std::getenv("ACCEL_TEST_GLOO_SLOT");
  const std::string backend = std::getenv("ACCEL_TEST_BACKEND") ? std::getenv("ACCEL_TEST_BACKEND") : "gloo";
  std::istringstream in(job);
  std::string what, strategy, opt;
  int n = 0, k = 0, b = 0, kill_at = 0, wide = 32;
  in >> what >> strategy >> n >> k >> b >> opt;
  if (what == "die" && rank == "1") kill_at = 3;
  const int hog_at = what == "hog" && rank == "1" ? 2 : 0;
  Case c{parse_strategy(strategy).value(), n, k, opt == "sgd" ? OptKind::SGD : OptKind::AdamW, b};
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  std::string msg;
  std::vector<torch::Tensor> params;
  try {
    Options o = options(c);
    if (what == "precision" && rank == "1") o.precision = Precision::BF16;
    if (what == "everything" && rank == "1") {  // precision, strategy, accumulation and the model differ
      o.precision = Precision::BF16;
      o.strategy = Strategy::Zero2;
      o.gradient_accumulation_steps = 3;
      wide = 33;
    }
    const double timeout = std::getenv("ACCEL_TIMEOUT") ? std::atof(std::getenv("ACCEL_TIMEOUT")) : 20;
    auto comm = world::join_world(backend, std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000)), false);
    Accelerator acc(o, comm);
    if (what == "bug") {  // "bug ddp N 1 B KIND-stay" or "...KIND-exit"
      const size_t dash = opt.find('-');
      classic_bug(acc, opt.substr(0, dash), opt.substr(dash + 1) == "exit");
    } else {
      params = train(acc, c.b, c.opt, static_cast<int64_t>(c.n) * c.k * c.b * kSteps, kill_at, wide, hog_at);
    }
  } catch (const Error& e) {
    status = static_cast<int>(e.status());
    msg = e.what();
  } catch (const std::exception& e) {
    status = -999;
    msg = e.what();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ofstream(dir + "/" + slot + ".status") << status << " " << secs << " " << msg;
  std::ofstream bin(dir + "/" + slot + ".bin", std::ios::binary);
  for (const auto& p : params) {
    auto t = p.contiguous();
    bin.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * t.element_size()));
  }
}

struct Outcome {
  int status = -1;
  double seconds = 0;
  std::string message, weights;
  int exit_code = -1;
};

// Starts n workers with torchrun's variables set by hand; `env` adds per-rank variables.
std::vector<Outcome> run_workers(int n, const std::string& job, double timeout_s,
                                 const std::function<void(int)>& env = nullptr, const std::string& backend = "gloo",
                                 const std::string& keep = "") {
  char tmpl[] = "/tmp/accel-test-gloo-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const int port = free_port();
  const std::string ends = dir + "/ends";
  mkdir(ends.c_str(), 0755);
  std::vector<pid_t> kids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("ACCEL_TIMEOUT", std::to_string(timeout_s).c_str(), 1);
      setenv("ACCEL_TEST_GLOO", job.c_str(), 1);
      setenv("ACCEL_TEST_GLOO_DIR", dir.c_str(), 1);
      setenv("ACCEL_TEST_GLOO_SLOT", std::to_string(r).c_str(), 1);
      setenv("ACCEL_TEST_BACKEND", backend.c_str(), 1);
      setenv("ACCEL_LAUNCH_STATUS_DIR", ends.c_str(), 1);
      // the simulated library's report and trace files (kept in `keep` when given)
      setenv("ACCEL_SIM_OUT", (keep.empty() ? dir : keep).c_str(), 1);
      setenv("ACCEL_SIM_TRACE", "1", 1);
      setenv("OMP_NUM_THREADS", "1", 1);  // n processes share the cores
      if (env) env(r);
      // the worker's own gtest lines go to its log, not into this test's output
      const int log = open((dir + "/" + std::to_string(r) + ".log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (log >= 0) dup2(log, 1);
      execl("/proc/self/exe", "test_processes", "--gtest_filter=GlooProcess.Worker", static_cast<char*>(nullptr));
      _exit(127);
    }
    kids.push_back(pid);
  }
  std::vector<Outcome> out(static_cast<size_t>(n));
  // reaped as they end, each one's end written where its peers look for it, as accel launch
  // does (ACCEL_LAUNCH_STATUS_DIR, comm/guard.h)
  std::vector<int> status(static_cast<size_t>(n), -1);
  for (int left = n; left > 0;) {
    bool any = false;
    for (int r = 0; r < n; ++r) {
      int st = 0;
      if (status[static_cast<size_t>(r)] != -1 || waitpid(kids[static_cast<size_t>(r)], &st, WNOHANG) <= 0) continue;
      status[static_cast<size_t>(r)] = st;
      --left;
      any = true;
      std::ofstream(ends + "/rank-" + std::to_string(r)) << text::wait_status_text(st) << "\n";
    }
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < n; ++r) {
    const int st = status[static_cast<size_t>(r)];
    Outcome& o = out[static_cast<size_t>(r)];
    o.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
    std::istringstream s(slurp(dir + "/" + std::to_string(r) + ".status"));
    s >> o.status >> o.seconds;
    std::getline(s, o.message);
    o.weights = slurp(dir + "/" + std::to_string(r) + ".bin");
  }
  std::system(("rm -rf " + dir).c_str());
  return out;
}

std::vector<torch::Tensor> single(const Case& c) {
  Options o = options(c);
  o.strategy = Strategy::None;
  o.gradient_accumulation_steps = 1;
  Accelerator acc(o);
  return train(acc, static_cast<int64_t>(c.n) * c.k * c.b, c.opt, static_cast<int64_t>(c.n) * c.k * c.b * kSteps);
}

class GlooEquivalence : public ::testing::TestWithParam<Case> {};

// N real processes x micro-batch B x accumulation K give the weights of one process with
// batch N*B*K (relative error <= 1e-5), and every process holds the same bits.
TEST_P(GlooEquivalence, EqualsOneProcessWithTheGlobalBatch) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  const Case c = GetParam();
  std::ostringstream job;
  job << "train " << strategy_name(c.strategy) << " " << c.n << " " << c.k << " " << c.b << " "
      << (c.opt == OptKind::SGD ? "sgd" : "adamw");
  auto out = run_workers(c.n, job.str(), 30);
  for (int r = 0; r < c.n; ++r) {
    ASSERT_EQ(out[r].exit_code, 0) << "rank " << r;
    ASSERT_EQ(out[r].status, 0) << "rank " << r << ": " << out[r].message;
    EXPECT_EQ(out[r].weights, out[0].weights) << "rank " << r << " differs from rank 0 in its bits";
  }
  auto ref = single(c);
  size_t off = 0;
  double worst = 0;
  for (const auto& p : ref) {
    const size_t bytes = static_cast<size_t>(p.numel()) * sizeof(float);
    ASSERT_LE(off + bytes, out[0].weights.size());
    auto got = torch::from_blob(out[0].weights.data() + off, p.sizes(), torch::kFloat).clone();
    worst = std::max(worst, (got - p).abs().max().item<double>() / std::max(p.abs().max().item<double>(), 1e-30));
    off += bytes;
  }
  EXPECT_EQ(off, out[0].weights.size());
  EXPECT_LE(worst, 1e-5) << case_name(c);
  RecordProperty("max_rel_err", std::to_string(worst));
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (Strategy s : {Strategy::DDP, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3}) {
    v.push_back({s, 2, 2, OptKind::AdamW, 3});
    v.push_back({s, 4, 1, OptKind::SGD, 2});
  }
  v.push_back({Strategy::DDP, 2, 1, OptKind::SGD, 4});
  v.push_back({Strategy::Zero3, 4, 2, OptKind::AdamW, 2});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Gloo, GlooEquivalence, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return case_name(info.param); });

// A process killed with SIGKILL in the middle of training: every other process fails with
// ACCEL_ERR_COMMUNICATION, well within the timeout.
TEST(GlooProcess, KilledPeerFailsTheOthers) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  // the timeout 60 s, the bound half of it: far from both a detection (seconds) and a hang
  auto out = run_workers(3, "die ddp 3 1 4 adamw", 60);
  EXPECT_EQ(out[1].exit_code, -SIGKILL);
  for (int r : {0, 2}) {
    EXPECT_EQ(out[r].exit_code, 0) << "rank " << r;
    EXPECT_EQ(out[r].status, static_cast<int>(Status::Communication)) << "rank " << r << ": " << out[r].message;
    EXPECT_TRUE(contains(out[r].message, "gloo: ")) << out[r].message;
    EXPECT_TRUE(contains(out[r].message, "rank 1 (pid ")) << out[r].message;
    EXPECT_TRUE(contains(out[r].message, ") was killed by signal 9 (SIGKILL)")) << out[r].message;
    EXPECT_LT(out[r].seconds, 30) << "rank " << r << " took " << out[r].seconds << " s";
  }
}

// The three classic bugs (classic_bug), the process that made the mistake going on or ending:
// every process fails within 5 s (the timeout is 60 s), with the calls of each process
// listed, or the process that ended named with its rank, pid and exit code.
TEST(GlooProcess, ClassicBugsAreNamedWithinSeconds) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  struct Expect {
    const char* job;
    Status status;
    std::vector<std::string> words;  // in every failed process's message
  };
  const std::string mismatch = "mismatched collectives at call #";
  const std::vector<Expect> cases = {
      {"skip-stay", Status::InvalidState, {mismatch, "called all_reduce #", "(count=4, float32, sum)", "every rank must make the same calls"}},
      {"wider-stay", Status::InvalidState, {mismatch, "rank 0 called all_reduce #", "(count=4, float32, sum); rank 1 called all_reduce #", "(count=5, float32, sum)"}},
      {"alone-stay", Status::InvalidState, {mismatch, "rank 0 called all_reduce #", "(count=3, float32, sum)"}},
      {"skip-exit", Status::Communication, {"rank 1 (pid ", ") exited with code 3 without calling all_reduce #"}},
      {"wider-exit", Status::Communication, {"rank 1 (pid ", ") exited with code 3 without calling all_reduce #", "(count=4, float32, sum)"}},
      {"alone-exit", Status::Communication, {"rank 0 (pid ", ") exited with code 3"}},
  };
  for (const auto& e : cases) {
    SCOPED_TRACE(e.job);
    auto out = run_workers(2, std::string("bug ddp 2 1 4 ") + e.job, 60);
    const bool exits = contains(e.job, "exit");
    const int deviant = contains(e.job, "alone") ? 0 : 1;
    for (int r : {0, 1}) {
      if (exits && r == deviant) {
        EXPECT_EQ(out[r].exit_code, 3) << "rank " << r;
        continue;
      }
      EXPECT_EQ(out[r].exit_code, 0) << "rank " << r;
      EXPECT_EQ(out[r].status, static_cast<int>(e.status)) << "rank " << r << ": " << out[r].message;
      for (const auto& w : e.words) EXPECT_TRUE(contains(out[r].message, w)) << "'" << w << "' in rank " << r << ": " << out[r].message;
      if (std::getenv("ACCEL_TEST_SHOW")) std::cout << e.job << " rank " << r << " (" << out[r].seconds << " s): " << out[r].message << "\n";
      EXPECT_LT(out[r].seconds, 5) << "rank " << r << " took " << out[r].seconds << " s: " << out[r].message;
    }
  }
}

// Processes that disagree on their configuration: every process fails at prepare, and the
// message names the process and the field.
TEST(GlooProcess, DisagreementAtPrepareIsNamed) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  auto out = run_workers(2, "precision ddp 2 1 4 sgd", 10);
  for (int r : {0, 1}) {
    EXPECT_EQ(out[r].status, static_cast<int>(Status::InvalidArgument)) << out[r].message;
    EXPECT_TRUE(contains(out[r].message, "the processes disagree")) << out[r].message;
    EXPECT_TRUE(contains(out[r].message, "mixed_precision")) << out[r].message;
  }
  EXPECT_TRUE(contains(out[0].message, "process 1 has mixed_precision bf16, this process (0) has no")) << out[0].message;
  // several differences at once, each named
  auto all = run_workers(2, "everything ddp 2 1 4 sgd", 10);
  for (int r : {0, 1}) EXPECT_EQ(all[r].status, static_cast<int>(Status::InvalidArgument)) << all[r].message;
  for (const char* field : {"process 1 has strategy zero2, this process (0) has ddp", "process 1 has mixed_precision bf16",
                            "process 1 has gradient_accumulation_steps 3, this process (0) has 1",
                            "process 1 has model 6 parameters: [33, 16]"})
    EXPECT_TRUE(contains(all[0].message, field)) << field << " in " << all[0].message;
  EXPECT_TRUE(contains(all[1].message, "process 0 has model 6 parameters: [32, 16]")) << all[1].message;
}

// Bad launch variables and a master that is not there: clear errors within the timeout.
TEST(GlooProcess, BadWorldsAreClearErrors) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  // RANK >= WORLD_SIZE
  auto out = run_workers(1, "train ddp 1 1 4 sgd", 5, [](int) { setenv("RANK", "2", 1); });
  EXPECT_EQ(out[0].status, static_cast<int>(Status::InvalidArgument)) << out[0].message;
  EXPECT_TRUE(contains(out[0].message, "RANK")) << out[0].message;
  // a world whose rank 0 never comes: rank 1 cannot reach the store within the timeout
  auto lonely = run_workers(1, "train ddp 2 1 4 sgd", 2, [](int) {
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
  });
  EXPECT_TRUE(lonely[0].status == static_cast<int>(Status::Timeout) ||
              lonely[0].status == static_cast<int>(Status::Communication))
      << lonely[0].status << " " << lonely[0].message;
  EXPECT_TRUE(contains(lonely[0].message, "127.0.0.1:")) << lonely[0].message;
  EXPECT_LT(lonely[0].seconds, 15);
  // rank 0 alone: the others never arrive, and the error names them
  auto alone = run_workers(1, "train ddp 3 1 4 sgd", 2, [](int) { setenv("WORLD_SIZE", "3", 1); });
  EXPECT_EQ(alone[0].status, static_cast<int>(Status::Timeout)) << alone[0].message;
  EXPECT_TRUE(contains(alone[0].message, "rank(s) 1, 2 of 3 did not join within 2000 ms")) << alone[0].message;
  EXPECT_LT(alone[0].seconds, 15);
}

// ---------------------------------------------------------------------------------------
// The simulated NCCL as processes (ACCEL_BACKEND=sim): the nccl backend's own code on
// libaccel-nccl-sim.so, one simulated GPU per process.

std::string weight_bytes(const std::vector<torch::Tensor>& params) {
  std::string out;
  for (const auto& p : params) {
    auto t = p.contiguous();
    out.append(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel() * t.element_size()));
  }
  return out;
}

// The same training on the in-process simulator's ranks (threads): rank 0's weights. One
// intra-op thread, as the processes have (OMP_NUM_THREADS=1), so that libtorch's kernels
// round alike.
std::string in_process(const Case& c) {
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  sim::WorldOptions wo;
  wo.world_size = c.n;
  wo.timeout_seconds = 60;
  sim::World w(wo);
  std::vector<std::string> bytes(static_cast<size_t>(c.n));
  auto rep = w.run([&](sim::Rank& rk) {
    std::shared_ptr<comm::Communicator> cm(&rk.comm(), [](comm::Communicator*) {});
    Accelerator acc(options(c), cm);
    bytes[static_cast<size_t>(rk.rank())] =
        weight_bytes(train(acc, c.b, c.opt, static_cast<int64_t>(c.n) * c.k * c.b * kSteps));
  });
  at::set_num_threads(threads);
  EXPECT_TRUE(rep.ok()) << rep.first_error();
  return bytes[0];
}

std::string job_of(const Case& c) {
  std::ostringstream job;
  job << "train " << strategy_name(c.strategy) << " " << c.n << " " << c.k << " " << c.b << " "
      << (c.opt == OptKind::SGD ? "sgd" : "adamw");
  return job.str();
}

double max_rel_err(const std::string& a, const std::string& b) {
  EXPECT_EQ(a.size(), b.size());
  const size_t n = std::min(a.size(), b.size()) / sizeof(float);
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < n; ++i) {
    float x, y;
    std::memcpy(&x, a.data() + i * 4, 4);
    std::memcpy(&y, b.data() + i * 4, 4);
    worst = std::max(worst, static_cast<double>(std::abs(x - y)));
    scale = std::max(scale, static_cast<double>(std::abs(y)));
  }
  return worst / scale;
}

class SimEquivalence : public ::testing::TestWithParam<Case> {};

// N simulated processes give, bit for bit, the weights of N ranks of the in-process
// simulator, every process the same bits, and within 1e-5 of one process trained on the
// global batch.
TEST_P(SimEquivalence, ProcessesEqualTheInProcessSimulatorBitForBit) {
  const Case c = GetParam();
  // the 4-process cases move every collective by direct access to the peers' memory, the
  // others stage the small ones through the shared segment (the default below 16 MiB)
  auto out = run_workers(c.n, job_of(c), 60, [&](int) { setenv("ACCEL_SIM_DIRECT", c.n == 4 ? "1" : "auto", 1); }, "sim");
  for (int r = 0; r < c.n; ++r) {
    ASSERT_EQ(out[r].exit_code, 0) << "rank " << r;
    ASSERT_EQ(out[r].status, 0) << "rank " << r << ": " << out[r].message;
    EXPECT_EQ(out[r].weights, out[0].weights) << "rank " << r << " differs from rank 0 in its bits";
  }
  const std::string threads = in_process(c);
  EXPECT_TRUE(out[0].weights == threads) << case_name(c) << ": the processes differ from the in-process simulator by "
                                         << max_rel_err(out[0].weights, threads) << " (relative)";
  const double err = max_rel_err(out[0].weights, weight_bytes(single(c)));
  EXPECT_LE(err, 1e-5) << case_name(c);
  RecordProperty("max_rel_err_vs_one_process", std::to_string(err));
}

std::vector<Case> sim_cases() {
  std::vector<Case> v;
  for (Strategy s : {Strategy::DDP, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3}) {
    v.push_back({s, 2, 2, OptKind::AdamW, 3});
    v.push_back({s, 4, 1, OptKind::SGD, 2});
    v.push_back({s, 8, 1, OptKind::AdamW, 2});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Sim, SimEquivalence, ::testing::ValuesIn(sim_cases()),
                         [](const auto& info) { return case_name(info.param); });

// The same run three ways: the in-process simulator and the simulated processes agree bit
// for bit (above); Gloo's processes (its own reduction order) within 1e-5 of them.
TEST(SimProcess, GlooAgreesWithTheSimulatorsWithin1e5) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  for (const Case& c : {Case{Strategy::DDP, 4, 1, OptKind::SGD, 2}, Case{Strategy::Zero2, 2, 2, OptKind::AdamW, 3},
                        Case{Strategy::Zero3, 4, 1, OptKind::SGD, 2}}) {
    auto sim_out = run_workers(c.n, job_of(c), 60, nullptr, "sim");
    auto gloo_out = run_workers(c.n, job_of(c), 60, nullptr, "gloo");
    ASSERT_EQ(sim_out[0].status, 0) << sim_out[0].message;
    ASSERT_EQ(gloo_out[0].status, 0) << gloo_out[0].message;
    EXPECT_TRUE(sim_out[0].weights == in_process(c)) << case_name(c);
    const double err = max_rel_err(gloo_out[0].weights, sim_out[0].weights);
    EXPECT_LE(err, 1e-5) << case_name(c);
    std::cout << case_name(c) << ": gloo vs the simulators " << err << " (relative)\n";
  }
}

// With 2 processes each average is one addition and a halving, in whatever order: Gloo's
// ZeRO-1 and ZeRO-2 (the MLP's 3 units' collectives as one bucket, the reduce-scatter as an
// all-to-all: zero.h, comm/gloo) give the simulator's weights bit for bit.
TEST(SimProcess, GlooZeroOnTwoProcessesIsTheSimulatorBitForBit) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  for (const Case& c : {Case{Strategy::Zero1, 2, 2, OptKind::AdamW, 3}, Case{Strategy::Zero2, 2, 2, OptKind::AdamW, 3},
                        Case{Strategy::Zero2, 2, 1, OptKind::SGD, 2}}) {
    auto sim_out = run_workers(c.n, job_of(c), 60, nullptr, "sim");
    auto gloo_out = run_workers(c.n, job_of(c), 60, nullptr, "gloo");
    ASSERT_EQ(sim_out[0].status, 0) << sim_out[0].message;
    ASSERT_EQ(gloo_out[0].status, 0) << gloo_out[0].message;
    EXPECT_TRUE(gloo_out[0].weights == sim_out[0].weights)
        << case_name(c) << ": gloo vs the simulator " << max_rel_err(gloo_out[0].weights, sim_out[0].weights);
  }
}

// A process killed mid-training (SIGKILL by itself, or by fault injection): every other
// process fails with ACCEL_ERR_COMMUNICATION naming it, well within the timeout. The killed
// one's report (rewritten in place at every step) is whole and says the step it reached.
TEST(SimProcess, KilledProcessFailsTheOthersNamingIt) {
  char tmpl[] = "/tmp/accel-test-sim-XXXXXX";
  const std::string keep = mkdtemp(tmpl);
  auto out = run_workers(3, "die ddp 3 1 4 adamw", 60, nullptr, "sim", keep);  // bound: half the timeout
  EXPECT_EQ(out[1].exit_code, -SIGKILL);
  for (int r : {0, 2}) {
    EXPECT_EQ(out[r].status, static_cast<int>(Status::Communication)) << "rank " << r << ": " << out[r].message;
    EXPECT_TRUE(contains(out[r].message, "rank 1 died (its process was killed or crashed)")) << out[r].message;
    EXPECT_LT(out[r].seconds, 30) << "rank " << r;
  }
  for (int r = 0; r < 3; ++r) {
    std::string report = slurp(keep + "/rank-" + std::to_string(r) + ".json");
    while (!report.empty() && (report.back() == '\n' || report.back() == ' ')) report.pop_back();
    ASSERT_FALSE(report.empty()) << "rank " << r;
    EXPECT_EQ(report.front(), '{') << report;
    EXPECT_EQ(report.back(), '}') << report;
    EXPECT_EQ(std::count(report.begin(), report.end(), '{'), 1) << report;
    EXPECT_TRUE(contains(report, "\"rank\":" + std::to_string(r) + ",")) << report;
    if (r == 1) {  // killed from outside the library: the report as of its last step
      EXPECT_TRUE(contains(report, "\"status\":\"ok\"")) << report;
      EXPECT_TRUE(contains(report, "\"steps\":3,")) << report;
    } else {
      EXPECT_TRUE(contains(report, "\"status\":\"failed\"")) << report;
      EXPECT_TRUE(contains(report, "rank 1 died")) << report;
    }
  }
  std::system(("rm -rf " + keep).c_str());
  auto faulted = run_workers(4, "train zero2 4 1 2 sgd", 30, [](int) { setenv("ACCEL_SIM_FAULTS", "kill:2@step:4", 1); },
                             "sim");
  EXPECT_EQ(faulted[2].exit_code, -SIGKILL);
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(faulted[r].status, static_cast<int>(Status::Communication)) << "rank " << r << ": " << faulted[r].message;
    EXPECT_TRUE(contains(faulted[r].message, "rank 2 died (its process was killed or crashed): killed by fault "
                                             "injection (kill:2@step:4) at optimizer step 4"))
        << faulted[r].message;
  }
}

// An allocation over the simulated GPU's budget: that process fails with a CUDA-shaped
// out-of-memory error; the others fail naming it and quoting it.
TEST(SimProcess, OverBudgetProcessFailsWithCudasMessageAndTheOthersQuoteIt) {
  auto out = run_workers(2, "hog ddp 2 1 4 sgd", 30, [](int) { setenv("ACCEL_SIM_GPU_MEM", "64MiB", 1); }, "sim");
  EXPECT_TRUE(contains(out[1].message, "CUDA out of memory. Tried to allocate 256.00 MiB. GPU 1 has a total capacity "
                                       "of 64.00 MiB of which"))
      << out[1].message;
  EXPECT_EQ(out[0].status, static_cast<int>(Status::Communication)) << out[0].message;
  EXPECT_TRUE(contains(out[0].message, "rank 1 exited (its process ended): CUDA out of memory. Tried to allocate"))
      << out[0].message;
}

// Processes that disagree on the simulated hardware, and bad settings: clear errors at init.
TEST(SimProcess, DisagreementAndBadSettingsAreClearErrors) {
  auto out = run_workers(2, "train ddp 2 1 4 sgd", 10,
                         [](int r) { setenv("ACCEL_SIM_TOPOLOGY", r == 0 ? "8xH100" : "8xA100", 1); }, "sim");
  for (int r : {0, 1}) {
    EXPECT_EQ(out[r].status, static_cast<int>(Status::InvalidState)) << out[r].message;
    EXPECT_TRUE(contains(out[r].message, "the processes disagree on the simulated hardware: rank 0 has topology 8xH100"))
        << out[r].message;
    EXPECT_TRUE(contains(out[r].message, "has topology 8xA100")) << out[r].message;
  }
  auto bad = run_workers(2, "train ddp 2 1 4 sgd", 10, [](int) { setenv("ACCEL_SIM_GPU_MEM", "lots", 1); }, "sim");
  for (int r : {0, 1}) {
    EXPECT_EQ(bad[r].status, static_cast<int>(Status::InvalidArgument)) << bad[r].message;
    EXPECT_TRUE(contains(bad[r].message, "ACCEL_SIM_GPU_MEM 'lots'")) << bad[r].message;
  }
  auto big = run_workers(2, "train ddp 2 1 4 sgd", 10, [](int) { setenv("ACCEL_SIM_TOPOLOGY", "8xBogus", 1); }, "sim");
  EXPECT_TRUE(contains(big[0].message, "8xBogus")) << big[0].message;
}

// Five runs of the same simulated processes: the same weights, report files and traces,
// byte for byte.
TEST(SimProcess, FiveRunsGiveTheSameBytesReportsAndTraces) {
  const Case c{Strategy::Zero3, 4, 1, OptKind::AdamW, 2};
  std::vector<std::string> first;
  for (int run = 0; run < 5; ++run) {
    char tmpl[] = "/tmp/accel-test-sim-XXXXXX";
    const std::string keep = mkdtemp(tmpl);
    auto out = run_workers(c.n, job_of(c), 60, nullptr, "sim", keep);
    std::vector<std::string> got;
    for (int r = 0; r < c.n; ++r) {
      ASSERT_EQ(out[r].status, 0) << out[r].message;
      got.push_back(out[r].weights);
      got.push_back(slurp(keep + "/rank-" + std::to_string(r) + ".json"));
      got.push_back(slurp(keep + "/trace-" + std::to_string(r) + ".json"));
      EXPECT_FALSE(got.back().empty()) << "no trace from rank " << r;
    }
    std::system(("rm -rf " + keep).c_str());
    if (run == 0) {
      first = got;
      EXPECT_TRUE(contains(first[1], "\"status\":\"ok\"")) << first[1];
      EXPECT_TRUE(contains(first[1], "\"steps\":12")) << first[1];
      continue;
    }
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(got[i] == first[i]) << "run " << run << ", rank " << i / 3 << ": "
                                      << (i % 3 == 0 ? "weights" : i % 3 == 1 ? "report" : "trace") << " differ";
  }
}

}  // namespace
}  // namespace accel
