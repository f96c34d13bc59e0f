// `accel merge-weights DIR OUT`: one consolidated model.safetensors (fp32) from a checkpoint
// directory of accel_save_state, whatever its layout (ZeRO's shards reassembled), every file
// checked against the manifest first. Torch-free.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/checkpoint_format.h"
#include "runtime/paths.h"
#include "runtime/safetensors.h"
#include "tools/commands.h"

namespace accel::tools {
namespace {

// A checkpoint's file, checked against the manifest's size and CRC-32.
std::string checked(const std::string& dir, const std::map<std::string, accel::ckpt::FileEntry>& files,
                    const std::string& name) {
  const std::string path = dir + "/" + name;
  auto it = files.find(name);
  ACCEL_CHECK(it != files.end(), accel::Status::Format, dir, "/manifest.json does not list '", name, "'");
  std::string bytes = accel::safetensors::read_file(path);
  ACCEL_CHECK(bytes.size() == it->second.bytes, accel::Status::Format, path, ": ", bytes.size(),
              " bytes, the manifest says ", it->second.bytes, " (truncated?)");
  ACCEL_CHECK(accel::safetensors::crc32_hex(bytes.data(), bytes.size()) == it->second.crc32, accel::Status::Format, path,
              ": CRC-32 does not match the manifest (corrupted)");
  return bytes;
}
}  // namespace

int merge_weights(const std::string& dir, const std::string& out) {
  using accel::Status;
  const std::string mpath = dir + "/" + accel::ckpt::names::kManifest;
  // the output never replaces anything but an earlier safetensors file
  accel::paths::check_file_target(out, accel::paths::FileKind::Safetensors, "OUT");
  const accel::ckpt::Manifest m = accel::ckpt::parse_manifest(accel::safetensors::read_file(mpath), mpath);
  const auto& files = m.files;
  uint64_t file_bytes = 0;  // the values the checkpoint's files can hold bound what the shapes may claim
  for (const auto& [name, f] : files) file_bytes += f.bytes;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> values;
  for (const auto& p : m.parameters) {
    names.push_back(p.name);
    shapes.push_back(p.shape);
    uint64_t n = 1;
    for (int64_t d : p.shape) {
      ACCEL_CHECK(d == 0 || n <= file_bytes / 4 / static_cast<uint64_t>(d), Status::Format, mpath, ": the shape of '",
                  p.name, "' holds more values than the checkpoint's files");
      n *= static_cast<uint64_t>(d);
    }
    values.emplace_back(static_cast<size_t>(n));
  }
  std::vector<int64_t> covered(names.size(), 0);
  auto take = [&](const std::string& file, const std::string& bytes, const std::string& name, size_t pi, int64_t start,
                  int64_t len) {
    const auto h = accel::safetensors::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), dir + "/" + file);
    for (const auto& t : h.tensors) {
      if (t.name != name) continue;
      ACCEL_CHECK(t.dtype == "F32" && static_cast<int64_t>(t.end - t.begin) == len * 4, accel::Status::Format, dir, "/",
                  file, ": '", name, "' is not ", len, " fp32 values");
      ACCEL_CHECK(start >= 0 && start + len <= static_cast<int64_t>(values[pi].size()), accel::Status::Format, mpath,
                  ": a range of '", name, "' is outside the parameter");
      std::memcpy(values[pi].data() + start, bytes.data() + h.data_start + t.begin, static_cast<size_t>(len) * 4);
      covered[pi] += len;
      return;
    }
    accel::fail(accel::Status::Format, dir, "/", file, ": no tensor '", name, "'");
  };
  size_t files_read = 0;
  if (m.layout == "full") {
    const std::string bytes = checked(dir, files, accel::ckpt::names::kModel);
    ++files_read;
    for (size_t i = 0; i < names.size(); ++i) take(accel::ckpt::names::kModel, bytes, names[i], i, 0, static_cast<int64_t>(values[i].size()));
  } else {
    for (const auto& sh : m.shards) {
      const std::string bytes = checked(dir, files, sh.model);
      ++files_read;
      for (const auto& pc : sh.pieces) {
        ACCEL_CHECK(pc.param < names.size(), accel::Status::Format, mpath, ": a shard names parameter ", pc.param, " of ",
                    names.size());
        take(sh.model, bytes, names[pc.param], pc.param, pc.start, pc.len);
      }
    }
  }
  std::vector<accel::safetensors::TensorView> views;
  size_t total = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    ACCEL_CHECK(covered[i] == static_cast<int64_t>(values[i].size()), accel::Status::Format, mpath, ": the shards hold ",
                covered[i], " of the ", values[i].size(), " values of '", names[i], "'");
    views.push_back({names[i], "F32", shapes[i], values[i].data(), values[i].size() * 4});
    total += values[i].size() * 4;
  }
  accel::safetensors::write_file_atomic(out, accel::safetensors::serialize(views, {{"format", "pt"}}));
  std::printf("merged %zu parameters (%zu bytes of fp32) from %zu file%s of %s into %s\n", names.size(), total, files_read,
              files_read == 1 ? "" : "s", dir.c_str(), out.c_str());
  return 0;
}

}  // namespace accel::tools
