#include "case/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "case/json.h"
#include "core/check.h"

namespace step5::safetensors {

// The format stores little-endian bytes; this implementation copies them
// verbatim into host values.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes little-endian");

namespace {

using detail::concat;

// The reference implementation refuses larger headers; so do we, before
// allocating anything for a corrupted length.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr DType kAllDTypes[] = {DType::bf16, DType::f32,     DType::i32,
                                DType::i64,  DType::f8_e4m3, DType::u8};

[[noreturn]] void fail_io(const std::string& message) {
  detail::fail(ErrorCode::io_error, message);
}

bool parse_dtype(const std::string& s, DType& out) {
  for (DType d : kAllDTypes) {
    if (s == dtype_name(d)) {
      out = d;
      return true;
    }
  }
  return false;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
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

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  int64_t begin;
  int64_t end;
};

void parse_metadata(const json::Value& v, File& file, const std::string& what) {
  if (v.type != json::Type::object) {
    fail_io(concat(what, ": __metadata__ must be an object, got ", json::type_name(v.type),
                   " at header offset ", v.offset));
  }
  for (const auto& [key, value] : v.members) {
    if (value.type != json::Type::string) {
      fail_io(concat(what, ": __metadata__[", json::quote(key), "] must be a string, got ",
                     json::type_name(value.type)));
    }
    file.metadata[key] = value.text;
  }
}

Entry parse_entry(const std::string& name, const json::Value& v, int64_t data_bytes,
                  const std::string& what) {
  const std::string where = concat(what, ": tensor ", json::quote(name));
  if (name.empty()) fail_io(what + ": a tensor has an empty name");
  if (v.type != json::Type::object) {
    fail_io(concat(where, ": entry must be an object, got ", json::type_name(v.type)));
  }
  for (const auto& member : v.members) {
    if (member.first != "dtype" && member.first != "shape" && member.first != "data_offsets") {
      fail_io(concat(where, ": unknown field ", json::quote(member.first),
                     " (expected dtype, shape, data_offsets)"));
    }
  }
  const json::Value* dtype = v.find("dtype");
  const json::Value* shape = v.find("shape");
  const json::Value* offsets = v.find("data_offsets");
  if (!dtype || !shape || !offsets) {
    fail_io(concat(where, ": missing field ",
                   !dtype   ? "dtype"
                   : !shape ? "shape"
                            : "data_offsets"));
  }
  Entry e{name, DType::u8, {}, 0, 0};
  if (dtype->type != json::Type::string || !parse_dtype(dtype->text, e.dtype)) {
    fail_io(concat(
        where, ": unknown dtype ",
        dtype->type == json::Type::string ? json::quote(dtype->text) : json::type_name(dtype->type),
        " (supported: BF16, F32, I32, I64, F8_E4M3, U8)"));
  }
  if (shape->type != json::Type::array) {
    fail_io(concat(where, ": shape must be an array, got ", json::type_name(shape->type)));
  }
  for (const auto& dim : shape->items) {
    int64_t extent = 0;
    if (!dim.as_index(extent)) {
      fail_io(concat(where, ": shape entries must be non-negative integers, got ",
                     dim.type == json::Type::number ? dim.text : json::type_name(dim.type)));
    }
    e.shape.push_back(extent);
  }
  if (offsets->type != json::Type::array || offsets->items.size() != 2 ||
      !offsets->items[0].as_index(e.begin) || !offsets->items[1].as_index(e.end)) {
    fail_io(where + ": data_offsets must be [begin, end], two non-negative integers");
  }
  if (e.begin > e.end || e.end > data_bytes) {
    fail_io(concat(where, ": data_offsets [", e.begin, ", ", e.end,
                   "] out of range of the data section (", data_bytes, " bytes)"));
  }
  int64_t numel = checked_numel(e.shape);
  int64_t size = static_cast<int64_t>(dtype_size(e.dtype));
  if (numel < 0 || numel > std::numeric_limits<int64_t>::max() / size) {
    fail_io(concat(where, ": shape ", shape_string(e.shape), " overflows"));
  }
  if (e.end - e.begin != numel * size) {
    fail_io(concat(where, ": shape ", shape_string(e.shape), " of ", dtype_name(e.dtype), " needs ",
                   numel * size, " bytes, data_offsets [", e.begin, ", ", e.end, "] give ",
                   e.end - e.begin));
  }
  return e;
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

File parse(const std::vector<uint8_t>& bytes, const std::string& what) {
  File file;
  file.what = what;
  if (bytes.size() < 8) {
    fail_io(concat(what, ": truncated header: the file has ", bytes.size(),
                   " bytes, the header length alone needs 8"));
  }
  const uint64_t header_bytes = read_u64_le(bytes.data());
  const uint64_t rest = bytes.size() - 8;
  if (header_bytes > rest) {
    fail_io(concat(what, ": truncated header: its length field says ", header_bytes,
                   " bytes, only ", rest, " follow"));
  }
  if (header_bytes > kMaxHeaderBytes) {
    fail_io(concat(what, ": header of ", header_bytes, " bytes exceeds the 100 MiB limit"));
  }
  const auto* header = reinterpret_cast<const char*>(bytes.data() + 8);
  json::Value root = json::parse(header, header_bytes, what + ": header");
  if (root.type != json::Type::object) {
    fail_io(concat(what, ": header must be a JSON object, got ", json::type_name(root.type)));
  }
  const auto data_begin = static_cast<int64_t>(8 + header_bytes);
  const auto data_bytes = static_cast<int64_t>(bytes.size()) - data_begin;
  std::vector<Entry> entries;
  for (const auto& [name, value] : root.members) {
    if (name == "__metadata__") {
      parse_metadata(value, file, what);
    } else {
      entries.push_back(parse_entry(name, value, data_bytes, what));
    }
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < entries.size(); ++i) {
    const Entry& prev = entries[i - 1];
    const Entry& cur = entries[i];
    if (cur.begin < prev.end) {
      fail_io(concat(what, ": tensors ", json::quote(prev.name), " [", prev.begin, ", ", prev.end,
                     ") and ", json::quote(cur.name), " [", cur.begin, ", ", cur.end, ") overlap"));
    }
  }
  for (Entry& e : entries) {
    Tensor t;
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.data.assign(bytes.begin() + data_begin + e.begin, bytes.begin() + data_begin + e.end);
    file.tensors.emplace(e.name, std::move(t));
  }
  return file;
}

File read_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail_io(concat(path, ": no such file"));
  if (std::filesystem::is_directory(path, ec)) fail_io(concat(path, ": is a directory"));
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_io(concat(path, ": cannot open the file for reading"));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad()) fail_io(concat(path, ": read error"));
  return parse(bytes, path);
}

std::vector<uint8_t> serialize(const File& file) {
  std::string header = "{";
  if (!file.metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : file.metadata) {
      if (!first) header += ',';
      first = false;
      header += json::quote(key) + ":" + json::quote(value);
    }
    header += '}';
  }
  size_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
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
