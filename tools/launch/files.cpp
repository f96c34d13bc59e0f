// `accel launch`: files and directories: --log-dir's directories, and the simulation's output
// directory emptied, its files read, the merged report and trace written atomically.
#include "tools/launch/internal.h"

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "base/files.h"

namespace accel::launch {

void make_dirs(const std::string& dir) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0777) != 0 && errno != EEXIST)
      throw UsageError("--log-dir " + dir + ": cannot create " + partial + ": " + errno_text(errno));
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw UsageError("--log-dir " + dir + " is not a directory");
}

// ---- the simulation's files (--backend sim) ------------------------------------------

namespace {

extern "C" int remove_below(const char* path, const struct stat*, int, struct FTW* at) {
  if (at->level > 0) ::remove(path);  // the directory itself stays
  return 0;
}

}  // namespace

// Removes everything inside `dir` (not following symbolic links).
void empty_dir(const std::string& dir) { ::nftw(dir.c_str(), remove_below, 16, FTW_DEPTH | FTW_PHYS); }

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

// Writes `content` to a temporary file beside `path`, then renames it over `path`
// (base/files.h): a reader sees the old file or the whole new one. Returns "" or why it failed.
std::string write_atomically(const std::string& path, const std::string& content) {
  return accel::files::write_atomic(path, content, accel::files::Durability::Replace).message;
}

}  // namespace accel::launch
