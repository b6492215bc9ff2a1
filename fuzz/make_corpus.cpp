// Writes the tiny valid step5-case/1 files of fuzz/corpus/case/ (seeds for
// fuzz_case): CSA and SWA, bf16 and fp8, with and without gate and MTP
// drafts, an empty case, and a case whose steps rewrite drafts.
//
// usage: fuzz_make_corpus DIR
#include <cstdio>
#include <random>
#include <string>

#include "step5/numerics.h"
#include "step5/testing/case_file.h"

namespace {

using step5::Case;
using step5::DType;
using step5::LayerConfig;
using step5::LayerKind;

LayerConfig tiny(LayerKind kind, DType kv, DType summary, int spec_tokens) {
  LayerConfig c;
  c.kind = kind;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_size = 8;
  c.block_size = 8;
  c.kv_dtype = kv;
  if (kv == DType::fp8_e4m3) {
    c.k_scale = 0.5f;
    c.v_scale = 2.0f;
  }
  c.spec_tokens = spec_tokens;
  c.index_heads = 1;
  c.index_dim = summary == DType::fp8_e4m3 ? 16 : 8;
  c.topk = 2;
  c.summary_dtype = summary;
  c.window = 6;
  return c;
}

Case make(const LayerConfig& config, std::vector<int32_t> history, uint64_t seed, bool gate) {
  std::mt19937_64 rng(seed);
  Case c;
  c.config = config;
  c.context_lens = history;
  const auto rows = static_cast<size_t>(c.context_rows());
  const size_t kv = rows * static_cast<size_t>(config.num_kv_heads * config.head_size);
  std::uniform_int_distribution<int> pick(-8, 8);
  auto bf16 = [&](size_t count) {
    std::vector<uint16_t> v(count);
    for (auto& x : v) x = step5::float_to_bf16(static_cast<float>(pick(rng)) / 4.0f);
    return v;
  };
  c.context_key = bf16(kv);
  c.context_value = bf16(kv);
  if (config.kind == LayerKind::csa) {
    c.context_index_key = bf16(rows * static_cast<size_t>(config.index_dim));
    for (size_t i = 0; i < rows; ++i) c.context_index_z.push_back(static_cast<float>(i % 3));
  }
  const int32_t q = config.spec_tokens + 1;
  std::vector<int32_t> requests, starts, lens;
  for (size_t r = 0; r < history.size(); ++r) {
    requests.push_back(static_cast<int32_t>(r));
    starts.push_back(history[r]);
    lens.push_back(q);
  }
  if (!requests.empty()) {
    c.steps.push_back(step5::sim::random_step(config, rng, requests, starts, lens, gate));
    // The next step rewrites the last draft of request 0 beside a prefill.
    for (size_t r = 0; r < history.size(); ++r) starts[r] = history[r] + q - (r == 0 ? 1 : 0);
    lens[0] = 3;
    c.steps.push_back(step5::sim::random_step(config, rng, requests, starts, lens, gate));
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_corpus DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  const DType bf16 = DType::bf16, fp8 = DType::fp8_e4m3;
  step5::save_case(dir + "/csa_bf16.safetensors",
                   make(tiny(LayerKind::csa, bf16, fp8, 0), {20, 3}, 1, true));
  step5::save_case(dir + "/csa_fp8_mtp.safetensors",
                   make(tiny(LayerKind::csa, fp8, bf16, 2), {9, 0}, 2, false));
  step5::save_case(dir + "/swa_bf16.safetensors",
                   make(tiny(LayerKind::swa, bf16, fp8, 0), {7}, 3, true));
  step5::save_case(dir + "/swa_fp8_mtp.safetensors",
                   make(tiny(LayerKind::swa, fp8, fp8, 1), {12, 5, 0}, 4, false));
  step5::save_case(dir + "/csa_empty.safetensors",
                   make(tiny(LayerKind::csa, bf16, fp8, 0), {}, 5, false));
  return 0;
}
