// Reading and writing `step5-case/1` files (SPEC 10).
#include "step5/testing/case_file.h"

#include <algorithm>

#include "case/case_internal.h"
#include "case/json.h"
#include "case/safetensors.h"
#include "core/check.h"

namespace step5 {

using case_detail::step_name;
using detail::concat;
namespace st = safetensors;

int64_t Case::context_rows() const {
  int64_t rows = 0;
  for (int32_t len : context_lens) rows += len;
  return rows;
}

int64_t Case::max_context() const {
  int64_t longest = 0;
  for (int32_t len : context_lens) longest = std::max<int64_t>(longest, len);
  for (const auto& step : steps) {
    for (int32_t len : step.seq_lens) longest = std::max<int64_t>(longest, len);
  }
  return longest;
}

namespace {

template <class T>
void add(st::File& file, const std::string& name, st::DType dtype, std::vector<int64_t> shape,
         const std::vector<T>& values) {
  file.add(name, dtype, std::move(shape), values.data(), values.size());
}

[[noreturn]] void fail_io(const std::string& message) {
  detail::fail(ErrorCode::io_error, message);
}

// query_start_loc is read before the row tensors because it defines n; a
// bad one would otherwise surface as a confusing shape mismatch.
void check_query_start_loc(const st::File& file, size_t s, const std::vector<int32_t>& qsl) {
  if (qsl[0] != 0) {
    fail_io(
        concat(file.what, ": ", step_name(s, "query_start_loc"), "[0]: expected 0, got ", qsl[0]));
  }
  for (size_t i = 1; i < qsl.size(); ++i) {
    if (qsl[i] < qsl[i - 1]) {
      fail_io(concat(file.what, ": ", step_name(s, "query_start_loc"), "[", i,
                     "]: expected >= ", qsl[i - 1], " (non-decreasing), got ", qsl[i]));
    }
  }
}

sim::StepInput read_step(const st::File& file, const LayerConfig& c, size_t s,
                         std::vector<std::string>& names) {
  const bool csa = c.kind == LayerKind::csa;
  const int64_t H = c.num_heads, G = c.num_kv_heads, D = c.head_size;
  const int64_t I = c.index_heads, Di = c.index_dim;
  auto get = [&](const char* field, st::DType dtype, std::vector<int64_t> shape) {
    names.push_back(step_name(s, field));
    return &file.require(names.back(), dtype, shape);
  };
  sim::StepInput in;
  in.request = st::elements<int32_t>(*get("request", st::DType::i32, {-1}));
  const auto rs = static_cast<int64_t>(in.request.size());
  in.query_start_loc = st::elements<int32_t>(*get("query_start_loc", st::DType::i32, {rs + 1}));
  check_query_start_loc(file, s, in.query_start_loc);
  const int64_t n = in.query_start_loc.back();
  in.seq_lens = st::elements<int32_t>(*get("seq_lens", st::DType::i32, {rs}));
  in.query = st::elements<uint16_t>(*get("query", st::DType::bf16, {n, H, D}));
  in.key = st::elements<uint16_t>(*get("key", st::DType::bf16, {n, G, D}));
  in.value = st::elements<uint16_t>(*get("value", st::DType::bf16, {n, G, D}));
  if (csa) {
    in.index_query = st::elements<uint16_t>(*get("index_query", st::DType::bf16, {n, G, I, Di}));
    in.index_weight = st::elements<float>(*get("index_weight", st::DType::f32, {n, G, I}));
    in.index_key = st::elements<uint16_t>(*get("index_key", st::DType::bf16, {n, Di}));
    in.index_z = st::elements<float>(*get("index_z", st::DType::f32, {n}));
  }
  if (file.has(step_name(s, "gate"))) {
    in.gate = st::elements<uint16_t>(*get("gate", st::DType::bf16, {n, H}));
  }
  return in;
}

}  // namespace

namespace case_detail {

st::File case_file(const Case& c, const std::string& what) {
  validate_case(c);
  const bool csa = c.config.kind == LayerKind::csa;
  const int64_t H = c.config.num_heads, G = c.config.num_kv_heads, D = c.config.head_size;
  const int64_t I = c.config.index_heads, Di = c.config.index_dim;
  const int64_t rows = c.context_rows();
  st::File file;
  file.what = what;
  case_detail::write_config(c.config, file.metadata);
  file.metadata["steps"] = std::to_string(c.steps.size());
  add(file, "context.lens", st::DType::i32, {c.num_requests()}, c.context_lens);
  add(file, "context.key", st::DType::bf16, {rows, G, D}, c.context_key);
  add(file, "context.value", st::DType::bf16, {rows, G, D}, c.context_value);
  if (csa) {
    add(file, "context.index_key", st::DType::bf16, {rows, Di}, c.context_index_key);
    add(file, "context.index_z", st::DType::f32, {rows}, c.context_index_z);
  }
  for (size_t s = 0; s < c.steps.size(); ++s) {
    const sim::StepInput& in = c.steps[s];
    const auto rs = static_cast<int64_t>(in.request.size());
    const int64_t n = in.num_tokens();
    add(file, step_name(s, "request"), st::DType::i32, {rs}, in.request);
    add(file, step_name(s, "query_start_loc"), st::DType::i32, {rs + 1}, in.query_start_loc);
    add(file, step_name(s, "seq_lens"), st::DType::i32, {rs}, in.seq_lens);
    add(file, step_name(s, "query"), st::DType::bf16, {n, H, D}, in.query);
    add(file, step_name(s, "key"), st::DType::bf16, {n, G, D}, in.key);
    add(file, step_name(s, "value"), st::DType::bf16, {n, G, D}, in.value);
    if (csa) {
      add(file, step_name(s, "index_query"), st::DType::bf16, {n, G, I, Di}, in.index_query);
      add(file, step_name(s, "index_weight"), st::DType::f32, {n, G, I}, in.index_weight);
      add(file, step_name(s, "index_key"), st::DType::bf16, {n, Di}, in.index_key);
      add(file, step_name(s, "index_z"), st::DType::f32, {n}, in.index_z);
    }
    if (!in.gate.empty()) add(file, step_name(s, "gate"), st::DType::bf16, {n, H}, in.gate);
  }
  return file;
}

Case case_from(const st::File& file) {
  const std::string& path = file.what;
  if (const std::string* content = file.find_meta("content"); content && *content != "case") {
    fail_io(concat(path, ": metadata \"content\": expected absent or \"case\", got ",
                   json::quote(*content), " (is this a replay's --out file?)"));
  }
  Case c;
  c.config = case_detail::read_config(file);
  case_detail::reject_unknown_meta(file, c.config.kind, false);
  const bool csa = c.config.kind == LayerKind::csa;
  // request, query_start_loc, seq_lens, query, key, value (+ 4 CSA tensors).
  const size_t steps = case_detail::meta_steps(file, csa ? 10 : 6);
  const int64_t G = c.config.num_kv_heads, D = c.config.head_size, Di = c.config.index_dim;
  std::vector<std::string> names = {"context.lens", "context.key", "context.value"};
  c.context_lens = st::elements<int32_t>(file.require("context.lens", st::DType::i32, {-1}));
  for (size_t r = 0; r < c.context_lens.size(); ++r) {
    if (c.context_lens[r] < 0) {
      fail_io(concat(path, ": context.lens[", r, "]: expected >= 0, got ", c.context_lens[r]));
    }
  }
  const int64_t rows = c.context_rows();
  c.context_key =
      st::elements<uint16_t>(file.require("context.key", st::DType::bf16, {rows, G, D}));
  c.context_value =
      st::elements<uint16_t>(file.require("context.value", st::DType::bf16, {rows, G, D}));
  if (csa) {
    names.insert(names.end(), {"context.index_key", "context.index_z"});
    c.context_index_key =
        st::elements<uint16_t>(file.require("context.index_key", st::DType::bf16, {rows, Di}));
    c.context_index_z =
        st::elements<float>(file.require("context.index_z", st::DType::f32, {rows}));
  }
  c.steps.reserve(steps);
  for (size_t s = 0; s < steps; ++s) c.steps.push_back(read_step(file, c.config, s, names));
  case_detail::reject_unexpected(file, names);
  try {
    validate_case(c);
  } catch (const Error& e) {
    fail_io(concat(path, ": ", e.what()));
  }
  return c;
}

}  // namespace case_detail

void save_case(const std::string& path, const Case& c) {
  st::write_file(path, case_detail::case_file(c, path));
}

Case load_case(const std::string& path) {
  return case_detail::case_from(st::read_file(path));
}

}  // namespace step5
