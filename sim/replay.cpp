// The event-driven replay (sim/replay.h). Each rank runs its program until it must wait for
// a collective that some rank has not posted yet; the rank that posts last completes it and
// wakes the ranks waiting on it. Every call and every rank costs O(1); memory is O(ranks +
// calls of one program). The timing rules are the World's (sim/scheduler.cpp): a posted
// collective launches at the rank's compute clock; it starts when its last rank launched it
// and the communication stream is free (collectives complete in posting order); its length is
// collective_cost's for the topology, size, rank count and whether NVLS can run it; a wait
// moves the compute clock to the collective's end; a rank's time is the later of its clocks.
#include "sim/replay.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/status.h"
#include "base/text.h"
#include "comm/kernels.h"

namespace accel::sim {

ReplayProgram& ReplayProgram::compute(double seconds) {
  ReplayStep s;
  s.kind = ReplayStep::Compute;
  s.seconds = seconds;
  steps.push_back(s);
  return *this;
}

uint32_t ReplayProgram::post(CollKind coll, uint64_t bytes, comm::DataType dtype, comm::RedOp op) {
  ReplayStep s;
  s.kind = ReplayStep::Post;
  s.coll = coll;
  s.bytes = bytes;
  s.dtype = dtype;
  s.op = op;
  steps.push_back(s);
  return posts_++;
}

ReplayProgram& ReplayProgram::wait(uint32_t post) {
  ReplayStep s;
  s.kind = ReplayStep::Wait;
  s.post = post;
  steps.push_back(s);
  return *this;
}

ReplayProgram& ReplayProgram::wait_all() {
  ReplayStep s;
  s.kind = ReplayStep::WaitAll;
  steps.push_back(s);
  return *this;
}

bool ReplayProgram::operator==(const ReplayProgram& o) const {
  if (steps.size() != o.steps.size()) return false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const ReplayStep &a = steps[i], &b = o.steps[i];
    if (a.kind != b.kind || a.coll != b.coll || a.dtype != b.dtype || a.op != b.op || a.bytes != b.bytes ||
        a.seconds != b.seconds || a.post != b.post)
      return false;
  }
  return true;
}

namespace {

const char* kKinds[] = {"compute", "post", "wait", "wait_all"};

CollKind coll_of(const std::string& name) {
  for (CollKind k : {CollKind::AllReduce, CollKind::ReduceScatter, CollKind::AllGather, CollKind::Broadcast,
                     CollKind::Reduce, CollKind::Barrier})
    if (name == coll_name(k)) return k;
  ACCEL_CHECK(false, Status::InvalidArgument, "recording: unknown collective '", name, "'");
  return CollKind::AllReduce;
}

comm::DataType dtype_of(const std::string& name) {
  for (int t = 0; t < comm::kNumDataTypes; ++t)
    if (name == comm::dtype_name(static_cast<comm::DataType>(t))) return static_cast<comm::DataType>(t);
  ACCEL_CHECK(false, Status::InvalidArgument, "recording: unknown data type '", name, "'");
  return comm::DataType::Float32;
}

comm::RedOp op_of(const std::string& name) {
  for (int o = 0; o < comm::kNumRedOps; ++o)
    if (name == comm::op_name(static_cast<comm::RedOp>(o))) return static_cast<comm::RedOp>(o);
  ACCEL_CHECK(false, Status::InvalidArgument, "recording: unknown reduction '", name, "'");
  return comm::RedOp::Sum;
}

}  // namespace

std::string recording_json(const ReplayRecording& rec) {
  nlohmann::json j;
  j["accel_sim_recording"] = 1;
  j["world_size"] = rec.world_size;
  j["topology"] = rec.topology;
  j["predicted_seconds"] = rec.predicted_seconds;
  j["approximate"] = rec.approximate;
  j["program_of"] = rec.program_of;
  nlohmann::json progs = nlohmann::json::array();
  for (const ReplayProgram& p : rec.programs) {
    nlohmann::json steps = nlohmann::json::array();
    for (const ReplayStep& st : p.steps) {
      switch (st.kind) {
        case ReplayStep::Compute: steps.push_back({kKinds[0], st.seconds}); break;
        case ReplayStep::Post:
          steps.push_back({kKinds[1], coll_name(st.coll), st.bytes, comm::dtype_name(st.dtype), comm::op_name(st.op)});
          break;
        case ReplayStep::Wait: steps.push_back({kKinds[2], st.post}); break;
        case ReplayStep::WaitAll: steps.push_back({kKinds[3]}); break;
      }
    }
    progs.push_back({{"name", p.name}, {"steps", steps}});
  }
  j["programs"] = progs;
  return j.dump() + "\n";
}

ReplayRecording parse_recording(const std::string& text) {
  ReplayRecording rec;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    ACCEL_CHECK(false, Status::InvalidArgument, "recording: not JSON (", e.what(), ")");
  }
  try {
    ACCEL_CHECK(j.value("accel_sim_recording", 0) == 1, Status::InvalidArgument,
                "recording: not an accel simulator recording (no \"accel_sim_recording\": 1)");
    rec.world_size = j.at("world_size").get<int>();
    rec.topology = j.at("topology").get<std::string>();
    rec.predicted_seconds = j.at("predicted_seconds").get<double>();
    rec.approximate = j.value("approximate", std::string());
    rec.program_of = j.at("program_of").get<std::vector<uint32_t>>();
    for (const auto& pj : j.at("programs")) {
      ReplayProgram p;
      p.name = pj.value("name", std::string());
      for (const auto& st : pj.at("steps")) {
        const std::string kind = st.at(0).get<std::string>();
        if (kind == kKinds[0]) {
          p.compute(st.at(1).get<double>());
        } else if (kind == kKinds[1]) {
          p.post(coll_of(st.at(1).get<std::string>()), st.at(2).get<uint64_t>(), dtype_of(st.at(3).get<std::string>()),
                 op_of(st.at(4).get<std::string>()));
        } else if (kind == kKinds[2]) {
          p.wait(st.at(1).get<uint32_t>());
        } else if (kind == kKinds[3]) {
          p.wait_all();
        } else {
          ACCEL_CHECK(false, Status::InvalidArgument, "recording: unknown step '", kind, "'");
        }
      }
      rec.programs.push_back(std::move(p));
    }
  } catch (const nlohmann::json::exception& e) {
    ACCEL_CHECK(false, Status::InvalidArgument, "recording: ", e.what());
  }
  ACCEL_CHECK(rec.world_size >= 1 && rec.program_of.size() == static_cast<size_t>(rec.world_size) &&
                  !rec.programs.empty(),
              Status::InvalidArgument, "recording: world_size ", rec.world_size, " with ", rec.program_of.size(),
              " ranks' programs");
  for (uint32_t p : rec.program_of)
    ACCEL_CHECK(p < rec.programs.size(), Status::InvalidArgument, "recording: program ", p, " of ", rec.programs.size());
  return rec;
}

ReplayRecording read_recording(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ACCEL_CHECK(f.good(), Status::IO, "cannot read the recording '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_recording(ss.str());
}

ReplayOptions replay_options(const ReplayRecording& rec, int world_size, const std::string& topology) {
  ReplayOptions o;
  o.world_size = world_size;
  o.topology = topology;
  o.programs = rec.programs;
  if (world_size == rec.world_size) {
    o.program_of = rec.program_of;
  } else {
    ACCEL_CHECK(rec.programs.size() == 1, Status::InvalidArgument, "the recording's ", rec.world_size, " ranks ran ",
                rec.programs.size(), " different programs: it replays on ", rec.world_size,
                " ranks only (a world of another size needs every rank to make the same calls)");
  }
  return o;
}

namespace {

constexpr uint32_t kNone = UINT32_MAX;

struct RankState {
  uint32_t pc = 0;       // the next step
  uint32_t posts = 0;    // collectives posted
  double compute_t = 0;  // the compute clock
  double factor = 1.0;   // compute slowdown
};

struct Coll {
  const ReplayStep* call = nullptr;  // the first poster's step: the fingerprint
  int first_rank = -1;
  uint32_t posted = 0;
  double ready = 0;  // the last launch
  double end = 0;
  bool done = false;
  std::vector<uint32_t> waiters;
};

std::string describe(const ReplayStep& s) {
  std::ostringstream os;
  os << coll_name(s.coll) << " of " << text::format_bytes(s.bytes) << " " << comm::dtype_name(s.dtype);
  if (s.coll == CollKind::AllReduce || s.coll == CollKind::ReduceScatter || s.coll == CollKind::Reduce)
    os << " " << comm::op_name(s.op);
  return os.str();
}

bool same_call(const ReplayStep& a, const ReplayStep& b) {
  if (a.coll != b.coll || a.bytes != b.bytes || a.dtype != b.dtype) return false;
  const bool reduces = a.coll == CollKind::AllReduce || a.coll == CollKind::ReduceScatter || a.coll == CollKind::Reduce;
  return !reduces || a.op == b.op;
}

}  // namespace

ReplayReport replay(const ReplayOptions& o) {
  ACCEL_CHECK(o.world_size >= 1, Status::InvalidArgument, "replay: world_size must be at least 1, got ", o.world_size);
  ACCEL_CHECK(!o.programs.empty(), Status::InvalidArgument, "replay: no program");
  ACCEL_CHECK(o.program_of.empty() || o.program_of.size() == static_cast<size_t>(o.world_size), Status::InvalidArgument,
              "replay: program_of has ", o.program_of.size(), " entries for ", o.world_size, " ranks");
  const Topology topo = topology_preset(o.topology);
  const int n = o.world_size;
  ACCEL_CHECK(static_cast<int64_t>(n) <= static_cast<int64_t>(topo.nodes) * topo.gpus_per_node, Status::InvalidArgument,
              "replay: ", n, " ranks do not fit topology '", topo.name, "' (", topo.nodes * topo.gpus_per_node,
              " GPUs); for N nodes of 8 H100 over InfiniBand name '", (n + 7) / 8, "x8xH100-IB'");
  for (size_t p = 0; p < o.programs.size(); ++p) {  // waits name posts made before them
    uint32_t posted = 0;
    for (const ReplayStep& s : o.programs[p].steps) {
      if (s.kind == ReplayStep::Post) ++posted;
      ACCEL_CHECK(s.kind != ReplayStep::Wait || s.post < posted, Status::InvalidArgument, "replay: program '",
                  o.programs[p].name, "' waits for post ", s.post, " before making it (", posted, " posted)");
      ACCEL_CHECK(s.kind != ReplayStep::Compute || (std::isfinite(s.seconds) && s.seconds >= 0), Status::InvalidArgument,
                  "replay: program '", o.programs[p].name, "' computes for ", s.seconds, " s");
    }
  }
  for (uint32_t p : o.program_of)
    ACCEL_CHECK(p < o.programs.size(), Status::InvalidArgument, "replay: program_of names program ", p, " of ",
                o.programs.size());
  std::vector<RankState> st(static_cast<size_t>(n));
  for (const auto& [r, f] : o.slowdown) {
    ACCEL_CHECK(r >= 0 && r < n && std::isfinite(f) && f > 0, Status::InvalidArgument, "replay: slowdown of rank ", r,
                " by ", f);
    st[static_cast<size_t>(r)].factor = f;
  }
  auto program = [&](int r) -> const ReplayProgram& {
    return o.programs[o.program_of.empty() ? 0 : o.program_of[static_cast<size_t>(r)]];
  };

  ReplayReport rep;
  std::vector<Coll> colls;
  std::vector<std::pair<std::string, uint64_t>> algos;
  size_t next = 0;        // the first collective not completed (stream order)
  double stream_t = 0;    // when the communication stream is free: the last completed one's end
  std::vector<uint32_t> work;
  work.reserve(static_cast<size_t>(n));
  for (int r = n - 1; r >= 0; --r) work.push_back(static_cast<uint32_t>(r));
  auto complete_ready = [&] {
    while (next < colls.size() && colls[next].posted == static_cast<uint32_t>(n)) {
      Coll& c = colls[next];
      const ReplayStep& s = *c.call;
      const bool reduces = s.coll == CollKind::AllReduce || s.coll == CollKind::ReduceScatter || s.coll == CollKind::Reduce;
      const Estimate est = collective_cost(topo, s.coll, s.bytes, n, !reduces || comm::nvls_supported(s.dtype, s.op));
      const double start = std::max(c.ready, stream_t);
      c.end = start + est.seconds;
      c.done = true;
      stream_t = c.end;
      rep.comm_seconds += est.seconds;
      ++rep.collectives;
      auto a = std::find_if(algos.begin(), algos.end(), [&](const auto& x) { return x.first == est.algorithm; });
      if (a == algos.end())
        algos.emplace_back(est.algorithm, 1);
      else
        ++a->second;
      for (uint32_t w : c.waiters) work.push_back(w);
      std::vector<uint32_t>().swap(c.waiters);
      ++next;
    }
  };
  bool failed = false;
  while (!work.empty() && !failed) {
    const uint32_t r = work.back();
    work.pop_back();
    RankState& rs = st[r];
    const std::vector<ReplayStep>& steps = program(static_cast<int>(r)).steps;
    while (rs.pc < steps.size()) {
      const ReplayStep& s = steps[rs.pc];
      if (s.kind == ReplayStep::Compute) {
        rs.compute_t += s.seconds * rs.factor;
      } else if (s.kind == ReplayStep::Post) {
        const uint32_t k = rs.posts++;
        if (k >= colls.size()) colls.resize(k + 1);
        Coll& c = colls[k];
        if (!c.call) {
          c.call = &s;
          c.first_rank = static_cast<int>(r);
        } else if (!same_call(*c.call, s)) {
          std::ostringstream os;
          os << "mismatched collectives: rank " << c.first_rank << "'s call " << k << " is " << describe(*c.call)
             << ", rank " << r << "'s is " << describe(s);
          rep.error = os.str();
          failed = true;
          break;
        }
        c.ready = std::max(c.ready, rs.compute_t);
        if (++c.posted == static_cast<uint32_t>(n)) complete_ready();
      } else {
        const uint32_t k = s.kind == ReplayStep::Wait ? s.post : (rs.posts ? rs.posts - 1 : kNone);
        if (k != kNone) {
          Coll& c = colls[k];
          if (!c.done) {
            c.waiters.push_back(r);
            break;  // blocked: woken when it completes, resumes at this step
          }
          rs.compute_t = std::max(rs.compute_t, c.end);
        }
      }
      ++rs.pc;
      ++rep.events;
    }
  }
  // the report: every rank's end, or what stopped them
  int finished = 0;
  for (int r = 0; r < n; ++r) {
    const RankState& rs = st[static_cast<size_t>(r)];
    finished += rs.pc >= program(r).steps.size();
    // a rank's communication ends with its last collective (all ranks share the stream order)
    double t = rs.compute_t;
    if (rs.posts && colls[rs.posts - 1].done) t = std::max(t, colls[rs.posts - 1].end);
    if (r == 0 || t > rep.predicted_seconds) {
      rep.predicted_seconds = t;
      rep.slowest_rank = r;
    }
    rep.fastest_seconds = r == 0 ? t : std::min(rep.fastest_seconds, t);
  }
  if (!failed && finished < n && next < colls.size()) {
    // the first collective not completed: who posted it, who never did
    std::ostringstream os;
    const Coll& c = colls[next];
    os << "collective " << next << " (" << describe(*c.call) << ") was posted by " << c.posted << " of " << n
       << " ranks; the first that did not:";
    int named = 0;
    for (int r = 0; r < n && named < 4; ++r) {
      const RankState& rs = st[static_cast<size_t>(r)];
      if (rs.posts > next) continue;
      os << (named ? "," : "") << " rank " << r << " ("
         << (rs.pc >= program(r).steps.size() ? "ended its program after " : "waits after ") << rs.posts << " calls)";
      ++named;
    }
    rep.error = os.str();
    failed = true;
  }
  if (failed) {
    rep.ok = false;
    rep.status = Status::InvalidState;
  }
  for (auto& [name, count] : algos) rep.algorithms.push_back(name + " x" + std::to_string(count));
  return rep;
}

ReplayProgram step_program(const Topology& topo, const std::string& strategy, double params, double tokens,
                           int layers, uint64_t bucket_bytes) {
  ACCEL_CHECK(params > 0 && tokens > 0 && layers >= 1 && bucket_bytes > 0, Status::InvalidArgument,
              "step_program needs positive params, tokens, layers and bucket size");
  ACCEL_CHECK(topo.gpu_flops > 0, Status::InvalidArgument, "topology '", topo.name, "' has no GPU FLOP rate");
  ACCEL_CHECK(strategy == "ddp" || strategy == "zero3", Status::InvalidArgument, "step_program: unknown strategy '",
              strategy, "' (ddp, zero3)");
  ReplayProgram p;
  p.name = strategy;
  const double fwd = 2.0 * params * tokens / (topo.gpu_flops * topo.mfu), bwd = 2.0 * fwd;
  if (strategy == "ddp") {
    const double grads = 4.0 * params;  // fp32 gradients
    const uint64_t nb = static_cast<uint64_t>(std::ceil(grads / static_cast<double>(bucket_bytes) - 1e-9));
    p.compute(fwd);
    for (uint64_t b = 0; b < nb; ++b) {
      const uint64_t bytes = b + 1 < nb ? bucket_bytes : static_cast<uint64_t>(grads) - (nb - 1) * bucket_bytes;
      p.compute(bwd / static_cast<double>(nb));
      p.post(CollKind::AllReduce, bytes, comm::DataType::Float32, comm::RedOp::Sum);
    }
    p.wait_all();
    return p;
  }
  // ZeRO-3: each layer's bf16 weights gathered one layer ahead, its bf16 gradients scattered
  const uint64_t unit = static_cast<uint64_t>(2.0 * params / layers);
  std::vector<uint32_t> gathered(static_cast<size_t>(layers));
  gathered[0] = p.post(CollKind::AllGather, unit, comm::DataType::BFloat16);
  for (int l = 0; l < layers; ++l) {
    if (l + 1 < layers) gathered[static_cast<size_t>(l + 1)] = p.post(CollKind::AllGather, unit, comm::DataType::BFloat16);
    p.wait(gathered[static_cast<size_t>(l)]);
    p.compute(fwd / layers);
  }
  gathered[static_cast<size_t>(layers - 1)] = p.post(CollKind::AllGather, unit, comm::DataType::BFloat16);
  for (int l = layers - 1; l >= 0; --l) {
    if (l > 0) gathered[static_cast<size_t>(l - 1)] = p.post(CollKind::AllGather, unit, comm::DataType::BFloat16);
    p.wait(gathered[static_cast<size_t>(l)]);
    p.compute(bwd / layers);
    p.post(CollKind::ReduceScatter, unit, comm::DataType::BFloat16, comm::RedOp::Sum);
  }
  p.wait_all();
  return p;
}

}  // namespace accel::sim
