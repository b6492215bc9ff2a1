// libFuzzer target: a step5-case/1 file image through everything that reads
// it. Properties checked on every input:
// - parsing fails only with step5::Error, never a crash, a sanitizer report
//   or another exception (std::bad_alloc included: sizes are bounded first);
// - a container that parses serializes and parses back to the same tensors
//   and metadata;
// - a case that loads is written back (case writer) and loads again to the
//   same bytes;
// - a case that loads and is small enough replays on the cpu backend with
//   the oracle check, without any error, and its outputs file reads back as
//   written.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "step5/attention.h"
#include "step5/testing/case_file.h"
#include "step5/testing/case_safetensors.h"
#include "step5/testing/safetensors.h"

namespace {

namespace st = step5::safetensors;

// Replays cost O(rows x context x width); this bound keeps one input under
// a few milliseconds.
constexpr double kMaxReplayWork = 4e6;
constexpr int64_t kMaxReplayBytes = int64_t{32} << 20;

bool same(const st::File& a, const st::File& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (auto i = a.tensors.begin(), j = b.tensors.begin(); i != a.tensors.end(); ++i, ++j) {
    if (i->first != j->first || i->second.dtype != j->second.dtype ||
        i->second.shape != j->second.shape || i->second.data != j->second.data) {
      return false;
    }
  }
  return true;
}

double replay_work(const step5::Case& c) {
  const step5::LayerConfig& cfg = c.config;
  const double width = double{1} * cfg.num_heads * cfg.head_size +
                       (cfg.kind == step5::LayerKind::csa
                            ? double{1} * cfg.num_kv_heads * cfg.index_heads * cfg.index_dim
                            : 0.0);
  double work = static_cast<double>(c.context_rows()) * cfg.num_kv_heads * cfg.head_size;
  for (const auto& in : c.steps) {
    int32_t longest = 0;
    for (int32_t len : in.seq_lens) longest = std::max(longest, len);
    work += static_cast<double>(in.num_tokens()) * (longest + 1) * width;
  }
  return work;
}

step5::Backend& cpu() {
  static const auto backend = [] {
    step5::BackendOptions options;
    options.num_threads = 1;
    return step5::make_backend(step5::BackendKind::cpu, options);
  }();
  return *backend;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  st::File file;
  try {
    file = st::parse(data, size, "fuzz");
  } catch (const step5::Error&) {
    return 0;
  }
  // Anything parse accepts, serialize writes and parse reads back.
  if (!same(file, st::parse(st::serialize(file), "reserialized"))) __builtin_trap();

  step5::Case c;
  try {
    c = step5::case_detail::case_from(file);
  } catch (const step5::Error&) {
    return 0;
  }
  const std::vector<uint8_t> written = st::serialize(step5::case_detail::case_file(c, "written"));
  const step5::Case back = step5::case_detail::case_from(st::parse(written, "written"));
  if (st::serialize(step5::case_detail::case_file(back, "again")) != written) __builtin_trap();

  if (replay_work(c) > kMaxReplayWork) return 0;
  step5::ReplayOptions options;
  options.check = true;
  options.max_memory_bytes = kMaxReplayBytes;
  if (step5::replay_memory_bytes(c, true) > kMaxReplayBytes) return 0;
  const step5::CaseOutputs out = step5::replay_case(cpu(), c, options);
  if (out.steps.size() != c.steps.size() || out.checks.size() != c.steps.size()) __builtin_trap();
  // The outputs file reads back as written.
  const st::File outputs = step5::case_detail::outputs_file(c, out, "outputs");
  const step5::CaseOutputs read =
      step5::case_detail::outputs_from(st::parse(st::serialize(outputs), "outputs"), c);
  if (!same(step5::case_detail::outputs_file(c, read, "again"), outputs)) __builtin_trap();
  return 0;
}
