// libFuzzer harness for the checkpoint's metadata readers (runtime/checkpoint_format.cpp):
// what a lying manifest.json or rank-<R>.json delivers once its CRC-32 has been made
// consistent with the manifest (the CRC gate passes, so the bytes reach these parsers).
// Input: the manifest's text, a NUL byte, a rank file's text (either may be absent).
// Every input either parses into a structure whose invariants hold (and which writes back
// to the same structure), or is refused with a Format error naming the file. Never a
// crash, a sanitizer report, or another exception. Built with clang by
// tests/fuzz/run_fuzzer.sh (the test suite's "fuzz_checkpoint").
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "runtime/checkpoint_format.h"
#include "base/status.h"

using namespace accel;

namespace {

void check_files(const std::map<std::string, ckpt::FileEntry>& files) {
  for (const auto& [name, f] : files)
    if (!ckpt::is_checkpoint_file_name(name) || name.find('/') != std::string::npos || f.crc32.size() != 8) std::abort();
}

void manifest(std::string_view text) {
  try {
    const ckpt::Manifest m = ckpt::parse_manifest(text, "manifest.json");
    if (m.format_version < 1 || m.format_version > ckpt::kFormatVersion || m.world_size < 1) std::abort();
    if (m.layout != "full" && m.layout != "sharded") std::abort();
    check_files(m.files);
    for (const auto& p : m.parameters)
      for (int64_t d : p.shape)
        if (d < 0) std::abort();
    for (const auto& s : m.shards) {
      if (s.rank < 0 || s.rank >= m.world_size || !m.files.count(s.model)) std::abort();
      if (s.optimizer && !m.files.count(*s.optimizer)) std::abort();
      for (const auto& p : s.pieces)
        if (p.start < 0 || p.len < 1) std::abort();
    }
    const std::string back = ckpt::to_json(m);  // writes back to the same structure
    if (ckpt::to_json(ckpt::parse_manifest(back, "manifest.json")) != back) std::abort();
  } catch (const Error& e) {
    if (e.status() != Status::Format || std::strncmp(e.what(), "manifest.json: ", 15) != 0) std::abort();
  }
}

void rank(std::string_view text) {
  try {
    const ckpt::RankState r = ckpt::parse_rank(text, "rank-0.json");
    if (r.rank < 0 || r.optimizer_steps < 0 || r.micro_steps < 0 || !(r.loss_scale > 0) || r.growth_tracker < 0)
      std::abort();
    if (r.scheduler_steps && *r.scheduler_steps < 0) std::abort();
    for (const auto& l : r.loaders)
      if (l.epoch < 0 || l.position < 0) std::abort();
    check_files(r.files);
    const std::string back = ckpt::to_json(r);
    if (ckpt::to_json(ckpt::parse_rank(back, "rank-0.json")) != back) std::abort();
  } catch (const Error& e) {
    if (e.status() != Status::Format || std::strncmp(e.what(), "rank-0.json: ", 13) != 0) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  manifest(all.substr(0, nul));
  if (nul != std::string_view::npos) rank(all.substr(nul + 1));
  return 0;
}
