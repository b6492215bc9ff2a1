// Safetensors files (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length, a JSON header mapping tensor names to
// {dtype, shape, data_offsets} plus an optional "__metadata__" string map,
// then the tensor bytes. Reading checks every structural rule so that a
// malformed file fails with one message naming what is wrong; the named
// accessors then check each tensor a caller expects. Part of the testing
// library (step5::testing, src/case/safetensors*.cpp), under the case files
// of case_file.h.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace step5::safetensors {

enum class DType : uint8_t { bf16, f32, i32, i64, f8_e4m3, u8 };

const char* dtype_name(DType dtype);  // the header spelling: "BF16", "F32", ...
size_t dtype_size(DType dtype);

struct Tensor {
  DType dtype = DType::u8;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // little-endian element bytes, row-major

  int64_t numel() const;
};

std::string shape_string(const std::vector<int64_t>& shape);

class File {
 public:
  std::string what = "safetensors";  // names the file in messages (its path)
  std::map<std::string, std::string> metadata;
  std::map<std::string, Tensor> tensors;

  // Adds a tensor copied from `count` elements at `data`; throws
  // invalid_argument when the count does not match the shape or the name is
  // taken.
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data,
           size_t count);

  // The named tensor, checked for dtype and shape (-1 in `shape` = any
  // extent); throws io_error naming the tensor, what was expected and what
  // the file holds.
  const Tensor& require(const std::string& name, DType dtype,
                        const std::vector<int64_t>& shape) const;
  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  // A metadata value; `require_meta` throws io_error when it is absent.
  const std::string& require_meta(const std::string& key) const;
  const std::string* find_meta(const std::string& key) const;
};

// Bounds checked before anything is allocated for what a file claims. The
// header bound is the reference implementation's; the file bound keeps a
// mistaken path (a disk image, a dataset) from being read into memory.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr uint64_t kMaxFileBytes = uint64_t{16} << 30;
constexpr size_t kMaxRank = 16;

// Parses a whole file image. Throws step5::Error(io_error) on: a truncated
// header, a header over kMaxHeaderBytes, bad JSON (including duplicate keys
// and invalid UTF-8), a header that is not an object of tensor entries, an
// unknown dtype or field, a shape of more than kMaxRank dimensions or one
// whose byte size overflows, data_offsets out of range, overlapping or not
// matching the shape's byte size, data bytes that no tensor covers (a gap or
// trailing bytes, as the reference implementation rejects), non-string
// metadata. Memory: the tensors' bytes plus O(1) per tensor and metadata key.
File parse(const uint8_t* data, size_t size, const std::string& what);
File parse(const std::vector<uint8_t>& bytes, const std::string& what);
// Reads a regular file of at most kMaxFileBytes (checked with fstat before
// reading; a device, pipe or directory is refused without reading it).
File read_file(const std::string& path);

// Deterministic image: tensors sorted by name, laid out back to back in that
// order (as every safetensors reader expects), the header padded with spaces
// so the data starts 8-byte aligned. Throws invalid_argument for a tensor
// name or metadata string that is not valid UTF-8.
std::vector<uint8_t> serialize(const File& file);
void write_file(const std::string& path, const File& file);

// Element access for the file's little-endian bytes (the host must be
// little-endian, checked at compile time in safetensors.cpp).
template <class T>
std::vector<T> elements(const Tensor& tensor) {
  std::vector<T> out(tensor.data.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), tensor.data.data(), out.size() * sizeof(T));
  return out;
}

}  // namespace step5::safetensors
