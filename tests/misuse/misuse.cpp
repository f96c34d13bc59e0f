// The misuse suite: every public function of the C ABI (include/accel/accel.h) called
// wrongly. NULL pointers, unknown versions and enum values, zero / negative / NaN / infinite
// / overflowing numbers, wrong shapes and dtypes, calls in the wrong state or order, objects
// from another context, hostile paths, and checkpoint files that are well-formed but lie.
//
// Each case runs in its own child process (a crash or a hang fails that case, not the suite)
// and asserts: the status the header names; a message in accel_last_error(NULL) (and in
// accel_last_error(ctx) for calls on a context) that starts with "<function>: " and names the
// argument; out-parameters left as they were; and a context that still trains afterwards.
//
// Usage: test_misuse HEADER [FILTER] [-v]
//   HEADER  include/accel/accel.h: every `ACCEL_API ... accel_xxx(` in it needs a case
//   FILTER  run only the cases whose name contains it
//   -v      also print every passing case with the status and message it saw
// The parent only forks and reads: it never calls into the library.
//
// The cases are in cases_*.cpp (one function per section of the header, common.h); this file
// registers them, runs each in a child and checks the header's list against them.
#include "common.h"

namespace misuse {
namespace {

void register_cases() {
  basics();
  tensors();
  context();
  models();
  losses();
  optimizers();
  data();
  training();
  processes();
  simulator();
  checkpoints();
  language_models();
  generation();
  lora();
  lm_data();
  memory_estimates();
  trackers();
  realtime();
  tokenizers();
}

// ---------------------------------------------------------------------------------------
// The child: one case

void check_message(Env& e, const Case& c, const std::string& where, const char* msg) {
  const std::string m = msg ? msg : "(NULL)";
  std::string missing;
  if (m.rfind(c.prefix, 0) != 0) missing += " [starts with \"" + c.prefix + "\"]";
  for (const std::string& n : c.needles)
    if (m.find(n) == std::string::npos) missing += " \"" + n + "\"";
  if (!missing.empty()) e.failures.push_back(where + " = \"" + m + "\" lacks" + missing);
}

int run_child(const Case& c) {
  Env e;
  try {
    e.a = make_world();
    const R r = c.body(e);
    const char* seen = r.ctx ? accel_last_error(r.ctx) : accel_last_error(nullptr);
    std::fprintf(stderr, "INFO: %s \"%s\"\n", accel_status_name(r.status),
                 r.status == ACCEL_OK ? ""
                 : seen               ? seen
                                      : "NULL");
    const bool accepted = r.status == c.expect || std::count(c.also.begin(), c.also.end(), r.status) > 0;
    if (!accepted) {
      e.failures.insert(e.failures.begin(), std::string("status ") + accel_status_name(r.status) + ", expected " +
                                                accel_status_name(c.expect) + " (message: \"" + (seen ? seen : "NULL") +
                                                "\")");
    } else if (r.status != ACCEL_OK) {
      check_message(e, c, "accel_last_error(NULL)", accel_last_error(nullptr));
      if (r.ctx) check_message(e, c, "accel_last_error(ctx)", accel_last_error(r.ctx));
    }
    try {
      normal_step(e.a);
    } catch (const SetupError& x) {
      e.failures.push_back(std::string("the context is unusable afterwards: ") + x.what());
    }
  } catch (const SetupError& x) {
    e.failures.push_back(std::string("setup: ") + x.what());
  } catch (const std::exception& x) {
    e.failures.push_back(std::string("exception in the case: ") + x.what());
  }
  for (const std::string& f : e.failures) std::fprintf(stderr, "FAIL: %s\n", f.c_str());
  std::fflush(stderr);
  return e.failures.empty() ? 0 : 1;
}

// ---------------------------------------------------------------------------------------
// The parent: the header's functions, and the cases run in children

std::vector<std::string> header_functions(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::string text, line;
  while (std::getline(f, line))
    if (line.find_first_not_of(" \t") == std::string::npos || line[line.find_first_not_of(" \t")] != '#')
      text += line + "\n";  // preprocessor lines (the ACCEL_API definitions) dropped
  for (size_t a; (a = text.find("/*")) != std::string::npos;) {
    const size_t b = text.find("*/", a + 2);
    text.erase(a, b == std::string::npos ? std::string::npos : b + 2 - a);
  }
  std::vector<std::string> fns;
  for (size_t at = 0; (at = text.find("ACCEL_API", at)) != std::string::npos; at += 9) {
    const size_t paren = text.find_first_of("(;{", at);
    if (paren == std::string::npos || text[paren] != '(') continue;
    size_t end = paren;
    while (end > at && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
    size_t begin = end;
    while (begin > at && (std::isalnum(static_cast<unsigned char>(text[begin - 1])) || text[begin - 1] == '_')) --begin;
    const std::string name = text.substr(begin, end - begin);
    if (name.rfind("accel_", 0) == 0) fns.push_back(name);
  }
  return fns;
}

struct Running {
  size_t index;
  pid_t pid;
  int fd;
  std::string output;
  std::chrono::steady_clock::time_point start;
};

void drain(Running& r) {
  char buf[4096];
  for (ssize_t n; (n = ::read(r.fd, buf, sizeof buf)) > 0;) r.output.append(buf, static_cast<size_t>(n));
}

std::string last_line(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  const size_t nl = s.rfind('\n');
  s = nl == std::string::npos ? s : s.substr(nl + 1);
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

// Why a finished child failed ("" when it passed).
std::string verdict(int status, const std::string& out) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    std::string w = "crashed: signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
    return out.empty() ? w : w + "; last output: " + last_line(out);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  std::string why;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("FAIL: ", 0) == 0) why += (why.empty() ? "" : "\n    ") + line.substr(6);
  if (why.empty())
    why = "exited with status " + std::to_string(WEXITSTATUS(status)) + "; last output: " + last_line(out);
  return why;
}

pid_t start_child(const Case& c, const fs::path& dir, int* fd) {
  int p[2];
  if (::pipe(p) != 0) return -1;
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    ::dup2(p[1], 2);
    ::close(p[1]);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, 1);
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || ::chdir(dir.c_str()) != 0) {
      std::fprintf(stderr, "FAIL: setup: cannot enter %s\n", dir.c_str());
      ::_exit(1);
    }
    ::_exit(run_child(c));
  }
  ::close(p[1]);
  if (pid < 0) {
    ::close(p[0]);
    return -1;
  }
  ::fcntl(p[0], F_SETFL, O_NONBLOCK);
  *fd = p[0];
  return pid;
}

}  // namespace
}  // namespace misuse

using namespace misuse;  // NOLINT(google-build-using-namespace)

#if defined(__SANITIZE_ADDRESS__)
// Under AddressSanitizer (scripts/test's second run) a huge allocation must fail like a real
// one (ACCEL_ERR_OUT_OF_MEMORY), not abort the process. Options in ASAN_OPTIONS still apply.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const bool verbose = std::count(args.begin(), args.end(), "-v") > 0;
  args.erase(std::remove(args.begin(), args.end(), "-v"), args.end());
  if (args.empty()) {
    std::fprintf(stderr, "usage: %s HEADER [FILTER] [-v]\n", argv[0]);
    return 2;
  }
  const std::string header = args[0];
  g_lm_fixture = fs::absolute(fs::path(header).parent_path().parent_path().parent_path() / "tests/fixtures/lm/gpt2-tiny")
                     .lexically_normal()
                     .string();
  const std::string filter = args.size() > 1 ? args[1] : "";
  ::unsetenv("ACCEL_STRATEGY");  // the fixture is the plain one whatever the caller's environment
  register_cases();
  const std::vector<Case>& all = cases();

  // the generated list: every function of the header needs a case, every case a function
  const std::vector<std::string> declared = header_functions(header);
  const std::set<std::string> in_header(declared.begin(), declared.end());
  std::set<std::string> covered, names;
  bool list_ok = !in_header.empty();
  if (in_header.empty()) std::printf("misuse: no ACCEL_API functions found in %s\n", header.c_str());
  for (const Case& c : all) {
    covered.insert(c.fn);
    if (!names.insert(c.name).second) {
      std::printf("misuse: two cases are named %s\n", c.name.c_str());
      list_ok = false;
    }
    if (!in_header.count(c.fn)) {
      std::printf("misuse: case %s covers %s, which the header does not declare\n", c.name.c_str(), c.fn.c_str());
      list_ok = false;
    }
  }
  for (const std::string& f : in_header)
    if (!covered.count(f)) {
      std::printf("misuse: no case covers %s\n", f.c_str());
      list_ok = false;
    }

  std::vector<size_t> todo;
  for (size_t i = 0; i < all.size(); ++i)
    if (filter.empty() || all[i].name.find(filter) != std::string::npos) todo.push_back(i);

  char root_template[] = "/tmp/accel-misuse-XXXXXX";
  const char* root_dir = ::mkdtemp(root_template);
  if (!root_dir) {
    std::perror("mkdtemp");
    return 2;
  }
  const fs::path root(root_dir);
  std::vector<std::string> result(all.size()), info(all.size());
  std::vector<double> seconds(all.size(), 0.0);
  std::vector<Running> running;
  size_t next = 0;
  while (next < todo.size() || !running.empty()) {
    while (running.size() < static_cast<size_t>(kJobs) && next < todo.size()) {
      const size_t i = todo[next++];
      int fd = -1;
      const pid_t pid = start_child(all[i], root / std::to_string(i) / "work", &fd);
      if (pid < 0)
        result[i] = std::string("cannot start a child: ") + std::strerror(errno);
      else
        running.push_back({i, pid, fd, "", std::chrono::steady_clock::now()});
    }
    std::vector<pollfd> fds;
    for (const Running& r : running) fds.push_back({r.fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 50);
    for (size_t k = 0; k < running.size();) {
      Running& r = running[k];
      drain(r);
      int status = 0;
      const pid_t w = ::waitpid(r.pid, &status, WNOHANG);
      const bool late = std::chrono::steady_clock::now() - r.start > std::chrono::seconds(kCaseSeconds);
      if (w != r.pid && !late) {
        ++k;
        continue;
      }
      if (w != r.pid) {
        ::kill(r.pid, SIGKILL);
        ::waitpid(r.pid, &status, 0);
        drain(r);
        result[r.index] = "hung: killed after " + std::to_string(kCaseSeconds) + " s" +
                          (r.output.empty() ? "" : "; last output: " + last_line(r.output));
      } else {
        drain(r);
        result[r.index] = verdict(status, r.output);
        const size_t at = r.output.find("INFO: ");
        if (at != std::string::npos) info[r.index] = r.output.substr(at + 6, r.output.find('\n', at) - at - 6);
      }
      seconds[r.index] = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
      ::close(r.fd);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  std::error_code ec;
  fs::remove_all(root, ec);

  size_t failed = 0;
  for (size_t i : todo)
    if (verbose && result[i].empty()) std::printf("ok   %s: %s\n", all[i].name.c_str(), info[i].c_str());
  for (size_t i : todo)
    if (!result[i].empty()) {
      ++failed;
      std::printf("FAIL %s: %s\n", all[i].name.c_str(), result[i].c_str());
    }
  if (verbose && !todo.empty()) {
    const size_t slow =
        *std::max_element(todo.begin(), todo.end(), [&](size_t x, size_t y) { return seconds[x] < seconds[y]; });
    std::printf("slowest case: %s (%.2f s of the %d s allowed)\n", all[slow].name.c_str(), seconds[slow], kCaseSeconds);
  }
  size_t functions = 0;
  for (const std::string& f : covered) functions += in_header.count(f);
  std::printf("misuse: %zu cases, %zu passed, %zu failed (%zu functions covered of %zu declared)%s\n", todo.size(),
              todo.size() - failed, failed, functions, in_header.size(),
              filter.empty() ? "" : (" [filter \"" + filter + "\"]").c_str());
  return failed == 0 && list_ok ? 0 : 1;
}
