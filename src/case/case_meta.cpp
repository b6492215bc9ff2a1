// SPEC 10 metadata: every value is a string, numbers in decimal.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>

#include "case/case_internal.h"
#include "case/json.h"
#include "core/check.h"
#include "step5/testing/case_file.h"

namespace step5::case_detail {

using detail::concat;

namespace {

[[noreturn]] void fail_meta(const safetensors::File& file, const std::string& key,
                            const std::string& expected, const std::string& got) {
  detail::fail(ErrorCode::io_error, concat(file.what, ": metadata ", json::quote(key),
                                           ": expected ", expected, ", got ", json::quote(got)));
}

DType read_storage_dtype(const safetensors::File& file, const std::string& key) {
  const std::string& v = file.require_meta(key);
  if (v == "bf16") return DType::bf16;
  if (v == "fp8_e4m3") return DType::fp8_e4m3;
  fail_meta(file, key, "bf16 or fp8_e4m3", v);
}

}  // namespace

std::string step_name(size_t step, const char* field) {
  return concat("step", step, ".", field);
}

// The JSON number grammar (RFC 8259 section 6), nothing else: no sign
// '+', no hex, no leading zeros, no whitespace, no inf or nan.
bool json_number(const std::string& v, bool integer) {
  size_t i = 0;
  auto digit = [&](size_t at) { return at < v.size() && v[at] >= '0' && v[at] <= '9'; };
  auto digits = [&]() {
    if (!digit(i)) return false;
    while (digit(i)) ++i;
    return true;
  };
  if (i < v.size() && v[i] == '-') ++i;
  if (!digit(i)) return false;
  if (v[i] == '0') {
    ++i;
  } else {
    digits();
  }
  if (!integer && i < v.size() && v[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (!integer && i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
    ++i;
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == v.size();
}

int32_t meta_int(const safetensors::File& file, const std::string& key) {
  const std::string& v = file.require_meta(key);
  const bool ok = v.size() <= 11 && json_number(v, true);
  const long long x = ok ? std::strtoll(v.c_str(), nullptr, 10) : 0;
  if (!ok || x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
    fail_meta(file, key, "a decimal 32-bit integer", v);
  }
  return static_cast<int32_t>(x);
}

float meta_float(const safetensors::File& file, const std::string& key) {
  const std::string& v = file.require_meta(key);
  bool ok = v.size() <= 64 && json_number(v, false);
  float x = 0.0f;
  if (ok) {
    errno = 0;
    x = std::strtof(v.c_str(), nullptr);
    ok = errno != ERANGE && std::isfinite(x);
  }
  if (!ok) fail_meta(file, key, "a finite decimal number (JSON number syntax)", v);
  return x;
}

std::string format_float(float x) {
  char buf[32];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, static_cast<double>(x));
    if (std::strtof(buf, nullptr) == x) break;
  }
  return buf;
}

void write_config(const LayerConfig& c, std::map<std::string, std::string>& m) {
  m["format"] = kCaseFormat;
  m["layer"] = layer_kind_name(c.kind);
  m["num_heads"] = std::to_string(c.num_heads);
  m["num_kv_heads"] = std::to_string(c.num_kv_heads);
  m["head_size"] = std::to_string(c.head_size);
  m["block_size"] = std::to_string(c.block_size);
  m["kv_dtype"] = dtype_name(c.kv_dtype);
  m["k_scale"] = format_float(c.k_scale);
  m["v_scale"] = format_float(c.v_scale);
  // scale 0 means the SPEC default 1/sqrt(D), which is what an absent key
  // means in the file; writing it only when set keeps that round trip exact.
  if (c.scale != 0.0f) m["scale"] = format_float(c.scale);
  m["spec_tokens"] = std::to_string(c.spec_tokens);
  if (c.kind == LayerKind::csa) {
    m["index_heads"] = std::to_string(c.index_heads);
    m["index_dim"] = std::to_string(c.index_dim);
    m["topk"] = std::to_string(c.topk);
    m["summary_dtype"] = dtype_name(c.summary_dtype);
  } else {
    m["window"] = std::to_string(c.window);
  }
}

LayerConfig read_config(const safetensors::File& file) {
  const std::string& format = file.require_meta("format");
  if (format != kCaseFormat) fail_meta(file, "format", kCaseFormat, format);
  LayerConfig c;
  const std::string& layer = file.require_meta("layer");
  if (layer == "csa") {
    c.kind = LayerKind::csa;
  } else if (layer == "swa") {
    c.kind = LayerKind::swa;
  } else {
    fail_meta(file, "layer", "csa or swa", layer);
  }
  c.num_heads = meta_int(file, "num_heads");
  c.num_kv_heads = meta_int(file, "num_kv_heads");
  c.head_size = meta_int(file, "head_size");
  c.block_size = meta_int(file, "block_size");
  c.kv_dtype = read_storage_dtype(file, "kv_dtype");
  c.k_scale = file.find_meta("k_scale") ? meta_float(file, "k_scale") : 1.0f;
  c.v_scale = file.find_meta("v_scale") ? meta_float(file, "v_scale") : 1.0f;
  c.scale = file.find_meta("scale") ? meta_float(file, "scale") : 0.0f;
  c.spec_tokens = file.find_meta("spec_tokens") ? meta_int(file, "spec_tokens") : 0;
  if (c.kind == LayerKind::csa) {
    c.index_heads = meta_int(file, "index_heads");
    c.index_dim = meta_int(file, "index_dim");
    c.topk = meta_int(file, "topk");
    c.summary_dtype = read_storage_dtype(file, "summary_dtype");
  } else {
    c.window = meta_int(file, "window");
  }
  try {
    validate_config(c);
  } catch (const Error& e) {
    detail::fail(ErrorCode::io_error, concat(file.what, ": metadata: ", e.what()));
  }
  return c;
}

void reject_unexpected(const safetensors::File& file, const std::vector<std::string>& expected) {
  std::set<std::string> known(expected.begin(), expected.end());
  for (const auto& entry : file.tensors) {
    if (!known.count(entry.first)) {
      detail::fail(ErrorCode::io_error,
                   concat(file.what, ": unexpected tensor ", json::quote(entry.first),
                          " (not part of a ", layer_kind_name(read_config(file).kind), " ",
                          kCaseFormat, " file with ", file.require_meta("steps"), " steps)"));
    }
  }
}

void reject_unknown_meta(const safetensors::File& file, LayerKind kind, bool outputs) {
  std::vector<std::string> known = {
      "format",  "layer",   "num_heads", "num_kv_heads", "head_size", "block_size", "kv_dtype",
      "k_scale", "v_scale", "scale",     "spec_tokens",  "steps",     "content"};
  if (kind == LayerKind::csa) {
    known.insert(known.end(), {"index_heads", "index_dim", "topk", "summary_dtype"});
  } else {
    known.emplace_back("window");
  }
  for (const auto& entry : file.metadata) {
    if (std::find(known.begin(), known.end(), entry.first) != known.end()) continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    detail::fail(ErrorCode::io_error,
                 concat(file.what, ": unknown metadata key ", json::quote(entry.first), " in a ",
                        layer_kind_name(kind), " ", kCaseFormat, outputs ? " outputs" : "",
                        " file (expected one of: ", list, ")"));
  }
}

size_t meta_steps(const safetensors::File& file, size_t tensors_per_step) {
  const int32_t steps = meta_int(file, "steps");
  if (steps < 0) fail_meta(file, "steps", "a count >= 0", file.require_meta("steps"));
  // Every step has at least `tensors_per_step` tensors, so a count the file
  // cannot hold is refused before anything is sized by it.
  const size_t most = file.tensors.size() / tensors_per_step;
  if (static_cast<size_t>(steps) > most) {
    fail_meta(file, "steps",
              concat("at most ", most, " (each step has at least ", tensors_per_step,
                     " tensors and the file holds ", file.tensors.size(), ")"),
              file.require_meta("steps"));
  }
  return static_cast<size_t>(steps);
}

}  // namespace step5::case_detail
