// Where the library writes: one place that decides whether a path may be written, so that
// no save ever destroys what it did not write. Torch-free.
//
// The rules (docs/checkpoints.md, "What a save may replace"):
// - a checkpoint directory may replace nothing, an empty directory, or an earlier accel
//   checkpoint (a directory holding a manifest of format "accel-checkpoint" and only the
//   files a checkpoint consists of);
// - a save's hidden temporary directory (".NAME.tmp", ".NAME.old") may replace only the
//   leftovers of an earlier save (only checkpoint files);
// - a single output file (accel_save_model, a simulator trace, a token file) may replace
//   nothing or an earlier file of its format (safetensors, a TorchScript zip, a Chrome
//   trace, a token file);
// - an empty path, a symbolic link, a device, a FIFO or a socket is never written.
// Refusals throw Error(Status::InvalidArgument) naming the argument, the path and what is
// there ("dir 'notes.txt' is a regular file, not an accel checkpoint: ...").
#pragma once

#include <filesystem>
#include <string>

namespace accel::paths {

// What is at `p`, without following a final symbolic link: "nothing", "a regular file",
// "a directory", "a symbolic link", "a character device", "a block device", "a FIFO",
// "a socket", "something unknown".
std::string describe(const std::filesystem::path& p);

// True for a directory that holds only checkpoint files (regular files named as
// ckpt::is_checkpoint_file_name says, temporaries included) and, when `need_manifest`, a
// manifest.json of format "accel-checkpoint". An empty directory qualifies unless
// need_manifest.
bool is_checkpoint_dir(const std::filesystem::path& dir, bool need_manifest);

// Refuses a checkpoint target (see the rules above). `arg` names the argument ("dir").
void check_checkpoint_target(const std::filesystem::path& target, const std::string& arg);

// Refuses a save's temporary path when something other than a save's leftovers is there.
void check_leftover(const std::filesystem::path& tmp, const std::filesystem::path& target);

enum class FileKind { Safetensors, TorchScript, ChromeTrace, TokenFile };

// Refuses an output file path (see the rules above). `arg` names the argument ("path").
void check_file_target(const std::string& path, FileKind kind, const std::string& arg);

}  // namespace accel::paths
