// What a replay produced, as SPEC 10 output tensors. The file carries the
// case's configuration and `content` = `outputs`, so a reader can tell it
// from a case and check it against the case it claims to belong to.
#include "case/case_internal.h"
#include "case/json.h"
#include "case/safetensors.h"
#include "core/check.h"
#include "step5/testing/case_file.h"

namespace step5 {

using case_detail::step_name;
using detail::concat;
namespace st = safetensors;

namespace {

constexpr const char* kOutputsContent = "outputs";

}  // namespace

namespace case_detail {

st::File outputs_file(const Case& c, const CaseOutputs& outputs, const std::string& what) {
  const LayerConfig& cfg = c.config;
  detail::require(outputs.steps.size() == c.steps.size(), ErrorCode::invalid_argument,
                  "save_case_outputs: expected ", c.steps.size(), " step outputs, got ",
                  outputs.steps.size());
  const int64_t H = cfg.num_heads, G = cfg.num_kv_heads, D = cfg.head_size;
  st::File file;
  file.what = what;
  case_detail::write_config(cfg, file.metadata);
  file.metadata["content"] = kOutputsContent;
  file.metadata["steps"] = std::to_string(c.steps.size());
  for (size_t s = 0; s < c.steps.size(); ++s) {
    const sim::StepOutput& out = outputs.steps[s];
    const int64_t n = c.steps[s].num_tokens();
    const auto rs = static_cast<int64_t>(c.steps[s].request.size());
    // The session may return padding rows past n (CUDA-graph padding); the
    // file holds the step's real rows only.
    detail::require(static_cast<int64_t>(out.output.size()) >= n * H * D,
                    ErrorCode::invalid_argument, step_name(s, "output"),
                    ": expected >= ", n * H * D, " elements, got ", out.output.size());
    file.add(step_name(s, "output"), st::DType::bf16, {n, H, D}, out.output.data(),
             static_cast<size_t>(n * H * D));
    if (cfg.kind != LayerKind::csa) continue;
    file.add(step_name(s, "selected"), st::DType::i32, {n, G, cfg.topk}, out.selected.data(),
             out.selected.size());
    file.add(step_name(s, "closed"), st::DType::i32, {rs}, out.closed.data(), out.closed.size());
    file.add(step_name(s, "summary"), st::DType::f32, {rs, out.max_closed, cfg.index_dim},
             out.summary.data(), out.summary.size());
  }
  return file;
}

CaseOutputs outputs_from(const st::File& file, const Case& c) {
  const std::string& path = file.what;
  const std::string& content = file.require_meta("content");
  if (content != kOutputsContent) {
    detail::fail(ErrorCode::io_error, concat(path, ": metadata \"content\": expected \"",
                                             kOutputsContent, "\", got ", json::quote(content)));
  }
  const LayerConfig cfg = case_detail::read_config(file);
  std::map<std::string, std::string> theirs, ours;
  case_detail::write_config(cfg, theirs);
  case_detail::write_config(c.config, ours);
  if (theirs != ours) {
    detail::fail(ErrorCode::io_error, concat(path, ": layer expected ", describe(c.config),
                                             " (the case's), got ", describe(cfg)));
  }
  case_detail::reject_unknown_meta(file, cfg.kind, true);
  // output (+ selected, closed, summary for CSA).
  const size_t steps = case_detail::meta_steps(file, cfg.kind == LayerKind::csa ? 4 : 1);
  if (steps != c.steps.size()) {
    detail::fail(ErrorCode::io_error, concat(path, ": metadata \"steps\": expected ",
                                             c.steps.size(), " (the case's), got ", steps));
  }
  const int64_t H = cfg.num_heads, G = cfg.num_kv_heads, D = cfg.head_size;
  std::vector<std::string> names;
  CaseOutputs outputs;
  for (size_t s = 0; s < steps; ++s) {
    const int64_t n = c.steps[s].num_tokens();
    const auto rs = static_cast<int64_t>(c.steps[s].request.size());
    auto get = [&](const char* field, st::DType dtype, std::vector<int64_t> shape) {
      names.push_back(step_name(s, field));
      return &file.require(names.back(), dtype, shape);
    };
    sim::StepOutput out;
    out.output = st::elements<uint16_t>(*get("output", st::DType::bf16, {n, H, D}));
    if (cfg.kind == LayerKind::csa) {
      out.selected = st::elements<int32_t>(*get("selected", st::DType::i32, {n, G, cfg.topk}));
      out.closed = st::elements<int32_t>(*get("closed", st::DType::i32, {rs}));
      const st::Tensor* summary = get("summary", st::DType::f32, {rs, -1, cfg.index_dim});
      out.max_closed = static_cast<int32_t>(summary->shape[1]);
      out.summary = st::elements<float>(*summary);
    }
    outputs.steps.push_back(std::move(out));
  }
  case_detail::reject_unexpected(file, names);
  return outputs;
}

}  // namespace case_detail

void save_case_outputs(const std::string& path, const Case& c, const CaseOutputs& outputs) {
  st::write_file(path, case_detail::outputs_file(c, outputs, path));
}

CaseOutputs load_case_outputs(const std::string& path, const Case& c) {
  return case_detail::outputs_from(st::read_file(path), c);
}

}  // namespace step5
