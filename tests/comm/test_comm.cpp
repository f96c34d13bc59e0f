// The communication layer's seams, without libtorch: the Store (c10d's operations, in
// process), the process groups the runtime makes (runtime/world.h), and the simulator's settings checked at its boundary.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <chrono>
#include <string>
#include <thread>

#include "comm/launch_env.h"
#include "comm/nccl/nccl.h"
#include "comm/store.h"
#include "runtime/world.h"
#include "sim/world.h"

namespace accel::comm {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Status status_of(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.status();
  }
  return Status::Ok;
}

TEST(Store, SetGetReplaceCheckRemove) {
  auto s = make_memory_store(1s);
  s->set("a", std::string("one"));
  EXPECT_EQ(s->get_string("a"), "one");
  s->set("a", Bytes{0, 255, 7});
  EXPECT_EQ(s->get("a"), (Bytes{0, 255, 7}));
  EXPECT_TRUE(s->check("a"));
  EXPECT_FALSE(s->check("b"));
  EXPECT_TRUE(s->remove("a"));
  EXPECT_FALSE(s->remove("a"));
  EXPECT_FALSE(s->check("a"));
}

TEST(Store, GetWaitsForTheKeyAndTimesOutNamingIt) {
  auto s = make_memory_store(2s);
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    s->set("addr", std::string("10.0.0.1:29500"));
  });
  EXPECT_EQ(s->get_string("addr"), "10.0.0.1:29500");  // blocks until set
  later.join();
  s->set_timeout(100ms);
  std::string why;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(status_of([&] { s->get("never"); }, &why), Status::Timeout);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms);
  EXPECT_TRUE(contains(why, "'never'")) << why;
  EXPECT_EQ(status_of([&] { s->set_timeout(0ms); }), Status::InvalidArgument);
}

TEST(Store, WaitForSeveralKeysNamesTheMissingOnes) {
  auto s = make_memory_store(1s);
  s->set("rank0", std::string("x"));
  std::string why;
  EXPECT_EQ(status_of([&] { s->wait({"rank0", "rank1", "rank2"}, 50ms); }, &why), Status::Timeout);
  EXPECT_TRUE(contains(why, "'rank1', 'rank2'")) << why;
  EXPECT_FALSE(contains(why, "rank0")) << why;
  std::thread t([&] {
    s->set("rank1", std::string("y"));
    s->set("rank2", std::string("z"));
  });
  s->wait({"rank0", "rank1", "rank2"});
  t.join();
}

TEST(Store, AddCountsAcrossThreadsAsDecimalText) {
  auto s = make_memory_store(1s);
  EXPECT_EQ(s->add("n", 5), 5);
  EXPECT_EQ(s->add("n", -2), 3);
  EXPECT_EQ(s->get_string("n"), "3");
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&] {
      for (int k = 0; k < 100; ++k) s->add("joined", 1);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(s->add("joined", 0), 800);
  s->set("text", std::string("abc"));
  EXPECT_EQ(status_of([&] { s->add("text", 1); }), Status::InvalidArgument);
}

TEST(Store, CompareSetAsC10d) {
  auto s = make_memory_store(1s);
  const Bytes a{'a'}, b{'b'}, c{'c'};
  EXPECT_EQ(s->compare_set("k", Bytes{}, a), a);  // absent and expected empty: set
  EXPECT_EQ(s->get("k"), a);
  EXPECT_EQ(s->compare_set("k", b, c), a);        // mismatch: unchanged, the current value
  EXPECT_EQ(s->get("k"), a);
  EXPECT_EQ(s->compare_set("k", a, c), c);        // match: replaced
  EXPECT_EQ(s->get("k"), c);
  EXPECT_EQ(s->compare_set("absent", b, c), b);   // absent, expected not empty: unchanged, `expected`
  EXPECT_FALSE(s->check("absent"));
}

// The real NCCL is loaded at run time, never linked: where it cannot be loaded, the backend is
// refused with the files tried named (here a library named by ACCEL_NCCL_LIBRARY that does
// not exist), and asking again says the same. (tests/scripts/check_no_cuda.sh: no CUDA or NCCL
// library is linked, and the examples run with them hidden.)
TEST(Factory, NcclThatCannotBeLoadedIsUnsupportedNamingTheFilesTried) {
  ::setenv("ACCEL_NCCL_LIBRARY", "/nonexistent/accel-test/libnccl.so.2", 1);
  std::string why, again;
  EXPECT_EQ(status_of([&] { real_nccl_library(); }, &why), Status::Unsupported);
  EXPECT_TRUE(contains(why, "/nonexistent/accel-test/libnccl.so.2") && contains(why, "ACCEL_NCCL_LIBRARY") &&
              contains(why, "ACCEL_BACKEND=gloo"))
      << why;
  EXPECT_EQ(status_of([&] { real_nccl_library(); }, &again), Status::Unsupported);
  EXPECT_EQ(again, why);
  ::unsetenv("ACCEL_NCCL_LIBRARY");
}

TEST(Factory, MakesTheBackendsItNamesAndRefusesOthers) {
  // then gloo where c10d's Gloo headers were found at configure time; nccl in every build
  // (it loads NCCL at run time)
  const std::string names = world::backend_names();
#ifdef ACCEL_TEST_EXPECT_GLOO  // c10d's Gloo was found at configure time: the table must name it
  EXPECT_EQ(names, "local, sim, gloo, nccl");
#else
  EXPECT_EQ(names, "local, sim, nccl");
#endif
  auto local = world::make_process_group(GroupConfig{});
  EXPECT_EQ(local->backend(), "local");
  EXPECT_EQ(local->size(), 1);
  std::string why;
  GroupConfig bad;
  bad.backend = "carrier-pigeon";
  EXPECT_EQ(status_of([&] { world::make_process_group(bad); }, &why), Status::InvalidArgument);
  EXPECT_TRUE(contains(why, "'carrier-pigeon'") && contains(why, "local, sim")) << why;
  GroupConfig sim;
  sim.backend = "sim";  // without a simulated world to join
  EXPECT_EQ(status_of([&] { world::make_process_group(sim); }, &why), Status::InvalidArgument);
  EXPECT_TRUE(contains(why, "accel_sim_run") && contains(why, "accel launch --backend sim")) << why;
}

TEST(Factory, SimGroupsAreTheWorldsRanks) {
  sim::WorldSettings ws;
  ws.world_size = 3;
  sim::World world(sim::world_options(ws));
  std::atomic<int> sum{0};
  auto rep = world.run([&](sim::Rank& rank) {
    auto c = world::simulated_rank(rank);
    EXPECT_EQ(c->backend(), "sim");
    EXPECT_EQ(c->rank(), rank.rank());
    int v = rank.rank() + 1;
    c->all_reduce(&v, &v, 1, DataType::Int32, RedOp::Sum)->wait();
    sum += v;
  });
  ASSERT_TRUE(rep.ok()) << rep.first_error();
  EXPECT_EQ(sum.load(), 3 * 6);
}

TEST(SimSettings, EachFieldCheckedAndNamed) {
  std::string why;
  sim::WorldSettings ws;
  ws.world_size = 9;  // 8xH100 has 8 GPUs
  EXPECT_EQ(status_of([&] { sim::world_options(ws); }, &why), Status::InvalidArgument);
  EXPECT_TRUE(contains(why, "world_size must be in [1, 8]")) << why;
  ws = {};
  ws.device_memory = "lots";
  EXPECT_EQ(status_of([&] { sim::world_options(ws); }, &why), Status::InvalidArgument);
  EXPECT_TRUE(contains(why, "device_memory")) << why;
  ws = {};
  ws.faults = "kill:5@step:1";
  EXPECT_EQ(status_of([&] { sim::world_options(ws); }, &why), Status::InvalidArgument);
  ws = {};
  ws.device_memory = "1GiB";
  ws.faults = "delay:1:0.5";
  sim::WorldOptions wo = sim::world_options(ws);
  EXPECT_EQ(wo.device_capacity, uint64_t{1} << 30);
  ASSERT_EQ(wo.faults.size(), 1u);
  EXPECT_EQ(wo.faults[0].rank, 1);
}

TEST(SimSettings, MissingCollectivesAreTypedCapabilities) {
  sim::WorldOptions wo;
  wo.world_size = 2;
  wo.missing = {"reduce_scatter:bfloat16", "send"};
  sim::World world(wo);
  auto rep = world.run([&](sim::Rank& rank) {
    Communicator& c = rank.comm();
    EXPECT_FALSE(c.supports(Collective::ReduceScatter, DataType::BFloat16));
    EXPECT_TRUE(c.supports(Collective::ReduceScatter, DataType::Float32));
    EXPECT_FALSE(c.supports(Collective::Send, DataType::Int8));
    EXPECT_TRUE(c.supports(Collective::AllReduce, DataType::BFloat16));
  });
  ASSERT_TRUE(rep.ok()) << rep.first_error();
  std::string why;
  wo.missing = {"all_reduce:float128"};
  EXPECT_EQ(status_of([&] { sim::World w(wo); }, &why), Status::InvalidArgument);
  EXPECT_TRUE(contains(why, "'float128'")) << why;
  wo.missing = {"allreduce"};
  EXPECT_EQ(status_of([&] { sim::World w(wo); }, &why), Status::InvalidArgument);
  EXPECT_TRUE(contains(why, "'allreduce' is not a collective")) << why;
}

// The launcher's environment, from a map instead of the process's variables.
LaunchEnv launch_env(const std::map<std::string, std::string>& vars) {
  return read_launch_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchEnv, NoLauncherIsOneProcess) {
  LaunchEnv e = launch_env({});
  EXPECT_FALSE(e.launched);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.master_port, 29500);
}

TEST(LaunchEnv, EachLauncherInTheDocumentedOrder) {
  LaunchEnv t = launch_env({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                            {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "1234"},
                            {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});  // torchrun's win
  EXPECT_EQ(t.launcher, "torchrun");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.world_size, 8);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.local_world_size, 2);
  EXPECT_EQ(t.master_addr, "10.1.2.3");
  EXPECT_EQ(t.master_port, 1234);
  LaunchEnv o = launch_env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"MASTER_ADDR", "h0"}});
  EXPECT_EQ(o.launcher, "Open MPI");
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.local_world_size, 4);
  LaunchEnv p = launch_env({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MASTER_ADDR", "h0"}});
  EXPECT_EQ(p.launcher, "MPICH/PMI");
  EXPECT_EQ(p.local_rank, 2);  // one node: local = global
  EXPECT_EQ(p.local_world_size, 3);
  LaunchEnv s = launch_env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                            {"SLURM_NTASKS_PER_NODE", "4(x2)"}, {"SLURM_LAUNCH_NODE_IPADDR", "192.168.0.7"}});
  EXPECT_EQ(s.launcher, "Slurm");
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.local_rank, 1);
  EXPECT_EQ(s.local_world_size, 4);
  EXPECT_EQ(s.master_addr, "192.168.0.7");  // derived: the node srun ran on
}

TEST(LaunchEnv, BadOrContradictoryVariablesNamed) {
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"RANK", "0"}}, "WORLD_SIZE is not"},
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}}, "RANK=4 is not below WORLD_SIZE=4"},
      {{{"RANK", "one"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}}, "RANK='one' is not an integer"},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}}, "RANK='-1'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE='0'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
       "LOCAL_RANK=2 is not below the node's 2 processes"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "MASTER_ADDR is not set"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT='70000'"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, "Slurm started 2 processes but MASTER_ADDR is not set"},
  };
  for (const auto& [vars, expected] : cases) {
    std::string why;
    EXPECT_EQ(status_of([&] { launch_env(vars); }, &why), Status::InvalidArgument) << expected;
    EXPECT_TRUE(contains(why, expected)) << why << " (expected: " << expected << ")";
  }
}

}  // namespace
}  // namespace accel::comm
