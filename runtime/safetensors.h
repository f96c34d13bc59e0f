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

// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, rename, fsync of
// the directory. Throws Error(IO) naming the path and errno's text.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace accel::safetensors
