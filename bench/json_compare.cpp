// The measurement behind keeping the hand-written JSON reader (docs/case_files.md):
// the safetensors header schema read with src/case/json.h (as
// safetensors::parse does) against nlohmann-json (Debian nlohmann-json3-dev)
// with a duplicate-key check, on a large realistic header, many metadata
// keys and hostile inputs. Not part of the build; on Debian:
//
//   apt-get install nlohmann-json3-dev
//   g++ -O2 -std=c++17 -Isrc -Iinclude bench/json_compare.cpp src/case/json.cpp \
//       src/case/safetensors.cpp src/case/safetensors_read.cpp -o /tmp/json_compare
//   /tmp/json_compare ours|nlohmann realistic|keys|zeros
//
// Each run parses one input once and prints the time and the peak RSS
// (VmHWM), so every measurement starts from a fresh process.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "case/safetensors.h"
#include "step5/error.h"

namespace {

std::string header_image(const std::string& header) {
  std::string image;
  for (size_t i = 0; i < 8; ++i) image += static_cast<char>(header.size() >> (8 * i));
  return image + header;
}

// 10,000 steps of a CSA case: 11 zero-size tensors each, ~10 MB of header.
std::string realistic() {
  const char* fields[] = {"request",     "query_start_loc", "seq_lens",  "query",   "key", "value",
                          "index_query", "index_weight",    "index_key", "index_z", "gate"};
  std::string h = "{\"__metadata__\":{\"format\":\"step5-case/1\",\"steps\":\"10000\"}";
  for (int s = 0; s < 10000; ++s) {
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

// What safetensors::parse extracts, through nlohmann: a DOM parse with a
// callback that rejects duplicate keys, then the schema walk.
size_t nlohmann_parse(const std::string& header) {
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
    std::fprintf(stderr, "usage: json_compare ours|nlohmann realistic|keys|zeros\n");
    return 2;
  }
  const std::string which = argv[2];
  const std::string header = which == "realistic" ? realistic()
                             : which == "keys"    ? many_keys()
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
    } else {
      result = std::to_string(nlohmann_parse(header)) + " tensors";
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
