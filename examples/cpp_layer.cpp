// One engine step through a CSA layer and an SWA layer on the cpu backend,
// using only the installed public headers: size and lay out the paged
// caches, describe the step, plan it once, run both layers' forwards.
//
// The step holds 41 rows of one request and a 20-token prefill chunk of
// another. With top-k above every row's closed
// regions and a window above every position, both layers reduce to dense
// causal attention, so they must agree: the program checks that and exits
// non-zero if they do not.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "step5/attention.h"
#include "step5/numerics.h"

namespace {

using step5::DType;
using step5::TensorView;

std::vector<uint16_t> random_bf16(std::mt19937& rng, size_t count) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> bits(count);
  for (uint16_t& b : bits) b = step5::float_to_bf16(normal(rng));
  return bits;
}

// One layer's engine-owned memory and the library's view of it.
struct Layer {
  step5::LayerConfig config;
  std::vector<unsigned char> blocks;  // engine-owned paged cache
  std::vector<unsigned char> rings;   // CSA: one ring entry per request
  step5::LayerCache cache;
};

Layer make_layer(const step5::LayerConfig& config, int64_t num_blocks, int64_t max_requests) {
  Layer layer;
  layer.config = config;
  step5::validate_config(config);  // throws step5::Error naming the bad field
  const auto block_bytes = static_cast<int64_t>(step5::cache_bytes_per_block(config));
  layer.blocks.assign(static_cast<size_t>(block_bytes * num_blocks), 0);
  layer.rings.assign(step5::ring_entry_bytes(config) * static_cast<size_t>(max_requests), 0);
  layer.cache = step5::packed_layer_cache(config, layer.blocks.data(), num_blocks, block_bytes,
                                          layer.rings.data(), max_requests, step5::Device::host);
  return layer;
}

}  // namespace

int main() {
  step5::LayerConfig csa;  // SPEC reference values, reduced to run in a blink
  csa.kind = step5::LayerKind::csa;
  csa.num_heads = 8;
  csa.num_kv_heads = 2;
  csa.head_size = 64;
  csa.block_size = 16;
  csa.index_heads = 2;
  csa.index_dim = 64;
  csa.topk = 16;  // above the 5 closed regions of a 41-token request
  step5::LayerConfig swa = csa;
  swa.kind = step5::LayerKind::swa;
  swa.window = 128;  // above every position

  // Two requests, rows flattened request by request: request 0 has its
  // 40-token prompt and its first decoded token in this step (an engine
  // would have prefilled the prompt in earlier steps), request 1 prefills
  // 20 tokens.
  const int32_t R = 2, max_blocks = 4;
  const std::vector<int32_t> query_start_loc = {0, 41, 61};
  const std::vector<int32_t> seq_lens = {41, 20};        // lengths after the step
  const std::vector<int32_t> block_table = {7, 2, 5, 0,  // request 0's blocks
                                            3, 6, 1, 4};
  const std::vector<int32_t> ring_index = {0, 1};
  const int64_t n = query_start_loc.back();
  std::vector<int64_t> slot_mapping;  // block * B + offset of every row
  for (int32_t r = 0; r < R; ++r) {
    for (int32_t p = 0; p < seq_lens[r]; ++p) {
      slot_mapping.push_back(int64_t{block_table[r * max_blocks + p / csa.block_size]} *
                                 csa.block_size +
                             p % csa.block_size);
    }
  }

  step5::StepDesc step;
  step.num_tokens = n;
  step.num_requests = R;
  step.query_start_loc =
      TensorView::contiguous(const_cast<int32_t*>(query_start_loc.data()), DType::i32, {R + 1});
  step.seq_lens = TensorView::contiguous(const_cast<int32_t*>(seq_lens.data()), DType::i32, {R});
  step.block_table =
      TensorView::contiguous(const_cast<int32_t*>(block_table.data()), DType::i32, {R, max_blocks});
  step.slot_mapping = TensorView::contiguous(slot_mapping.data(), DType::i64, {n});
  step.ring_index =
      TensorView::contiguous(const_cast<int32_t*>(ring_index.data()), DType::i32, {R});

  const int64_t num_blocks = 8;
  Layer csa_layer = make_layer(csa, num_blocks, R);
  Layer swa_layer = make_layer(swa, num_blocks, R);

  // Same inputs for both layers, so their outputs can be compared.
  std::mt19937 rng(5);
  const int64_t H = csa.num_heads, G = csa.num_kv_heads, D = csa.head_size;
  const int64_t I = csa.index_heads, Di = csa.index_dim;
  std::vector<uint16_t> query = random_bf16(rng, static_cast<size_t>(n * H * D));
  std::vector<uint16_t> key = random_bf16(rng, static_cast<size_t>(n * G * D));
  std::vector<uint16_t> value = random_bf16(rng, static_cast<size_t>(n * G * D));
  std::vector<uint16_t> index_query = random_bf16(rng, static_cast<size_t>(n * G * I * Di));
  std::vector<uint16_t> index_key = random_bf16(rng, static_cast<size_t>(n * Di));
  std::vector<float> index_weight(static_cast<size_t>(n * G * I), 0.5f);
  std::vector<float> index_z(static_cast<size_t>(n), 0.0f);

  step5::CsaInputs csa_in;
  csa_in.query = TensorView::contiguous(query.data(), DType::bf16, {n, H, D});
  csa_in.key = TensorView::contiguous(key.data(), DType::bf16, {n, G, D});
  csa_in.value = TensorView::contiguous(value.data(), DType::bf16, {n, G, D});
  csa_in.index_query = TensorView::contiguous(index_query.data(), DType::bf16, {n, G, I, Di});
  csa_in.index_weight = TensorView::contiguous(index_weight.data(), DType::f32, {n, G, I});
  csa_in.index_key = TensorView::contiguous(index_key.data(), DType::bf16, {n, Di});
  csa_in.index_z = TensorView::contiguous(index_z.data(), DType::f32, {n});
  const step5::SwaInputs swa_in{csa_in.query, csa_in.key, csa_in.value, {}};

  std::vector<uint16_t> csa_out(static_cast<size_t>(n * H * D));
  std::vector<uint16_t> swa_out(csa_out.size());
  step5::LayerOutputs csa_outputs, swa_outputs;
  csa_outputs.output = TensorView::contiguous(csa_out.data(), DType::bf16, {n, H, D});
  swa_outputs.output = TensorView::contiguous(swa_out.data(), DType::bf16, {n, H, D});

  step5::StepKind kind = step5::StepKind::empty;
  try {
    auto backend = step5::make_backend(step5::BackendKind::cpu);
    // Once per step: plan on the host, give it a workspace, prepare.
    const step5::StepPlan plan = backend->plan(step, {csa, swa});
    kind = plan.kind;
    std::vector<unsigned char> scratch(plan.workspace_bytes() + 256);
    auto* aligned =
        scratch.data() + (256 - reinterpret_cast<uintptr_t>(scratch.data()) % 256) % 256;
    const step5::Workspace workspace{aligned, plan.workspace_bytes()};
    backend->prepare_step(plan, workspace, nullptr);
    // Once per layer: the whole layer, no allocation, no host sync.
    backend->forward_csa(csa, step, plan, csa_in, csa_layer.cache, csa_outputs, workspace, nullptr);
    backend->forward_swa(swa, step, plan, swa_in, swa_layer.cache.kv, swa_outputs, workspace,
                         nullptr);
  } catch (const step5::Error& e) {
    std::fprintf(stderr, "step5 error (%s): %s\n", step5::error_code_name(e.code()), e.what());
    return 1;
  }

  double max_diff = 0.0, max_abs = 0.0;
  for (size_t i = 0; i < csa_out.size(); ++i) {
    const double a = step5::bf16_to_float(csa_out[i]), b = step5::bf16_to_float(swa_out[i]);
    max_diff = std::max(max_diff, std::fabs(a - b));
    max_abs = std::max(max_abs, std::fabs(a));
  }
  std::printf("step: %lld rows of %d requests, plan %s\n", static_cast<long long>(n), R,
              step5::step_kind_name(kind));
  std::printf("csa vs swa (both dense causal here): max |difference| %.3g, max |output| %.3g\n",
              max_diff, max_abs);
  const bool ok = std::isfinite(max_abs) && max_abs > 0.0 && max_diff <= 2e-2;
  std::printf("%s\n", ok ? "ok" : "FAILED: the layers disagree");
  return ok ? 0 : 1;
}
