// Shared helpers of the test suite: small layer configs, a CPU backend, and
// a driver that runs steps through a LayerSession and checks each against
// the oracle.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "step5/attention.h"
#include "step5/numerics.h"
#include "step5/testing/sim.h"
#include "step5/testing/step_buffers.h"

// `error` (a step5::Error) has `error_code` and its message mentions `text`.
#define EXPECT_ERROR(error, error_code, text)                                   \
  do {                                                                          \
    const ::step5::Error& e_ = (error);                                         \
    EXPECT_EQ(e_.code(), (error_code)) << e_.what();                            \
    EXPECT_NE(std::string(e_.what()).find(text), std::string::npos)             \
        << "message '" << e_.what() << "' does not mention '" << (text) << "'"; \
  } while (0)

// Skips the test visibly where no GPU is usable (CI).
#define STEP5_REQUIRE_GPU()                                                 \
  do {                                                                      \
    std::string why_;                                                       \
    if (!::step5::test::gpu_present(why_))                                  \
      GTEST_SKIP() << "no usable GPU: CUDA tests skipped (" << why_ << ")"; \
  } while (0)

namespace step5::test {

// A random step within `limits`, its arrays on the host as a plan reads
// them: up to max_requests requests (trailing ones possibly empty), up to
// max_tokens rows, lengths up to max_context.
inline sim::StepBuffers random_step(const StepLimits& limits, int block_size,
                                    std::mt19937_64& rng) {
  sim::StepHost h;
  h.max_blocks = static_cast<int32_t>((limits.max_context + block_size - 1) / block_size);
  h.query_start_loc.push_back(0);
  const int32_t R = std::uniform_int_distribution<int32_t>(1, limits.max_requests)(rng);
  const bool decode = std::uniform_int_distribution<int>(0, 2)(rng) == 0;
  int64_t budget = limits.max_tokens;
  for (int32_t r = 0; r < R; ++r) {
    const int64_t most = std::min<int64_t>(budget, limits.max_context);
    int32_t q = decode ? (budget > 0 ? 1 : 0)
                       : std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(most))(rng);
    budget -= q;
    const int32_t len =
        std::uniform_int_distribution<int32_t>(q, static_cast<int32_t>(limits.max_context))(rng);
    h.query_start_loc.push_back(h.query_start_loc.back() + q);
    h.seq_lens.push_back(len);
    h.ring_index.push_back(r);
    for (int32_t j = 0; j < h.max_blocks; ++j) h.block_table.push_back(r * h.max_blocks + j);
    for (int32_t p = len - q; p < len; ++p) {
      h.slot_mapping.push_back(int64_t{r * h.max_blocks + p / block_size} * block_size +
                               p % block_size);
    }
  }
  const int64_t n = h.query_start_loc.back();
  sim::StepBuffers s(Device::host, std::move(h), n);
  // Some steps are planned from upper bounds of their lengths.
  s.desc.seq_lens_upper_bound = std::uniform_int_distribution<int>(0, 3)(rng) == 0;
  return s;
}

// Whether the cuda backend can be made here, through the public factory:
// it refuses with a message saying what is missing (no cuda backend in this
// build, no driver, no GPU, one older than compute capability 8.0), which
// goes to `why`.
inline bool gpu_present(std::string& why) {
  try {
    make_backend(BackendKind::cuda);
    return true;
  } catch (const Error& e) {
    why = e.what();
    return false;
  }
}

// Two worker threads: the CI machine has two cores, and more than one
// thread exercises the backend's row partitioning.
inline std::unique_ptr<Backend> cpu_backend() {
  BackendOptions options;
  options.num_threads = 2;
  return make_backend(BackendKind::cpu, options);
}

struct Shape {
  int heads = 16;
  int kv_heads = 2;
  int head_size = 64;
  int block_size = 64;
};

// A CSA layer small enough for the fp64 oracle: few index heads, a short
// index dim and a small top-k, so contexts of a few hundred tokens already
// have more closed regions than K.
inline LayerConfig csa_config(const Shape& s, int topk = 8, int spec_tokens = 0,
                              DType kv = DType::bf16, DType summary = DType::fp8_e4m3) {
  LayerConfig c;
  c.kind = LayerKind::csa;
  c.num_heads = s.heads;
  c.num_kv_heads = s.kv_heads;
  c.head_size = s.head_size;
  c.block_size = s.block_size;
  c.kv_dtype = kv;
  if (kv == DType::fp8_e4m3) {
    // Scales away from 1 so a backend that ignores one of them fails.
    c.k_scale = 0.5f;
    c.v_scale = 1.5f;
  }
  c.spec_tokens = spec_tokens;
  c.index_heads = 2;
  c.index_dim = 32;
  c.topk = topk;
  c.summary_dtype = summary;
  return c;
}

inline LayerConfig swa_config(const Shape& s, int window, int spec_tokens = 0,
                              DType kv = DType::bf16) {
  LayerConfig c = csa_config(s, 8, spec_tokens, kv);
  c.kind = LayerKind::swa;
  c.window = window;
  return c;
}

inline std::vector<uint16_t> random_bf16(std::mt19937_64& rng, size_t count) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> out(count);
  for (auto& x : out) x = float_to_bf16(normal(rng));
  return out;
}

// Writes `length` random history tokens of `request` through the backend.
inline void random_history(sim::LayerSession& session, int32_t request, int64_t length,
                           std::mt19937_64& rng) {
  const LayerConfig& c = session.config();
  const auto rows = static_cast<size_t>(length);
  const auto kv = rows * static_cast<size_t>(c.num_kv_heads * c.head_size);
  const std::vector<uint16_t> key = random_bf16(rng, kv), value = random_bf16(rng, kv);
  const std::vector<uint16_t> index_key = random_bf16(rng, rows * static_cast<size_t>(c.index_dim));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> z(rows);
  for (auto& x : z) x = normal(rng);
  session.write_history(request, length, key.data(), value.data(), index_key.data(), z.data());
}

// Runs one step and checks it against the oracle (summaries exactly: the
// CPU backend computes the SPEC's fp32 formula in the same order).
inline sim::StepOutput run_checked(sim::LayerSession& session, const sim::StepInput& input,
                                   const std::string& label) {
  sim::StepOutput out = session.run(input);
  const sim::CheckResult check =
      sim::check_step(session, input, out, sim::default_tolerance(session.config()), true);
  EXPECT_TRUE(check.ok) << label << ": " << check.message << " [" << describe(session.config())
                        << "]";
  // The CPU backend is the exact reference of SPEC 4; its fp32 scores can
  // only reorder true near-ties, which these fixed seeds do not produce, so
  // any difference from the oracle's selection is a tie-break or top-k bug.
  EXPECT_EQ(check.selection_differs, 0) << label << " [" << describe(session.config()) << "]";
  return out;
}

// Every step of a scenario, checked; returns how many steps ran.
inline int run_scenario(Backend& backend, const LayerConfig& config,
                        const sim::ScenarioOptions& options, int64_t padding_rows = 0) {
  sim::Scenario scenario(config, options);
  sim::SessionOptions session_options;
  session_options.max_requests = options.requests;
  session_options.max_context = scenario.max_context();
  session_options.seed = options.seed + 100;
  session_options.padding_rows = padding_rows;
  sim::LayerSession session(backend, config, session_options);
  int steps = 0;
  while (!scenario.done() && !::testing::Test::HasFailure()) {
    const sim::ScenarioStep step = scenario.next();
    const sim::StepOutput out =
        run_checked(session, step.input, step.label + " step " + std::to_string(steps));
    EXPECT_TRUE(out.padding_zero) << "step " << steps;
    ++steps;
  }
  return steps;
}

}  // namespace step5::test
