// What an engine needs beyond plan + forward (issue 7): lengths known only
// on the device, CUDA-graph padding by whole requests, the forward flags,
// ring entries reused by new requests and the multi-layer BLNHC cache. Each
// runs steps through the cpu backend and checks them against the oracle.
#include <gtest/gtest.h>

#include "step5/testing/multi_layer.h"
#include "test_util.h"

namespace step5 {
namespace {

struct EngineCase {
  const char* name;
  LayerConfig config;
  sim::SessionOptions session;
};

sim::SessionOptions engine_options(int32_t slack, int32_t padding_requests, ForwardFlags flags) {
  sim::SessionOptions o;
  o.seq_lens_slack = slack;
  o.padding_requests = padding_requests;
  o.flags = flags;
  o.padding_rows = 3;
  return o;
}

std::vector<EngineCase> engine_cases() {
  const test::Shape s;
  const LayerConfig csa = test::csa_config(s, 4, 0);
  const LayerConfig csa_mtp = test::csa_config(s, 4, 3, DType::fp8_e4m3, DType::bf16);
  const LayerConfig swa_mtp = test::swa_config(s, 40, 2);
  const ForwardFlags none = ForwardFlags::none;
  const ForwardFlags all = ForwardFlags::skip_kv_write | ForwardFlags::skip_summary_update |
                           ForwardFlags::skip_padding_zero;
  return {
      {"csa upper-bound seq_lens", csa, engine_options(5, 0, none)},
      {"csa mtp upper-bound seq_lens", csa_mtp, engine_options(3, 0, none)},
      {"swa mtp upper-bound seq_lens", swa_mtp, engine_options(9, 0, none)},
      {"csa padding requests", csa, engine_options(0, 2, none)},
      {"csa mtp padding requests + bounds", csa_mtp, engine_options(3, 1, none)},
      {"swa padding requests", swa_mtp, engine_options(0, 3, none)},
      {"csa skip_kv_write", csa_mtp, engine_options(0, 0, ForwardFlags::skip_kv_write)},
      {"csa skip_summary_update", csa_mtp, engine_options(0, 0, ForwardFlags::skip_summary_update)},
      {"csa skip_padding_zero", csa, engine_options(0, 2, ForwardFlags::skip_padding_zero)},
      {"csa all flags", csa_mtp, engine_options(2, 1, all)},
      {"swa all flags", swa_mtp, engine_options(0, 1, all)},
  };
}

class EngineBehaviour : public ::testing::TestWithParam<EngineCase> {};

// A serving scenario (chunked prefill, mixed, decode or verify with
// rejected drafts) under the engine behaviour, every step against the
// oracle; padding rows as the flags say (zero, or still NaN).
TEST_P(EngineBehaviour, MatchesOracle) {
  const EngineCase& c = GetParam();
  auto backend = test::cpu_backend();
  sim::ScenarioOptions o;
  o.requests = 3;
  o.min_prompt = 60;
  o.max_prompt = 150;
  o.chunk = 64;
  sim::Scenario scenario(c.config, o);
  sim::SessionOptions so = c.session;
  so.max_requests = o.requests;
  so.max_context = scenario.max_context() + 16;
  sim::LayerSession session(*backend, c.config, so);
  int uniform = 0, steps = 0;
  while (!scenario.done() && !::testing::Test::HasFailure()) {
    const sim::ScenarioStep step = scenario.next();
    const sim::StepOutput out = test::run_checked(session, step.input, step.label);
    EXPECT_TRUE(out.padding_zero) << c.name << " step " << steps << ": padding rows";
    uniform += out.kind == StepKind::uniform ? 1 : 0;
    ++steps;
  }
  EXPECT_GT(steps, 4);
  // Padding requests keep decode and verify steps uniform (graph-capturable).
  EXPECT_GT(uniform, 0) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Cpu, EngineBehaviour, ::testing::ValuesIn(engine_cases()),
                         [](const ::testing::TestParamInfo<EngineCase>& param) {
                           std::string name = param.param.name;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

// A ring entry handed to a new request (the engine's persistent-batch slot
// reused) needs no clearing when the new request starts at position 0: the
// old request's open-region rows are never read.
TEST(RingEntry, ReusedSlotNeedsNoClearing) {
  auto backend = test::cpu_backend();
  const LayerConfig c = test::csa_config(test::Shape{}, 4, 2);
  sim::SessionOptions so;
  so.max_requests = 2;
  so.max_context = 256;
  sim::LayerSession session(*backend, c, so);
  std::mt19937_64 rng(21);
  // The slot's first owner leaves 5 rows of an open region in the ring.
  test::random_history(session, 0, 45, rng);
  test::random_history(session, 1, 30, rng);
  session.run(sim::random_step(c, rng, {0}, {45}, {2}, true));
  // A new request in slot 0: a prefill from 0 that closes regions from the
  // ring's stale slots' positions, then verify steps.
  std::vector<int32_t> start{0, 30};
  test::run_checked(session, sim::random_step(c, rng, {0, 1}, start, {21, 3}, true), "reuse");
  start = {21, 33};
  for (int i = 0; i < 4; ++i) {
    test::run_checked(session, sim::random_step(c, rng, {0, 1}, start, {3, 3}, true),
                      "verify " + std::to_string(i));
    start[0] += 2;  // one draft rejected, rewritten next step
    start[1] += 3;
  }
}

// The seed's BLNHC cache: a CSA and an SWA layer whose blocks interleave in
// one buffer give exactly what separate per-layer caches give; the
// per-layer caches are checked against the oracle by the other suites.
TEST(InterleavedCache, TwoLayersMatchSeparateCaches) {
  auto backend = test::cpu_backend();
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    const std::vector<LayerConfig> layers = sim::two_layer_model(16, kv);
    const InterleavedBlocks blocks = interleaved_blocks(layers);
    ASSERT_EQ(blocks.layer_offset.size(), 2u);
    EXPECT_EQ(blocks.layer_offset[1], static_cast<int64_t>(cache_bytes_per_block(layers[0])));
    EXPECT_GT(blocks.block_stride, static_cast<int64_t>(cache_bytes_per_block(layers[1])));
    sim::MultiLayerOptions o;
    o.interleaved = true;
    const auto interleaved = sim::run_layers(*backend, layers, o);
    o.interleaved = false;
    const auto separate = sim::run_layers(*backend, layers, o);
    ASSERT_EQ(interleaved.size(), separate.size());
    for (size_t i = 0; i < interleaved.size(); ++i) {
      EXPECT_EQ(interleaved[i], separate[i]) << "step " << i / 2 << " layer " << i % 2;
      // No NaN (an unwritten row) anywhere, padding rows included.
      for (uint16_t bits : interleaved[i]) ASSERT_NE(bits & 0x7fffu, 0x7fffu) << "output " << i;
    }
  }
}

}  // namespace
}  // namespace step5
