// The safetensors file format (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}},
// then the raw little-endian tensor bytes. Torch-free, so fuzzers and tools link it cheaply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace accel::safetensors {

struct TensorView {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "F64", "I64", "I32", "I8", "U8", ...
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// Bytes per element of a safetensors dtype name; 0 when unknown.
size_t dtype_size(const std::string& dtype);

// Serialises header + data into one buffer (tensors in the given order, 8-byte aligned header).
std::string serialize(const std::vector<TensorView>& tensors, const std::map<std::string, std::string>& metadata);
// Just the 8-byte length and the JSON header (padded so the data starts 8-byte aligned);
// the tensors' bytes follow it in order.
std::string serialize_header(const std::vector<TensorView>& tensors, const std::map<std::string, std::string>& metadata);

// Writes header + every tensor's bytes to `path` atomically (as write_file_atomic) straight
// from the tensors' memory, and returns the file's size and CRC-32 (crc32_hex).
std::pair<uint64_t, std::string> write_tensors_atomic(const std::string& path, const std::string& header,
                                                      const std::vector<TensorView>& tensors);

// A tensor entry of a parsed header: data_offsets relative to the start of the data area.
struct TensorInfo {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::vector<TensorInfo> tensors;  // in the order of their data
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;          // offset of the data area in the file (8 + header length)
};

// The largest header accepted (the reference implementation's limit).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Parses and checks the header of a safetensors file whose first `size` bytes are `data`
// (the whole file): the header length within the file and the limit, a JSON object of
// entries with a known dtype, a non-negative shape whose element count times the dtype's
// size equals its byte range, ranges that tile the data area exactly (no overlap, no
// hole, nothing past the end), no duplicate names, string metadata. Throws
// Error(Format) whose message starts with `what` (the file's name) and names the problem.
Header parse(const uint8_t* data, size_t size, const std::string& what);

// The CRC-32 (zlib's, as gzip and PNG) of `n` bytes as 8 lowercase hex digits.
std::string crc32_hex(const void* data, size_t n);

// Reads a whole file. Throws Error(IO) naming the path and errno's text.
std::string read_file(const std::string& path);

// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, rename, fsync of
// the directory. Throws Error(IO) naming the path and errno's text.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace accel::safetensors
