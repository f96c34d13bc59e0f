// How accel writes files and directories so that a reader (or a crash) never sees half of
// one: the one home of the atomic file write, the directory publish and the fsyncs, shared by
// every floor (the runtime's saves and checkpoints, the simulated NCCL's rank reports and
// traces, the launcher's reports). Torch-free, exception-free: each function returns a
// Result (errno and a message naming the path) that the caller turns into its own kind of
// error (the runtime throws accel::Error with status_of_errno(err), the simulator and the
// launcher report the message).
//
// What may be replaced at a path is decided before these are called (runtime/paths.h).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace accel::files {

struct Result {
  int err = 0;          // errno of the failure; 0 on success
  std::string message;  // "cannot rename '/a/.b.tmp.12' to '/a/b': No space left on device"
  explicit operator bool() const { return err == 0 && message.empty(); }
};

// Whether a write waits for the bytes to reach the disk (fsync of the file before the rename
// and of its directory after it): a checkpoint or a saved model must survive a power loss; a
// report read back by the process that waits for it needs only to appear whole.
enum class Durability { Replace, Sync };

// Writes the parts, in order, to a fresh temporary file beside `path` ("NAME.tmp.PID[.K]",
// the name ckpt::is_checkpoint_file_name knows as a save's leftover, made with O_EXCL, so no other file is ever opened or truncated; mode 0666 less the umask),
// then renames it over `path`: a reader sees the old file or the whole new one. On failure
// the temporary file is removed and `path` is untouched.
Result write_atomic(const std::string& path, const std::vector<std::pair<const char*, std::size_t>>& parts,
                    Durability durability = Durability::Sync);
Result write_atomic(const std::string& path, const std::string& bytes, Durability durability = Durability::Sync);

// For a writer that must open the file itself (libtorch's TorchScript save): makes an empty
// temporary file beside `path` as write_atomic does and returns its name in `tmp`; the caller
// fills it, then calls commit (or removes it on failure).
Result make_temporary(const std::string& path, std::string& tmp);
// fsyncs `tmp` (Durability::Sync), renames it over `path` and fsyncs the directory; removes
// `tmp` when that fails.
Result commit(const std::string& tmp, const std::string& path, Durability durability = Durability::Sync);

// fsync of a directory (what makes a rename in it durable) or of a file; best effort, as a
// file system that cannot fsync a directory still renames atomically.
void fsync_dir(const std::string& dir);
void fsync_path(const std::string& path);

// Moves the finished directory `tmp` to `target` in one step: a rename when nothing is at
// `target`; else an exchange of the two (renameat2 RENAME_EXCHANGE, then the old one, now at
// `tmp`, is removed), or, where the kernel or file system has no exchange, the old one renamed
// to `old` first (a crash between the two renames leaves it there, whole). The parent's
// directory entry is fsynced. The caller checked that an existing `target` and `old` may be
// replaced.
Result publish_dir(const std::string& tmp, const std::string& target, const std::string& old);

// An advisory lock on the file `path` (created if absent, mode 0666 less the umask): flock,
// exclusive, not waiting. The lock lives as long as the descriptor: the kernel releases it
// when the holder closes it or ends, however it ends (a killed run never leaves it locked).
// On success `fd` >= 0 and the file holds `who` (the holder's description, one line); when
// another open description holds it, `fd` is -1, `busy` is true and `holder` is what that
// holder wrote; on another failure, `fd` is -1 with `result` naming it.
struct FileLock {
  int fd = -1;
  bool busy = false;
  std::string holder;
  Result result;
};
FileLock lock_file(const std::string& path, const std::string& who);
void unlock_file(int fd);  // closes the descriptor (the lock goes with it); -1 is ignored

// The directory of the object (libaccel, or the program linking the runtime statically)
// holding this code: where the libraries it opens at run time lie beside it
// (libaccel-nccl-sim.so, libaccel-sentencepiece.so, the accel command's libaccel-tools.so).
// A program's own directory comes from /proc/self/exe (its argv[0] may be a bare name found
// through PATH); "" when neither the loader nor the kernel says.
std::string own_directory();

// Sends `len` bytes and up to 4 descriptors (SCM_RIGHTS) in one message over the Unix socket
// `sock`, without SIGPIPE: true when the whole message went, else false with errno set (the
// simulated NCCL's coordinator hands out the shared segment so, the launcher a warm start's
// rank its output pipes).
bool send_with_descriptors(int sock, const void* data, std::size_t len, const int* fds, std::size_t count);

}  // namespace accel::files
