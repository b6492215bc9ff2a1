// The measurement behind keeping the hand-written JSON reader (docs/case_files.md):
// the safetensors header schema read with step5/testing/json.h (as
// safetensors::parse does) against nlohmann-json (Debian nlohmann-json3-dev)
// with a duplicate-key check, on a large realistic header, many metadata
// keys and hostile inputs. Not part of the build; on Debian:
//
//   apt-get install nlohmann-json3-dev
//   g++ -O2 -std=c++17 -Isrc -Iinclude -o /tmp/json_compare bench/json_compare.cpp
//       src/case/json.cpp src/case/safetensors.cpp src/case/safetensors_read.cpp
//   /tmp/json_compare ours|reader|sax|dom realistic[:STEPS]|keys|zeros
//
// ours: safetensors::parse (header, coverage check, tensor map). reader:
// json::Reader building the same entries as sax, nothing more. sax: nlohmann::json::sax_parse with
// a handler that checks duplicate keys and builds the same entries. dom: nlohmann::json::parse with
// a parser callback doing the duplicate check (the documented way to see keys), then the schema
// walk. Each run parses one input once and prints the time and the peak RSS (VmHWM), so every
// measurement starts from a fresh process.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "step5/error.h"
#include "step5/testing/json.h"
#include "step5/testing/safetensors.h"

namespace {

std::string header_image(const std::string& header) {
  std::string image;
  for (size_t i = 0; i < 8; ++i) image += static_cast<char>(header.size() >> (8 * i));
  return image + header;
}

// `steps` steps of a CSA case: 11 zero-size tensors each (10,000 steps:
// 8.4 MB of header).
std::string realistic(int steps) {
  const char* fields[] = {"request",     "query_start_loc", "seq_lens",  "query",   "key", "value",
                          "index_query", "index_weight",    "index_key", "index_z", "gate"};
  std::string h = "{\"__metadata__\":{\"format\":\"step5-case/1\",\"steps\":\"10000\"}";
  for (int s = 0; s < steps; ++s) {
    for (const char* f : fields) {
      h += ",\"step" + std::to_string(s) + "." + f +
           "\":{\"dtype\":\"BF16\",\"shape\":[0,64,192],\"data_offsets\":[0,0]}";
    }
  }
  return h + "}";
}

std::string many_keys() {
  std::string h = "{\"__metadata__\":{";
  for (int i = 0; i < 160000; ++i) h += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":\"v\"";
  return h + "}}";
}

std::string zeros() {
  std::string h = "{\"x\":{\"dtype\":\"U8\",\"shape\":[";
  while (h.size() < (size_t{20} << 20)) h += "0,";
  return h + "0],\"data_offsets\":[0,0]}}";
}

struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape, offsets;
};

// What safetensors::parse extracts, through nlohmann's SAX interface:
// duplicate keys rejected per object, entries built as they are read.
class Sax : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;

  bool null() override { return bad("null"); }
  bool boolean(bool) override { return bad("boolean"); }
  bool number_integer(number_integer_t v) override {
    return v < 0 ? bad("negative") : number_unsigned(static_cast<number_unsigned_t>(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (frames_.size() != 3 || frames_[1].key == "__metadata__") return bad("number");
    auto& target = frames_[1].key == "shape" ? entries.back().shape : entries.back().offsets;
    if (target.size() == 16) return bad("too many dimensions");
    target.push_back(static_cast<int64_t>(v));
    return true;
  }
  bool number_float(number_float_t, const string_t&) override { return bad("fraction"); }
  bool string(string_t& s) override {
    if (frames_.size() != 2) return bad("string");
    if (frames_[0].key == "__metadata__") {
      metadata[frames_[1].key] = s;
    } else if (frames_[1].key == "dtype") {
      entries.back().dtype = s;
    } else {
      return bad("string field");
    }
    return true;
  }
  bool binary(binary_t&) override { return bad("binary"); }
  bool start_object(std::size_t) override {
    if (frames_.size() >= 2) return bad("nesting");
    if (frames_.size() == 1 && frames_[0].key != "__metadata__") {
      entries.push_back(Entry{frames_[0].key, {}, {}, {}});
    }
    frames_.push_back(Frame{true, {}, {}});
    return true;
  }
  bool key(string_t& k) override {
    if (!frames_.back().keys.insert(k).second) return bad("duplicate key " + k);
    frames_.back().key = k;
    return true;
  }
  bool end_object() override {
    frames_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (frames_.size() != 2) return bad("array");
    frames_.push_back(Frame{false, {}, {}});
    return true;
  }
  bool end_array() override {
    frames_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw std::runtime_error(e.what());
  }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;
  };
  bool bad(const std::string& why) { throw std::runtime_error(why); }
  std::vector<Frame> frames_;
};

// The same entries through json::Reader alone (what safetensors::parse
// does before its coverage check and the tensor map).
size_t reader_parse(const std::string& header) {
  using step5::json::Type;
  step5::json::Reader r(header.data(), header.size(), "bench");
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
  std::string name, field, key;
  if (r.peek() != Type::object) throw std::runtime_error("header must be an object");
  r.begin_object();
  while (r.next_key(name)) {
    if (r.peek() != Type::object) throw std::runtime_error("entry must be an object");
    r.begin_object();
    if (name == "__metadata__") {
      while (r.next_key(key)) {
        if (r.peek() != Type::string) throw std::runtime_error("metadata must be strings");
        metadata[key] = r.string_value();
      }
      continue;
    }
    entries.push_back(Entry{name, {}, {}, {}});
    while (r.next_key(field)) {
      if (field == "dtype") {
        entries.back().dtype = r.string_value();
        continue;
      }
      auto& target = field == "shape" ? entries.back().shape : entries.back().offsets;
      r.begin_array();
      while (r.next_item()) {
        int64_t v = 0;
        if (target.size() == 16 || !step5::json::parse_index(r.number_value(), v)) {
          throw std::runtime_error("bad index");
        }
        target.push_back(v);
      }
    }
  }
  r.finish();
  return entries.size();
}

size_t sax_parse(const std::string& header) {
  Sax sax;
  nlohmann::json::sax_parse(header, &sax);
  return sax.entries.size();
}

// Through nlohmann's DOM: a parse with a callback that rejects duplicate
// keys, then the schema walk.
size_t dom_parse(const std::string& header) {
  using nlohmann::json;
  std::vector<std::set<std::string>> keys;
  json::parser_callback_t check = [&keys](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end) keys.pop_back();
    if (event == json::parse_event_t::key &&
        !keys.back().insert(parsed.get<std::string>()).second) {
      throw std::runtime_error("duplicate key " + parsed.get<std::string>());
    }
    return true;
  };
  const json root = json::parse(header, check);
  if (!root.is_object()) throw std::runtime_error("header must be an object");
  size_t tensors = 0;
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) throw std::runtime_error("metadata " + k + " must be a string");
      }
      continue;
    }
    const auto& shape = entry.at("shape");
    if (!entry.at("dtype").is_string() || !shape.is_array() || shape.size() > 16) {
      throw std::runtime_error("bad entry " + name);
    }
    for (const auto& d : shape) (void)d.get<int64_t>();
    (void)entry.at("data_offsets").at(1).get<int64_t>();
    ++tensors;
  }
  return tensors;
}

long peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: json_compare ours|reader|sax|dom realistic[:STEPS]|keys|zeros\n");
    return 2;
  }
  const std::string which = argv[2];
  const std::string header =
      which.rfind("realistic", 0) == 0
          ? realistic(which.size() > 10 ? std::stoi(which.substr(10)) : 10000)
      : which == "keys" ? many_keys()
                        : zeros();
  const std::string image = header_image(header);
  const long before = peak_rss_kib();
  const auto t0 = std::chrono::steady_clock::now();
  std::string result;
  try {
    if (std::strcmp(argv[1], "ours") == 0) {
      const auto file = step5::safetensors::parse(reinterpret_cast<const uint8_t*>(image.data()),
                                                  image.size(), "bench");
      result = std::to_string(file.tensors.size()) + " tensors";
    } else if (std::strcmp(argv[1], "reader") == 0) {
      result = std::to_string(reader_parse(header)) + " tensors";
    } else if (std::strcmp(argv[1], "sax") == 0) {
      result = std::to_string(sax_parse(header)) + " tensors";
    } else {
      result = std::to_string(dom_parse(header)) + " tensors";
    }
  } catch (const std::exception& e) {
    result = std::string("error: ") + e.what();
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s %s: %zu header bytes, %.1f ms, peak RSS +%ld MiB (%.80s)\n", argv[1],
              which.c_str(), header.size(), ms, (peak_rss_kib() - before) / 1024, result.c_str());
  return 0;
}
