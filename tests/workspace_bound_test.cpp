// Backend::workspace_bytes(layers, limits): one allocation before the first
// step must serve every plan within the limits. Random steps (mixed,
// uniform, padding requests, upper-bound lengths, chunked scoring, graph
// capacities) are planned and each must fit; the bound must also be close
// to what the largest step needs, and bad limits are errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "test_util.h"

namespace step5 {
namespace {

TEST(WorkspaceBound, EveryPlanWithinTheLimitsFits) {
  auto backend = test::cpu_backend();
  const test::Shape wide{16, 4, 64, 16};
  const std::vector<LayerConfig> layers{test::csa_config(wide, 8, 3),
                                        test::swa_config({8, 1, 128, 16}, 64, 3)};
  const StepLimits limits{300, 6, 700};
  std::mt19937_64 rng(99);
  for (size_t max_score_bytes : {size_t{256} << 20, size_t{3000}, size_t{100}}) {
    PlanOptions options;
    options.max_score_bytes = max_score_bytes;
    const size_t bound = backend->workspace_bytes(layers, limits, options);
    size_t most = 0;
    for (int i = 0; i < 300; ++i) {
      const sim::StepBuffers s = test::random_step(limits, 16, rng);
      PlanOptions o = options;
      o.max_context = std::uniform_int_distribution<int>(0, 1)(rng) ? limits.max_context : 0;
      const StepPlan plan = backend->plan(s.desc, layers, o);
      ASSERT_LE(plan.workspace_bytes(), bound)
          << "step " << i << ": n=" << plan.num_tokens << " R=" << plan.num_requests
          << " kind=" << step_kind_name(plan.kind) << " max_score_bytes=" << max_score_bytes;
      most = std::max(most, plan.workspace_bytes());
    }
    EXPECT_GT(most, 0u);
  }

  // The largest step (every row at the longest context) needs most of it.
  PlanOptions options;
  options.max_context = limits.max_context;
  sim::StepHost h;
  h.query_start_loc = {0, 300};
  h.seq_lens = {700};
  h.max_blocks = 44;
  for (int32_t j = 0; j < 44; ++j) h.block_table.push_back(j);
  for (int32_t p = 400; p < 700; ++p) h.slot_mapping.push_back(p);
  h.ring_index = {0};
  const sim::StepBuffers s(Device::host, std::move(h), 300);
  const StepPlan largest = backend->plan(s.desc, layers, options);
  const size_t bound = backend->workspace_bytes(layers, limits, options);
  EXPECT_LE(largest.workspace_bytes(), bound);
  EXPECT_GE(largest.workspace_bytes() * 10, bound * 9) << "the bound is far above the need";
}

TEST(WorkspaceBound, BadLimitsAreErrors) {
  auto backend = test::cpu_backend();
  const std::vector<LayerConfig> layers{test::csa_config(test::Shape{}, 8)};
  PlanOptions options;
  options.max_context = 2000;
  try {
    backend->workspace_bytes(layers, {10, 2, 1000}, options);
    ADD_FAILURE() << "expected an error for options.max_context above limits.max_context";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("options.max_context"), std::string::npos) << e.what();
  }
  EXPECT_THROW(backend->workspace_bytes(layers, {-1, 2, 1000}), Error);
  EXPECT_THROW(backend->workspace_bytes({}, {10, 2, 1000}), Error);
}

}  // namespace
}  // namespace step5
