// Collective fingerprints across real processes (see guard.h).
#include "comm/guard.h"

#include "base/text.h"
#include "comm/rendezvous.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

namespace accel::comm {

bool comm_check_enabled() {
  const char* v = std::getenv("ACCEL_COMM_CHECK");
  if (!v) return true;
  const std::string s(v);
  return !(s == "0" || s == "off" || s == "false" || s == "no");
}

namespace {

using Ms = std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

// The wall clock at the resolution of a scheduler tick (a few ms), at a fraction of the cost
// of a precise reading: what every call records of when it was posted.
int64_t coarse_epoch_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

int64_t epoch_ms() {
  return std::chrono::duration_cast<Ms>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One call's fingerprint: what every process must agree on for the same number.
struct Call {
  Collective kind = Collective::Barrier;
  uint64_t seq = 0;  // collectives: this process's count of them; send/recv: per peer and direction
  uint64_t count = 0;
  DataType t = DataType::Float32;
  RedOp op = RedOp::Sum;
  int root = -1;
  int peer = -1;

  bool collective() const { return kind != Collective::Send && kind != Collective::Recv; }
  bool same(const Call& o) const {
    return kind == o.kind && count == o.count && (kind == Collective::Barrier || t == o.t) &&
           (!collective_has_op(kind) || op == o.op) && (!collective_has_root(kind) || root == o.root);
  }
  std::string describe() const { return describe_call(kind, seq, count, t, op, root, peer); }
  std::string encode() const {
    std::ostringstream os;
    os << static_cast<int>(kind) << ' ' << seq << ' ' << count << ' ' << static_cast<int>(t) << ' ' << static_cast<int>(op)
       << ' ' << root << ' ' << peer;
    return os.str();
  }
  static std::optional<Call> decode(const std::string& s) {
    std::istringstream is(s);
    int k, t, op;
    Call c;
    if (!(is >> k >> c.seq >> c.count >> t >> op >> c.root >> c.peer)) return std::nullopt;
    if (k < 0 || k >= kNumCollectives || t < 0 || t >= kNumDataTypes || op < 0 || op >= kNumRedOps) return std::nullopt;
    c.kind = static_cast<Collective>(k);
    c.t = static_cast<DataType>(t);
    c.op = static_cast<RedOp>(op);
    return c;
  }
};

// Where a process is, as it publishes it (accel/watch/status/<rank>).
struct Where {
  std::string state = "running";  // running, waiting, finished
  uint64_t collectives = 0;        // collectives posted
  int64_t last_ms = 0;             // when the last call was posted (epoch ms)
  std::optional<Call> waiting;     // the call it waits in
  int64_t waiting_ms = 0;          // since when
  std::vector<Call> history;       // its last calls, oldest first

  std::string encode() const {
    std::ostringstream os;
    os << "state=" << state << "\ncollectives=" << collectives << "\nlast_ms=" << last_ms << "\n";
    if (waiting) os << "waiting=" << waiting->encode() << "\nwaiting_ms=" << waiting_ms << "\n";
    for (const auto& c : history) os << "call=" << c.encode() << "\n";
    return os.str();
  }
  static Where decode(const Bytes& b) {
    Where w;
    std::istringstream in(std::string(b.begin(), b.end()));
    for (std::string line; std::getline(in, line);) {
      const size_t eq = line.find('=');
      if (eq == std::string::npos) continue;
      const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
      if (k == "state") w.state = v;
      else if (k == "collectives") w.collectives = std::strtoull(v.c_str(), nullptr, 10);
      else if (k == "last_ms") w.last_ms = std::strtoll(v.c_str(), nullptr, 10);
      else if (k == "waiting") w.waiting = Call::decode(v);
      else if (k == "waiting_ms") w.waiting_ms = std::strtoll(v.c_str(), nullptr, 10);
      else if (k == "call") {
        if (auto c = Call::decode(v)) w.history.push_back(*c);
      }
    }
    return w;
  }
};

struct Peer {
  long pid = 0;
  std::string host, pidspace;
};

std::string ago(int64_t then_ms) {
  if (then_ms <= 0) return "";
  const double s = static_cast<double>(epoch_ms() - then_ms) / 1000.0;
  std::ostringstream os;
  os.precision(s < 10 ? 2 : 3);
  os << (s < 0 ? 0.0 : s) << " s ago";
  return os.str();
}

std::string this_host() {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  return host;
}

constexpr size_t kHistory = 16;
const char* const kVerdictKey = "accel/watch/verdict";
std::string status_key(int r) { return "accel/watch/status/" + std::to_string(r); }

class GuardWork;

class Guard final : public Communicator, public std::enable_shared_from_this<Guard> {
 public:
  Guard(std::shared_ptr<Communicator> inner, Ms timeout)
      : inner_(std::move(inner)), store_(inner_->store()), timeout_(timeout), rank_(inner_->rank()),
        size_(inner_->size()), host_(this_host()), pidspace_(pid_space()) {
    check_after_ = std::min<Ms>(Ms(1000), std::max<Ms>(Ms(50), timeout_ / 4));
    if (const char* d = std::getenv("ACCEL_LAUNCH_STATUS_DIR")) status_dir_ = d;
    peers_.resize(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {  // what each process said of itself at the rendezvous
      try {
        auto f = joined(*store_, r);
        peers_[r].pid = std::strtol(f["pid"].c_str(), nullptr, 10);
        peers_[r].host = f["host"];
        peers_[r].pidspace = f["pidspace"];
      } catch (...) {
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      publish_locked();  // "no call yet", until the first
    }
    publisher_ = std::thread([this] { publish_loop(); });
  }

  ~Guard() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    publisher_.join();
    if (!failed_) {
      std::lock_guard<std::mutex> lk(mu_);
      where_.state = "finished";
      publish_locked();
    } else {
      // An operation of the inner communicator may never complete (its peer called
      // something else): destroying it would wait for it (c10d's Gloo joins its worker,
      // up to the timeout). Kept instead, reachable, until the process ends.
      static std::mutex m;
      static auto* kept = new std::vector<std::shared_ptr<Communicator>>();
      std::lock_guard<std::mutex> lk(m);
      kept->push_back(inner_);
      // The process hosting the store (rank 0) stays a moment, so that the others can read
      // the verdict before the store goes with it.
      if (rank_ == 0 && verdict_) linger_for_acks();
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return inner_->local_rank(); }
  int local_size() const override { return inner_->local_size(); }
  std::string backend() const override { return inner_->backend(); }
  bool reaches(const Device& d) const override { return inner_->reaches(d); }
  Device home() const override { return inner_->home(); }
  Store* store() override { return store_; }
  bool supports(Collective op, DataType t) const override { return inner_->supports(op, t); }
  bool shared_memory() const override { return inner_->shared_memory(); }

  std::shared_ptr<Work> all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                   PreMul premul) override {
    return track(collective(Collective::AllReduce, count, t, op, -1), [&] { return inner_->all_reduce(send, recv, count, t, op, premul); });
  }
  std::shared_ptr<Work> reduce_scatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                       PreMul premul) override {
    return track(collective(Collective::ReduceScatter, recvcount, t, op, -1),
                 [&] { return inner_->reduce_scatter(send, recv, recvcount, t, op, premul); });
  }
  std::shared_ptr<Work> all_gather(const void* send, void* recv, size_t sendcount, DataType t) override {
    return track(collective(Collective::AllGather, sendcount, t, RedOp::Sum, -1),
                 [&] { return inner_->all_gather(send, recv, sendcount, t); });
  }
  std::shared_ptr<Work> broadcast(const void* send, void* recv, size_t count, DataType t, int root) override {
    return track(collective(Collective::Broadcast, count, t, RedOp::Sum, root),
                 [&] { return inner_->broadcast(send, recv, count, t, root); });
  }
  std::shared_ptr<Work> reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
                               PreMul premul) override {
    return track(collective(Collective::Reduce, count, t, op, root),
                 [&] { return inner_->reduce(send, recv, count, t, op, root, premul); });
  }
  std::shared_ptr<Work> send(const void* buf, size_t count, DataType t, int peer) override {
    return track(p2p(Collective::Send, count, t, peer), [&] { return inner_->send(buf, count, t, peer); });
  }
  std::shared_ptr<Work> recv(void* buf, size_t count, DataType t, int peer) override {
    return track(p2p(Collective::Recv, count, t, peer), [&] { return inner_->recv(buf, count, t, peer); });
  }
  void barrier() override;
  void group_start() override { inner_->group_start(); }
  void group_end() override { inner_->group_end(); }

  // Waits for `w` (the inner operation `c`), checking across the processes when it is long.
  void wait(Work& w, const Call& c);

 private:
  Call collective(Collective k, size_t count, DataType t, RedOp op, int root) {
    Call c;
    c.kind = k;
    c.count = count;
    c.t = t;
    c.op = op;
    c.root = root;
    return c;
  }
  Call p2p(Collective k, size_t count, DataType t, int peer) {
    Call c;
    c.kind = k;
    c.count = count;
    c.t = t;
    c.peer = peer;
    return c;
  }

  template <class F>
  std::shared_ptr<Work> track(Call c, F&& post);

  // Numbers `c` and records it; returns it numbered.
  Call record(Call c) {
    std::lock_guard<std::mutex> lk(mu_);
    if (c.collective()) {
      c.seq = ++where_.collectives;
    } else {
      auto& seqs = c.kind == Collective::Send ? send_seq_ : recv_seq_;
      if (seqs.empty()) seqs.resize(static_cast<size_t>(size_), 0);
      if (c.peer >= 0 && c.peer < size_) c.seq = ++seqs[static_cast<size_t>(c.peer)];
    }
    history_[calls_ % kHistory] = c;
    ++calls_;
    where_.last_ms = coarse_epoch_ms();
    return c;
  }

  // this process's Where, with its history (mu_ held)
  Where snapshot_locked() {
    Where w = where_;
    const uint64_t n = std::min<uint64_t>(calls_, kHistory);
    for (uint64_t i = calls_ - n; i < calls_; ++i) w.history.push_back(history_[i % kHistory]);
    return w;
  }
  void publish_locked() {
    try {
      store_->set(status_key(rank_), snapshot_locked().encode());
      published_ = calls_;
    } catch (...) {  // the store is gone (its host, rank 0, ended): nothing to tell
    }
  }
  void publish_loop() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
      cv_.wait_for(lk, std::chrono::seconds(1));
      if (!stop_ && calls_ != published_) publish_locked();
    }
  }

  // Another process's published Where (null when it has published nothing or the store is gone).
  std::optional<Where> read(int r) {
    try {
      if (!store_->check(status_key(r))) return std::nullopt;
      return Where::decode(store_->get(status_key(r)));
    } catch (...) {
      return std::nullopt;
    }
  }

  // How process `r` ended, when it has: its pid, in this process's pid space, is gone (or a
  // zombie). Empty while it runs, or when it runs in another pid space (another machine,
  // another container's pid namespace: not observable from here).
  std::string ended(int r) {
    const Peer& p = peers_[static_cast<size_t>(r)];
    if (p.pid <= 0 || pidspace_.empty() || p.pidspace != pidspace_ || p.pid == static_cast<long>(getpid())) return "";
    bool gone = false;
    int zombie_status = -1;
    if (::kill(static_cast<pid_t>(p.pid), 0) != 0) {
      gone = errno == ESRCH;
    } else {  // a zombie not reaped yet by its parent has ended too: /proc says how
      std::ifstream f("/proc/" + std::to_string(p.pid) + "/stat");
      std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const size_t close = stat.rfind(')');
      if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') {
        gone = true;
        std::istringstream rest(stat.substr(close + 2));
        std::vector<std::string> fields;
        for (std::string x; rest >> x;) fields.push_back(x);
        if (fields.size() >= 50) zombie_status = std::atoi(fields[49].c_str());  // field 52: exit_code
      }
    }
    if (!gone) return "";
    std::string how = "exited";
    if (!status_dir_.empty()) {  // accel launch writes each rank's end there when it reaps it
      const std::string file = status_dir_ + "/rank-" + std::to_string(r);
      for (int i = 0; i < 20; ++i) {
        std::ifstream f(file);
        std::string line;
        if (f && std::getline(f, line) && !line.empty()) {
          how = line;
          break;
        }
        std::this_thread::sleep_for(Ms(50));
      }
    } else if (zombie_status >= 0) {
      how = text::wait_status_text(zombie_status);
    }
    return how;
  }

  std::string who(int r) const {
    const Peer& p = peers_[static_cast<size_t>(r)];
    std::string s = "rank " + std::to_string(r);
    if (p.pid > 0) s += " (pid " + std::to_string(p.pid) + (p.host != host_ ? " on " + p.host : "") + ")";
    return s;
  }

  struct Verdict {
    Result result;
    std::string text;
  };
  std::optional<Verdict> analyse(const Call& waiting, std::string* where_text);
  void adopt_or_publish(Verdict& v);
  void linger_for_acks();
  [[noreturn]] void fail_with(const Verdict& v, const std::string& op_text);
  [[noreturn]] void explain(const CommError& e, const Call& c, const std::string& op_text, Ms patience);

  std::shared_ptr<Communicator> inner_;
  Store* store_;  // inner_'s
  Ms timeout_, check_after_;
  int rank_, size_;
  std::string host_, pidspace_, status_dir_;
  std::vector<Peer> peers_;

  std::mutex mu_;  // guards what follows (the publisher thread reads it)
  std::condition_variable cv_;
  bool stop_ = false;
  Where where_;
  std::array<Call, kHistory> history_{};
  uint64_t calls_ = 0, published_ = 0;
  std::vector<uint64_t> send_seq_, recv_seq_;
  std::atomic<bool> failed_{false};   // an inner operation may be left in flight
  std::atomic<bool> verdict_{false};  // this process failed with a verdict it published or adopted
  std::thread publisher_;
};

// The inner operation and its fingerprint: waiting goes through the guard.
class GuardWork final : public Work {
 public:
  GuardWork(std::shared_ptr<Guard> g, std::shared_ptr<Work> w, Call c) : g_(std::move(g)), w_(std::move(w)), c_(c) {}
  void wait() override {
    if (done_) return w_->wait();
    g_->wait(*w_, c_);
    done_ = true;
  }
  bool test() override { return w_->test(); }
  const Work* underlying() const override { return w_->underlying(); }
  bool wait_for(std::chrono::milliseconds d) override {
    if (done_ || w_->wait_for(d)) {
      done_ = true;
      return true;
    }
    return false;
  }

 private:
  std::shared_ptr<Guard> g_;
  std::shared_ptr<Work> w_;
  Call c_;
  bool done_ = false;
};

template <class F>
std::shared_ptr<Work> Guard::track(Call c, F&& post) {
  std::shared_ptr<Work> w = post();  // numbered once posted: a call refused here has no number
  return std::make_shared<GuardWork>(shared_from_this(), std::move(w), record(c));
}

void Guard::barrier() {
  Call c = record(collective(Collective::Barrier, 0, DataType::Uint8, RedOp::Sum, -1));
  if (!inner_->reaches(Device{})) {  // a backend on device memory (NCCL): its own barrier
    inner_->barrier();
    return;
  }
  // c10d's Gloo barrier blocks in the call: as an all-reduce of one byte of host memory it can
  // be waited on with checks (the same rendezvous for every process; a barrier's fingerprint
  // is its kind).
  auto byte = std::make_unique<uint8_t>(0);
  auto w = inner_->all_reduce(byte.get(), byte.get(), 1, DataType::Uint8, RedOp::Sum);
  try {
    wait(*w, c);
  } catch (...) {
    (void)byte.release();  // the operation may still write it: kept (a byte) with the inner communicator
    throw;
  }
}

std::optional<Guard::Verdict> Guard::analyse(const Call& waiting, std::string* where_text) {
  // A verdict another process reached already.
  try {
    if (store_->check(kVerdictKey)) {
      const Bytes b = store_->get(kVerdictKey);
      const std::string s(b.begin(), b.end());
      const size_t bar = s.find('|');
      if (bar != std::string::npos) {
        try {
          store_->add("accel/watch/acks", 1);
        } catch (...) {
        }
        return Verdict{static_cast<Result>(std::atoi(s.substr(0, bar).c_str())), s.substr(bar + 1)};
      }
    }
  } catch (...) {
  }
  std::vector<std::optional<Where>> all(static_cast<size_t>(size_));
  {
    std::lock_guard<std::mutex> lk(mu_);
    all[static_cast<size_t>(rank_)] = snapshot_locked();
  }
  for (int r = 0; r < size_; ++r)
    if (r != rank_) all[static_cast<size_t>(r)] = read(r);

  // Collectives of one number that differ.
  std::map<uint64_t, std::map<int, Call>> by_seq;
  for (int r = 0; r < size_; ++r)
    if (const auto& w = all[static_cast<size_t>(r)]) {
      for (const auto& c : w->history)
        if (c.collective()) by_seq[c.seq][r] = c;
      if (w->waiting && w->waiting->collective()) by_seq[w->waiting->seq][r] = *w->waiting;
    }
  for (const auto& [seq, calls] : by_seq) {
    const Call& first = calls.begin()->second;
    bool differ = false;
    for (const auto& [r, c] : calls) differ |= !c.same(first);
    if (!differ) continue;
    std::ostringstream os;
    os << "mismatched collectives at call #" << seq << ":";
    for (const auto& [r, c] : calls) os << " rank " << r << " called " << c.describe() << ";";
    os << " every rank must make the same calls in the same order";
    return Verdict{Result::InvalidUsage, os.str()};
  }
  // Sends and receives of one pair and number that differ.
  for (int a = 0; a < size_; ++a) {
    const auto& wa = all[static_cast<size_t>(a)];
    if (!wa) continue;
    for (const auto& s : wa->history) {
      if (s.kind != Collective::Send || s.peer < 0 || s.peer >= size_) continue;
      const auto& wb = all[static_cast<size_t>(s.peer)];
      if (!wb) continue;
      for (const auto& r : wb->history)
        if (r.kind == Collective::Recv && r.peer == a && r.seq == s.seq && (r.count != s.count || r.t != s.t))
          return Verdict{Result::InvalidUsage, "send/recv mismatch between rank " + std::to_string(a) + " and rank " +
                                                   std::to_string(s.peer) + ": " + s.describe() + " vs " + r.describe()};
    }
  }
  // Processes that ended, or stopped short of the call waited for; where each one is.
  std::ostringstream where;
  std::optional<Verdict> gone;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (waiting.kind != Collective::Barrier && !waiting.collective() && r != waiting.peer) continue;
    const auto& w = all[static_cast<size_t>(r)];
    const std::string end = ended(r);
    std::string last;  // where it is, as it last published
    if (w && w->waiting)
      last = "waits in " + w->waiting->describe() + " (since " + ago(w->waiting_ms) + ")";
    else if (w && !w->history.empty())
      last = "its last call: " + w->history.back().describe() + ", " + ago(w->last_ms);
    else if (w)
      last = "has made no call yet";
    const bool called = waiting.collective() && w && w->collectives >= waiting.seq;
    if (!end.empty() || (w && w->state == "finished")) {
      const std::string how = !end.empty() ? end : "shut down its communicator";
      if (!gone && !called)  // (what it published last may be older than its end)
        gone = Verdict{Result::RemoteError,
                       who(r) + " " + how +
                           (w ? " without calling " + waiting.describe() + " (as it last published: " + last + ")"
                              : " before " + waiting.describe() + " could complete")};
      where << " " << who(r) << " " << how << (last.empty() ? "" : " (" + last + ")") << ";";
    } else {
      where << " " << who(r) << " " << (last.empty() ? "cannot be asked (the store is gone)" : last) << ";";
    }
  }
  if (where_text) *where_text = where.str();
  return gone;
}

void Guard::adopt_or_publish(Verdict& v) {
  verdict_ = true;
  const std::string mine = std::to_string(static_cast<int>(v.result)) + "|" + v.text;
  try {
    const Bytes now = store_->compare_set(kVerdictKey, Bytes{}, Bytes(mine.begin(), mine.end()));
    const std::string s(now.begin(), now.end());
    const size_t bar = s.find('|');
    if (s != mine && bar != std::string::npos) v = Verdict{static_cast<Result>(std::atoi(s.substr(0, bar).c_str())), s.substr(bar + 1)};
  } catch (...) {
  }
}

void Guard::linger_for_acks() {
  const auto until = SteadyClock::now() + std::min<Ms>(Ms(3000), timeout_);
  while (SteadyClock::now() < until) {
    int live = 0;
    for (int r = 1; r < size_; ++r) live += ended(r).empty() ? 1 : 0;
    int64_t acks = 0;
    try {
      acks = store_->add("accel/watch/acks", 0);
    } catch (...) {
      return;
    }
    if (acks >= size_ - 1 || live == 0) return;
    std::this_thread::sleep_for(Ms(50));
  }
}

void Guard::fail_with(const Verdict& v, const std::string& op_text) {
  failed_ = true;
  throw CommError(v.result, backend() + ": " + op_text + ": " + v.text);
}

// The inner operation failed by itself (Gloo's or NCCL's error): a misuse found in this
// process (waiting inside a group...) is thrown as it is; otherwise the others' state explains
// it when it can, looked at for up to `patience` (their statuses may not be published yet).
void Guard::explain(const CommError& e, const Call& c, const std::string& op_text, Ms patience) {
  if (e.result() == Result::InvalidUsage || e.result() == Result::InvalidArgument) throw e;
  failed_ = true;
  std::string where;
  const auto until = SteadyClock::now() + patience;
  for (;;) {
    if (auto v = analyse(c, &where)) {
      adopt_or_publish(*v);
      throw CommError(v->result, backend() + ": " + op_text + ": " + v->text + " (" + e.what() + ")");
    }
    if (SteadyClock::now() >= until) break;
    std::this_thread::sleep_for(Ms(100));
  }
  throw CommError(e.result(), std::string(e.what()) + (where.empty() ? "" : "; the other processes:" + where));
}

void Guard::wait(Work& w, const Call& c) {
  const auto t0 = SteadyClock::now();
  auto text = [&] { return c.describe() + " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")"; };
  try {
    if (w.wait_for(check_after_)) return;  // the common case: nothing written, nothing checked
  } catch (const CommError& e) {
    explain(e, c, text(), Ms(2000));
  }
  const std::string op_text = text();
  // A long wait: tell the others where this process is, and look where they are.
  {
    std::lock_guard<std::mutex> lk(mu_);
    where_.state = "waiting";
    where_.waiting = c;
    where_.waiting_ms = epoch_ms() - std::chrono::duration_cast<Ms>(SteadyClock::now() - t0).count();
  }
  struct Back {
    Guard* g;
    ~Back() {
      std::lock_guard<std::mutex> lk(g->mu_);
      g->where_.state = "running";
      g->where_.waiting.reset();
    }
  } back{this};
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      publish_locked();
    }
    std::string where;
    if (auto v = analyse(c, &where)) {
      adopt_or_publish(*v);
      fail_with(*v, op_text);
    }
    const auto waited = SteadyClock::now() - t0;
    if (waited >= timeout_) {
      // The backend's own deadline (from the post, as long) is due: its wait ends the
      // operation as it does (NCCL aborts its communicator) with its own words, to which
      // where the others are is added.
      failed_ = true;
      try {
        w.wait();
      } catch (const CommError& e) {
        throw CommError(e.result(), std::string(e.what()) + "; the other processes:" + where);
      }
      failed_ = false;
      return;
    }
    try {
      if (w.wait_for(std::min<Ms>(check_after_, std::chrono::duration_cast<Ms>(timeout_ - waited) + Ms(1)))) return;
    } catch (const CommError& e) {
      explain(e, c, op_text, Ms(0));
    }
  }
}

}  // namespace

std::shared_ptr<Communicator> guard_communicator(std::shared_ptr<Communicator> inner, std::chrono::milliseconds timeout) {
  if (!inner || !inner->store() || inner->size() <= 1) return inner;
  return std::make_shared<Guard>(std::move(inner), timeout);
}

}  // namespace accel::comm
