// c10d's TCPStore behind the Store interface, across real processes: this binary re-runs
// itself as the clients (TcpStore.Client, which does nothing unless ACCEL_TEST_STORE_PORT is
// set), so every process is a fresh exec, as a launcher starts them.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/c10d/tcp_store.h"
#include "comm/communicator.h"

namespace accel::comm {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A client process: its rank and the server's port from the environment.
TEST(TcpStore, Client) {
  const char* port = std::getenv("ACCEL_TEST_STORE_PORT");
  if (!port) GTEST_SKIP() << "run by TcpStore.ThreeProcessesMeet as one of its clients";
  const std::string rank = std::getenv("ACCEL_TEST_STORE_RANK");
  TcpStoreConfig c;
  c.port = std::atoi(port);
  c.world_size = 3;
  c.timeout = 10s;
  auto s = make_tcp_store(c);
  s->set("rank" + rank, "hello from " + rank);
  EXPECT_GE(s->add("joined", 1), 1);
  s->wait({"rank0", "rank1", "rank2"});
  EXPECT_EQ(s->get_string("rank0"), "hello from 0");
  EXPECT_EQ(s->get_string(rank == "1" ? "rank2" : "rank1"), rank == "1" ? "hello from 2" : "hello from 1");
  // one leader: compare_set from an absent key succeeds for exactly one process
  const Bytes mine(rank.begin(), rank.end());
  const Bytes got = s->compare_set("leader", Bytes{}, mine);
  s->add(got == mine ? "won" : "lost", 1);
  s->add("done", 1);
}

TEST(TcpStore, ThreeProcessesMeet) {
  if (std::getenv("ACCEL_TEST_STORE_PORT")) GTEST_SKIP() << "a client";
  TcpStoreConfig c;
  c.port = 0;  // a free port
  c.is_server = true;
  c.world_size = 3;
  c.timeout = 10s;
  int port = 0;
  auto s = make_tcp_store(c, &port);
  ASSERT_GT(port, 0);
  s->set("rank0", "hello from 0");
  std::vector<pid_t> kids;
  for (int r = 1; r <= 2; ++r) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      setenv("ACCEL_TEST_STORE_PORT", std::to_string(port).c_str(), 1);
      setenv("ACCEL_TEST_STORE_RANK", std::to_string(r).c_str(), 1);
      execl("/proc/self/exe", "test_tcp_store", "--gtest_filter=TcpStore.Client", static_cast<char*>(nullptr));
      _exit(127);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(k, &status, 0), k);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a client failed: status " << status;
  }
  EXPECT_EQ(s->add("joined", 0), 2);
  EXPECT_EQ(s->add("done", 0), 2);
  EXPECT_EQ(s->add("won", 0), 1);  // exactly one leader
  EXPECT_EQ(s->add("lost", 0), 1);
  const std::string leader = s->get_string("leader");
  EXPECT_TRUE(leader == "1" || leader == "2") << leader;
  EXPECT_TRUE(s->check("rank2"));
  EXPECT_TRUE(s->remove("rank2"));
  EXPECT_FALSE(s->check("rank2"));
}

TEST(TcpStore, AKeyThatNeverComesTimesOutNamingIt) {
  if (std::getenv("ACCEL_TEST_STORE_PORT")) GTEST_SKIP() << "a client";
  TcpStoreConfig c;
  c.port = 0;
  c.is_server = true;
  c.timeout = 300ms;
  auto s = make_tcp_store(c);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    s->get("never");
    FAIL() << "get of a key nobody sets returned";
  } catch (const CommError& e) {
    EXPECT_EQ(e.status(), Status::Timeout) << e.what();
    EXPECT_TRUE(contains(e.what(), "'never'")) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  try {
    s->wait({"a", "b"}, 200ms);
    FAIL() << "wait returned";
  } catch (const CommError& e) {
    EXPECT_EQ(e.status(), Status::Timeout) << e.what();
    EXPECT_TRUE(contains(e.what(), "'a', 'b'")) << e.what();
  }
}

TEST(TcpStore, AnUnreachableServerFailsWithinTheTimeout) {
  if (std::getenv("ACCEL_TEST_STORE_PORT")) GTEST_SKIP() << "a client";
  // a port nothing listens on: take a free one from a server, then close it
  int port = 0;
  {
    TcpStoreConfig c;
    c.port = 0;
    c.is_server = true;
    make_tcp_store(c, &port);
  }
  TcpStoreConfig c;
  c.port = port;
  c.timeout = 1s;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    make_tcp_store(c);
    FAIL() << "connected to a server that is not there";
  } catch (const CommError& e) {
    EXPECT_TRUE(e.status() == Status::Timeout || e.status() == Status::Communication) << e.what();
    EXPECT_TRUE(contains(e.what(), "connect to 127.0.0.1:" + std::to_string(port))) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  TcpStoreConfig bad;
  bad.port = 0;  // a client cannot connect to port 0
  try {
    make_tcp_store(bad);
    FAIL();
  } catch (const CommError& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument) << e.what();
  }
}

}  // namespace
}  // namespace accel::comm
