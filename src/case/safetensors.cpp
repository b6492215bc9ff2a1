#include "case/safetensors.h"

#include <fstream>
#include <limits>

#include "case/json.h"
#include "core/check.h"

namespace step5::safetensors {

// The format stores little-endian bytes; this implementation copies them
// verbatim into host values.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes little-endian");

namespace {

using detail::concat;

[[noreturn]] void fail_io(const std::string& message) {
  detail::fail(ErrorCode::io_error, message);
}

void append_u64_le(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// Element count of `shape`, or -1 when it overflows int64.
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s != 0 && n > std::numeric_limits<int64_t>::max() / s) return -1;
    n *= s;
  }
  return n;
}

// The writer's strings must read back: a header is UTF-8 JSON.
void require_utf8(const std::string& s, const char* what) {
  detail::require(json::valid_utf8(s), ErrorCode::invalid_argument, "safetensors: ", what, " ",
                  json::quote(s), ": expected valid UTF-8");
}

}  // namespace

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "BF16";
    case DType::f32: return "F32";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::f8_e4m3: return "F8_E4M3";
    case DType::u8: return "U8";
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 2;
    case DType::f32: return 4;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::f8_e4m3: return 1;
    case DType::u8: return 1;
  }
  return 1;
}

int64_t Tensor::numel() const {
  return checked_numel(shape);
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i] < 0 ? std::string("*") : std::to_string(shape[i]);
  }
  return s + "]";
}

void File::add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data,
               size_t count) {
  detail::require(!name.empty() && name != "__metadata__", ErrorCode::invalid_argument,
                  "safetensors: invalid tensor name ", json::quote(name));
  detail::require(!has(name), ErrorCode::invalid_argument, "safetensors: tensor ",
                  json::quote(name), " added twice");
  int64_t numel = checked_numel(shape);
  detail::require(numel >= 0 && static_cast<size_t>(numel) == count, ErrorCode::invalid_argument,
                  "safetensors: tensor ", json::quote(name), ": shape ", shape_string(shape),
                  " expects ", numel, " elements, got ", count);
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(count * dtype_size(dtype));
  if (!t.data.empty()) std::memcpy(t.data.data(), data, t.data.size());
  tensors.emplace(name, std::move(t));
}

const Tensor& File::require(const std::string& name, DType dtype,
                            const std::vector<int64_t>& shape) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) fail_io(concat(what, ": missing tensor ", json::quote(name)));
  const Tensor& t = it->second;
  if (t.dtype != dtype) {
    fail_io(concat(what, ": tensor ", json::quote(name), ": dtype expected ", dtype_name(dtype),
                   ", got ", dtype_name(t.dtype)));
  }
  bool match = t.shape.size() == shape.size();
  for (size_t i = 0; match && i < shape.size(); ++i) {
    match = shape[i] < 0 || shape[i] == t.shape[i];
  }
  if (!match) {
    fail_io(concat(what, ": tensor ", json::quote(name), ": shape expected ", shape_string(shape),
                   ", got ", shape_string(t.shape)));
  }
  return t;
}

const std::string* File::find_meta(const std::string& key) const {
  auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

const std::string& File::require_meta(const std::string& key) const {
  const std::string* v = find_meta(key);
  if (!v) fail_io(concat(what, ": missing metadata ", json::quote(key)));
  return *v;
}

std::vector<uint8_t> serialize(const File& file) {
  std::string header = "{";
  if (!file.metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : file.metadata) {
      require_utf8(key, "metadata key");
      require_utf8(value, "metadata value");
      if (!first) header += ',';
      first = false;
      header += json::quote(key) + ":" + json::quote(value);
    }
    header += '}';
  }
  size_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    require_utf8(name, "tensor name");
    if (header.size() > 1) header += ',';
    header += json::quote(name) + ":{\"dtype\":\"" + dtype_name(t.dtype) + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      header += (i ? "," : "") + std::to_string(t.shape[i]);
    }
    header += concat("],\"data_offsets\":[", offset, ",", offset + t.data.size(), "]}");
    offset += t.data.size();
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + offset);
  append_u64_le(out, header.size());
  out.insert(out.end(), header.begin(), header.end());
  for (const auto& entry : file.tensors) {
    out.insert(out.end(), entry.second.data.begin(), entry.second.data.end());
  }
  return out;
}

void write_file(const std::string& path, const File& file) {
  std::vector<uint8_t> bytes = serialize(file);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail_io(concat(path, ": cannot create the file"));
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fail_io(concat(path, ": write error"));
}

}  // namespace step5::safetensors
