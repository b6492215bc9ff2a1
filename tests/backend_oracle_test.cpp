// The CPU backend against the oracle: serving scenarios (chunked prefill,
// mixed steps, decode, MTP verify with rejected drafts) over a covering set
// of layer shapes, and long histories with more closed regions than K.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "test_util.h"

namespace step5 {
namespace {

struct Case {
  const char* name;
  LayerConfig config;
  sim::ScenarioOptions scenario;
  int64_t padding_rows = 0;
};

sim::ScenarioOptions scenario(int requests, int min_prompt, int max_prompt, int chunk, int decode,
                              bool gate, uint64_t seed) {
  sim::ScenarioOptions o;
  o.requests = requests;
  o.min_prompt = min_prompt;
  o.max_prompt = max_prompt;
  o.chunk = chunk;
  o.decode_steps = decode;
  o.gate = gate;
  o.seed = seed;
  return o;
}

// G in {1, 2, 8} and H/G in {1, 8, 16} over block sizes 8..256, both KV and
// summary dtypes, MTP 0 and 3, gate on and off. Prompts run past 8K tokens
// (C > K) for most cases; the K=64 case stays below it.
std::vector<Case> csa_cases() {
  using test::csa_config;
  const DType bf16 = DType::bf16, fp8 = DType::fp8_e4m3;
  return {
      {"g1_hg16_d192_b64", csa_config({16, 1, 192, 64}, 8, 0, bf16, fp8),
       scenario(3, 60, 300, 128, 4, true, 11)},
      {"g2_hg8_b8_fp8kv_mtp3", csa_config({16, 2, 64, 8}, 4, 3, fp8, DType::bf16),
       scenario(3, 40, 250, 96, 6, false, 12)},
      {"g8_hg1_b256_mtp3", csa_config({8, 8, 64, 256}, 16, 3, bf16, fp8),
       scenario(2, 150, 400, 160, 5, true, 13)},
      {"g1_hg1_d192_b32_fp8kv", csa_config({1, 1, 192, 32}, 6, 0, fp8, fp8),
       scenario(3, 30, 280, 64, 5, true, 14)},
      {"g2_hg1_b128_bf16sum_pad", csa_config({2, 2, 128, 128}, 12, 3, bf16, DType::bf16),
       scenario(3, 20, 260, 100, 4, true, 15), 3},
      {"g8_hg8_below_topk", csa_config({64, 8, 64, 16}, 64, 0, fp8, fp8),
       scenario(2, 20, 200, 80, 3, false, 16)},
  };
}

std::vector<Case> swa_cases() {
  using test::swa_config;
  return {
      {"g2_hg8_d192_w100", swa_config({16, 2, 192, 64}, 100),
       scenario(3, 50, 260, 128, 4, true, 21)},
      {"g8_hg1_w_beyond_history_mtp3", swa_config({8, 8, 64, 16}, 1000, 3, DType::fp8_e4m3),
       scenario(2, 30, 200, 90, 5, false, 22)},
      {"g1_hg16_w1_b256", swa_config({16, 1, 64, 256}, 1), scenario(2, 10, 120, 64, 3, true, 23),
       2},
      {"g1_hg8_w37_b8_fp8_mtp3", swa_config({8, 1, 64, 8}, 37, 3, DType::fp8_e4m3),
       scenario(3, 10, 150, 70, 5, true, 24)},
  };
}

// Names the case instead of dumping its bytes when a test fails.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << " (" << describe(c.config) << ")";
}

class CsaVsOracle : public ::testing::TestWithParam<Case> {};
class SwaVsOracle : public ::testing::TestWithParam<Case> {};

TEST_P(CsaVsOracle, Scenario) {
  auto backend = test::cpu_backend();
  const Case& c = GetParam();
  EXPECT_GT(test::run_scenario(*backend, c.config, c.scenario, c.padding_rows), 3);
}

TEST_P(SwaVsOracle, Scenario) {
  auto backend = test::cpu_backend();
  const Case& c = GetParam();
  EXPECT_GT(test::run_scenario(*backend, c.config, c.scenario, c.padding_rows), 3);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CsaVsOracle, ::testing::ValuesIn(csa_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Shapes, SwaVsOracle, ::testing::ValuesIn(swa_cases()), case_name);

// Histories written ahead (as an engine's earlier prefill would), then one
// mixed step: a prompt chunk of an empty request, decode of a request with
// a long history, a verify of another, and a request whose history ends
// mid-region; the steps after rewrite rejected drafts.
TEST(CsaVsOracleHistory, LongHistoryMixedAndVerify) {
  auto backend = test::cpu_backend();
  const LayerConfig config = test::csa_config({16, 2, 192, 64}, 8, 3);
  sim::SessionOptions options;
  options.max_requests = 4;
  options.max_context = 1200;
  options.padding_rows = 4;
  sim::LayerSession session(*backend, config, options);
  std::mt19937_64 rng(31);
  test::random_history(session, 0, 1000, rng);
  test::random_history(session, 1, 523, rng);
  test::random_history(session, 3, 77, rng);
  sim::StepInput step =
      sim::random_step(config, rng, {2, 0, 1, 3}, {0, 1000, 523, 77}, {45, 1, 4, 13}, true, true);
  sim::StepOutput out = test::run_checked(session, step, "mixed");
  EXPECT_EQ(out.kind, StepKind::mixed);
  // Verify of 0, 1, 3 with 1, 0 and 3 drafts accepted: starts move to
  // start + 1 + accepted and rejected positions are rewritten.
  step = sim::random_step(config, rng, {0, 1, 3}, {1001, 527, 90}, {4, 4, 4}, false, true);
  out = test::run_checked(session, step, "verify 1");
  EXPECT_EQ(out.kind, StepKind::uniform);
  step = sim::random_step(config, rng, {1, 3, 0}, {529, 91, 1005}, {4, 4, 4}, true, true);
  out = test::run_checked(session, step, "verify 2");
  EXPECT_EQ(out.kind, StepKind::uniform);
  step = sim::random_step(config, rng, {3}, {92}, {1}, true, false);
  test::run_checked(session, step, "decode");
}

TEST(SwaVsOracleHistory, WindowSmallerAndLargerThanHistory) {
  auto backend = test::cpu_backend();
  for (int window : {64, 700}) {
    const LayerConfig config = test::swa_config({16, 2, 192, 32}, window, 0, DType::fp8_e4m3);
    sim::SessionOptions options;
    options.max_requests = 3;
    options.max_context = 700;
    sim::LayerSession session(*backend, config, options);
    std::mt19937_64 rng(32 + static_cast<uint64_t>(window));
    test::random_history(session, 0, 600, rng);
    test::random_history(session, 2, 31, rng);
    const sim::StepInput step =
        sim::random_step(config, rng, {0, 1, 2}, {600, 0, 31}, {1, 50, 2}, true);
    test::run_checked(session, step, "window " + std::to_string(window));
  }
}

}  // namespace
}  // namespace step5
