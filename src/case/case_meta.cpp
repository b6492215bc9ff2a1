// SPEC 10 metadata: every value is a string, numbers in decimal.
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

int32_t meta_int(const safetensors::File& file, const std::string& key) {
  const std::string& v = file.require_meta(key);
  bool ok = !v.empty() && v.size() <= 11;
  for (size_t i = 0; ok && i < v.size(); ++i) {
    ok = (v[i] >= '0' && v[i] <= '9') || (i == 0 && v[i] == '-' && v.size() > 1);
  }
  long long x = ok ? std::strtoll(v.c_str(), nullptr, 10) : 0;
  if (!ok || x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
    fail_meta(file, key, "a decimal 32-bit integer", v);
  }
  return static_cast<int32_t>(x);
}

float meta_float(const safetensors::File& file, const std::string& key) {
  const std::string& v = file.require_meta(key);
  char* end = nullptr;
  errno = 0;
  float x = v.empty() ? 0.0f : std::strtof(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno == ERANGE || !std::isfinite(x) ||
      v.find_first_of(" \t\n") != std::string::npos) {
    fail_meta(file, key, "a finite decimal number", v);
  }
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

size_t meta_steps(const safetensors::File& file) {
  int32_t steps = meta_int(file, "steps");
  if (steps < 0) fail_meta(file, "steps", "a count >= 0", file.require_meta("steps"));
  return static_cast<size_t>(steps);
}

}  // namespace step5::case_detail
