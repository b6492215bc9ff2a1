// Reading safetensors: the header is read against its schema with the pull
// reader (no document tree), then the tensors' byte ranges must tile the
// data section exactly, then the bytes are copied.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "case/json.h"
#include "case/safetensors.h"
#include "core/check.h"

namespace step5::safetensors {

namespace {

using detail::concat;

[[noreturn]] void fail_io(const std::string& message) {
  detail::fail(ErrorCode::io_error, message);
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

bool parse_dtype(const std::string& s, DType& out) {
  for (DType d : {DType::bf16, DType::f32, DType::i32, DType::i64, DType::f8_e4m3, DType::u8}) {
    if (s == dtype_name(d)) {
      out = d;
      return true;
    }
  }
  return false;
}

struct Entry {
  std::string name;
  DType dtype = DType::u8;
  std::vector<int64_t> shape;
  int64_t begin = 0;
  int64_t end = 0;
};

class HeaderReader {
 public:
  HeaderReader(const char* text, size_t size, const std::string& what, int64_t data_bytes)
      : json_(text, size, what + ": header"), what_(what), data_bytes_(data_bytes) {}

  void read(File& file, std::vector<Entry>& entries) {
    const json::Type root = json_.peek();
    if (root != json::Type::object) {
      fail_io(concat(what_, ": header must be a JSON object, got ", json::type_name(root)));
    }
    json_.begin_object();
    std::string name;
    while (json_.next_key(name)) {
      if (name == "__metadata__") {
        metadata(file);
      } else {
        entries.push_back(entry(name));
      }
    }
    json_.finish();
  }

 private:
  void metadata(File& file) {
    const size_t at = json_.offset();
    const json::Type type = json_.peek();
    if (type != json::Type::object) {
      fail_io(concat(what_, ": __metadata__ must be an object, got ", json::type_name(type),
                     " at header offset ", at));
    }
    json_.begin_object();
    std::string key;
    while (json_.next_key(key)) {
      const json::Type value = json_.peek();
      if (value != json::Type::string) {
        fail_io(concat(what_, ": __metadata__[", json::quote(key), "] must be a string, got ",
                       json::type_name(value)));
      }
      file.metadata[key] = json_.string_value();
    }
  }

  // A non-negative integer below 2^63, or a message naming what was found.
  bool index(int64_t& out, std::string& got) {
    const json::Type type = json_.peek();
    if (type != json::Type::number) {
      got = json::type_name(type);
      return false;
    }
    got = json_.number_value();
    return json::parse_index(got, out);
  }

  void shape(const std::string& where, Entry& e) {
    const json::Type type = json_.peek();
    if (type != json::Type::array) {
      fail_io(concat(where, ": shape must be an array, got ", json::type_name(type)));
    }
    json_.begin_array();
    while (json_.next_item()) {
      if (e.shape.size() == kMaxRank) {
        fail_io(concat(where, ": shape has more than ", kMaxRank, " dimensions"));
      }
      int64_t extent = 0;
      std::string got;
      if (!index(extent, got)) {
        fail_io(concat(where, ": shape entries must be non-negative integers, got ", got));
      }
      e.shape.push_back(extent);
    }
  }

  void offsets(const std::string& where, Entry& e) {
    const std::string expected = where + ": data_offsets must be [begin, end], two non-negative ";
    const json::Type type = json_.peek();
    if (type != json::Type::array) fail_io(expected + "integers, got " + json::type_name(type));
    json_.begin_array();
    int64_t* targets[] = {&e.begin, &e.end};
    size_t count = 0;
    while (json_.next_item()) {
      std::string got;
      if (count == 2) fail_io(expected + "integers, got more than two entries");
      if (!index(*targets[count], got)) fail_io(expected + "integers, got " + got);
      ++count;
    }
    if (count != 2) fail_io(concat(expected, "integers, got ", count, " entries"));
  }

  Entry entry(const std::string& name) {
    const std::string where = concat(what_, ": tensor ", json::quote(name));
    if (name.empty()) fail_io(what_ + ": a tensor has an empty name");
    const json::Type type = json_.peek();
    if (type != json::Type::object) {
      fail_io(concat(where, ": entry must be an object, got ", json::type_name(type)));
    }
    Entry e;
    e.name = name;
    bool has_dtype = false, has_shape = false, has_offsets = false;
    json_.begin_object();
    std::string field;
    while (json_.next_key(field)) {
      if (field == "dtype") {
        has_dtype = true;
        const json::Type t = json_.peek();
        const std::string got = t == json::Type::string ? json_.string_value() : "";
        if (t != json::Type::string || !parse_dtype(got, e.dtype)) {
          fail_io(concat(where, ": unknown dtype ",
                         t == json::Type::string ? json::quote(got) : json::type_name(t),
                         " (supported: BF16, F32, I32, I64, F8_E4M3, U8)"));
        }
      } else if (field == "shape") {
        has_shape = true;
        shape(where, e);
      } else if (field == "data_offsets") {
        has_offsets = true;
        offsets(where, e);
      } else {
        fail_io(concat(where, ": unknown field ", json::quote(field),
                       " (expected dtype, shape, data_offsets)"));
      }
    }
    if (!has_dtype || !has_shape || !has_offsets) {
      fail_io(concat(where, ": missing field ",
                     !has_dtype   ? "dtype"
                     : !has_shape ? "shape"
                                  : "data_offsets"));
    }
    check_size(where, e);
    return e;
  }

  void check_size(const std::string& where, const Entry& e) const {
    if (e.begin > e.end || e.end > data_bytes_) {
      fail_io(concat(where, ": data_offsets [", e.begin, ", ", e.end,
                     "] out of range of the data section (", data_bytes_, " bytes)"));
    }
    int64_t numel = 1;
    for (int64_t s : e.shape) {
      if (s != 0 && numel > std::numeric_limits<int64_t>::max() / s) numel = -1;
      if (numel < 0) break;
      numel *= s;
    }
    const auto size = static_cast<int64_t>(dtype_size(e.dtype));
    if (numel < 0 || numel > std::numeric_limits<int64_t>::max() / size) {
      fail_io(concat(where, ": shape ", shape_string(e.shape), " overflows"));
    }
    if (e.end - e.begin != numel * size) {
      fail_io(concat(where, ": shape ", shape_string(e.shape), " of ", dtype_name(e.dtype),
                     " needs ", numel * size, " bytes, data_offsets [", e.begin, ", ", e.end,
                     "] give ", e.end - e.begin));
    }
  }

  json::Reader json_;
  const std::string& what_;
  int64_t data_bytes_;
};

// The tensors must cover the data section exactly: no overlap, no gap, no
// trailing bytes (as the reference implementation requires).
void check_coverage(std::vector<Entry>& entries, int64_t data_bytes, const std::string& what) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& cur = entries[i];
    if (i > 0 && cur.begin < covered) {
      const Entry& prev = entries[i - 1];
      fail_io(concat(what, ": tensors ", json::quote(prev.name), " [", prev.begin, ", ", prev.end,
                     ") and ", json::quote(cur.name), " [", cur.begin, ", ", cur.end, ") overlap"));
    }
    if (cur.begin != covered) {
      fail_io(concat(what, ": data bytes [", covered, ", ", cur.begin,
                     ") are not covered by any tensor (tensor ", json::quote(cur.name),
                     " starts at ", cur.begin, ", expected ", covered, ")"));
    }
    covered = cur.end;
  }
  if (covered != data_bytes) {
    fail_io(concat(what, ": data section has ", data_bytes, " bytes, the tensors cover ", covered,
                   ": ", data_bytes - covered, " trailing bytes are not covered by any tensor"));
  }
}

}  // namespace

File parse(const uint8_t* data, size_t size, const std::string& what) {
  File file;
  file.what = what;
  if (size < 8) {
    fail_io(concat(what, ": truncated header: the file has ", size,
                   " bytes, the header length alone needs 8"));
  }
  const uint64_t header_bytes = read_u64_le(data);
  const uint64_t rest = size - 8;
  if (header_bytes > kMaxHeaderBytes) {
    fail_io(concat(what, ": header length ", header_bytes, " bytes exceeds the limit of ",
                   kMaxHeaderBytes, " (100 MiB)"));
  }
  if (header_bytes > rest) {
    fail_io(concat(what, ": truncated header: its length field says ", header_bytes,
                   " bytes, only ", rest, " follow"));
  }
  const auto data_bytes = static_cast<int64_t>(rest - header_bytes);
  std::vector<Entry> entries;
  HeaderReader(reinterpret_cast<const char*>(data + 8), header_bytes, what, data_bytes)
      .read(file, entries);
  check_coverage(entries, data_bytes, what);
  const uint8_t* section = data + 8 + header_bytes;
  for (Entry& e : entries) {
    Tensor t;
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.data.assign(section + e.begin, section + e.end);
    file.tensors.emplace(e.name, std::move(t));
  }
  return file;
}

File parse(const std::vector<uint8_t>& bytes, const std::string& what) {
  return parse(bytes.data(), bytes.size(), what);
}

File read_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then
  // refuses anything that is not a regular file before reading a byte.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) fail_io(concat(path, ": no such file"));
    fail_io(concat(path, ": cannot open the file for reading: ", std::strerror(err)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail_io(concat(path, ": cannot stat: ", std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) fail_io(concat(path, ": is a directory"));
  if (!S_ISREG(st.st_mode)) {
    fail_io(concat(path, ": not a regular file (a device, pipe or socket); expected a case file"));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > kMaxFileBytes) {
    fail_io(concat(path, ": file of ", size, " bytes exceeds the limit of ", kMaxFileBytes,
                   " bytes (16 GiB)"));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail_io(concat(path, ": read error: ", std::strerror(errno)));
    if (got == 0) {
      fail_io(concat(path, ": file shrank while reading: expected ", size, " bytes, got ", done));
    }
    done += static_cast<size_t>(got);
  }
  return parse(bytes, path);
}

}  // namespace step5::safetensors
