// The oracle on its own: hand-computable summaries, selection ties, the
// window and dense special cases, and selection_acceptable.
#include <gtest/gtest.h>

#include <cmath>

#include "step5/numerics.h"
#include "step5/testing/oracle.h"
#include "test_util.h"

namespace step5 {
namespace {

using oracle::History;
using oracle::QueryRow;

// A history of `length` random bf16 tokens.
History random_tokens(const LayerConfig& c, int64_t length, std::mt19937_64& rng) {
  History h;
  const auto kv = static_cast<size_t>(c.num_kv_heads * c.head_size);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t p = 0; p < length; ++p) {
    std::vector<float> k(kv), v(kv), ik(static_cast<size_t>(c.index_dim));
    for (auto& x : k) x = round_to_bf16(normal(rng));
    for (auto& x : v) x = round_to_bf16(normal(rng));
    for (auto& x : ik) x = round_to_bf16(normal(rng));
    h.write(c, p, k.data(), v.data(), ik.data(), normal(rng));
  }
  return h;
}

struct Row {
  std::vector<float> query, gate, index_query, index_weight;
  QueryRow view;
};

Row random_row(const LayerConfig& c, int64_t position, std::mt19937_64& rng, bool gate) {
  Row r;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  r.query.resize(static_cast<size_t>(c.num_heads * c.head_size));
  for (auto& x : r.query) x = round_to_bf16(normal(rng));
  r.index_query.resize(static_cast<size_t>(c.num_kv_heads * c.index_heads * c.index_dim));
  for (auto& x : r.index_query) x = round_to_bf16(normal(rng));
  r.index_weight.resize(static_cast<size_t>(c.num_kv_heads * c.index_heads));
  for (auto& x : r.index_weight) x = uniform(rng);
  if (gate) {
    r.gate.resize(static_cast<size_t>(c.num_heads));
    for (auto& x : r.gate) x = round_to_bf16(2.0f * normal(rng));
  }
  r.view.position = position;
  r.view.query = r.query.data();
  r.view.gate = gate ? r.gate.data() : nullptr;
  r.view.index_query = r.index_query.data();
  r.view.index_weight = r.index_weight.data();
  return r;
}

LayerConfig small_csa(int topk) {
  return test::csa_config({4, 2, 16, 16}, topk);
}

TEST(Oracle, SummaryOfEqualZIsTheMean) {
  LayerConfig c = small_csa(4);
  c.summary_dtype = DType::bf16;
  std::mt19937_64 rng(1);
  History h = random_tokens(c, 16, rng);
  for (int p = 8; p < 16; ++p) h.index_z[static_cast<size_t>(p)] = 0.75f;
  const std::vector<float> s = oracle::summary(c, h, 1);
  for (size_t d = 0; d < s.size(); ++d) {
    double mean = 0;
    for (size_t p = 8; p < 16; ++p) mean += h.index_key[p * s.size() + d];
    EXPECT_NEAR(s[d], mean / 8, 1e-2 * (std::fabs(mean / 8) + 1e-3)) << "element " << d;
    EXPECT_EQ(s[d], round_to_bf16(s[d])) << "stored value is bf16";
  }
}

TEST(Oracle, SummaryFollowsTheDominantZ) {
  LayerConfig c = small_csa(4);
  std::mt19937_64 rng(2);
  History h = random_tokens(c, 8, rng);
  for (int p = 0; p < 8; ++p) h.index_z[static_cast<size_t>(p)] = p == 5 ? 40.0f : 0.0f;
  const std::vector<float> s = oracle::summary(c, h, 0);
  for (size_t d = 0; d < s.size(); ++d) {
    EXPECT_EQ(s[d], round_to_fp8_e4m3(h.index_key[5 * s.size() + d])) << "element " << d;
  }
}

TEST(Oracle, SummaryNeedsAClosedRegion) {
  const LayerConfig c = small_csa(4);
  std::mt19937_64 rng(3);
  const History h = random_tokens(c, 15, rng);
  EXPECT_THROW(oracle::summary(c, h, 1), Error);
}

TEST(Oracle, BelowTopkCsaIsDenseCausal) {
  const LayerConfig c = small_csa(8);
  std::mt19937_64 rng(4);
  const History h = random_tokens(c, 70, rng);
  for (int64_t p : {0, 7, 8, 40, 69}) {
    const Row row = random_row(c, p, rng, true);
    const oracle::RowResult csa = oracle::csa_row(c, h, row.view);
    const oracle::RowResult dense = oracle::dense_causal_row(c, h, row.view);
    ASSERT_EQ(csa.output.size(), dense.output.size());
    for (size_t e = 0; e < csa.output.size(); ++e) {
      EXPECT_NEAR(csa.output[e], dense.output[e], 1e-12) << "position " << p << " element " << e;
    }
    for (const auto& sel : csa.selected) EXPECT_EQ(sel.size(), static_cast<size_t>(p / 8));
  }
}

TEST(Oracle, SelectionTakesTopScoresAndTiesGoLow) {
  const LayerConfig c = small_csa(3);
  std::mt19937_64 rng(5);
  History h = random_tokens(c, 80, rng);
  Row row = random_row(c, 79, rng, false);
  // Zero index keys give zero summaries, so every score ties at 0 and the
  // lowest regions win.
  std::fill(h.index_key.begin(), h.index_key.end(), 0.0f);
  oracle::RowResult r = oracle::csa_row(c, h, row.view);
  for (const auto& sel : r.selected) EXPECT_EQ(sel, (std::vector<int32_t>{0, 1, 2}));
  // Positive queries and positive keys in regions 2, 4 and 6 only: those
  // three score above the zero of every other region, for every group.
  std::fill(row.index_query.begin(), row.index_query.end(), 1.0f);
  for (int j : {2, 4, 6}) {
    const auto first = static_cast<size_t>(8 * j * c.index_dim);
    std::fill(h.index_key.begin() + static_cast<std::ptrdiff_t>(first),
              h.index_key.begin() +
                  static_cast<std::ptrdiff_t>(first + 8 * static_cast<size_t>(c.index_dim)),
              0.1f * static_cast<float>(j));
  }
  r = oracle::csa_row(c, h, row.view);
  for (size_t g = 0; g < r.selected.size(); ++g) {
    EXPECT_EQ(r.selected[g], (std::vector<int32_t>{2, 4, 6})) << "group " << g;
    EXPECT_TRUE(oracle::selection_acceptable(r.scores[g], r.selected[g], c.topk, 0.0));
  }
}

TEST(Oracle, WindowCoversTheLastWTokens) {
  LayerConfig c = test::swa_config({4, 2, 16, 16}, 5);
  std::mt19937_64 rng(6);
  const History h = random_tokens(c, 30, rng);
  const Row row = random_row(c, 29, rng, false);
  const oracle::RowResult window = oracle::swa_row(c, h, row.view);
  // Poisoning positions outside the window must not change the result.
  History poisoned = h;
  for (size_t e = 0; e < static_cast<size_t>(25 * c.num_kv_heads * c.head_size); ++e) {
    poisoned.key[e] = 1e3f;
    poisoned.value[e] = 1e3f;
  }
  const oracle::RowResult again = oracle::swa_row(c, poisoned, row.view);
  EXPECT_EQ(window.output, again.output);
  c.window = 1000;
  const oracle::RowResult wide = oracle::swa_row(c, h, row.view);
  const oracle::RowResult dense = oracle::dense_causal_row(c, h, row.view);
  EXPECT_EQ(wide.output, dense.output);
  EXPECT_NE(wide.output, window.output);
}

TEST(Oracle, GateIsASigmoidFactor) {
  const LayerConfig c = small_csa(4);
  std::mt19937_64 rng(7);
  const History h = random_tokens(c, 50, rng);
  Row row = random_row(c, 49, rng, true);
  const oracle::RowResult gated = oracle::csa_row(c, h, row.view);
  row.view.gate = nullptr;
  const oracle::RowResult plain = oracle::csa_row(c, h, row.view);
  const auto D = static_cast<size_t>(c.head_size);
  for (size_t e = 0; e < gated.output.size(); ++e) {
    const double sig = 1.0 / (1.0 + std::exp(-static_cast<double>(row.gate[e / D])));
    EXPECT_NEAR(gated.output[e], plain.output[e] * sig, 1e-12) << "element " << e;
  }
}

TEST(Oracle, ForcedSelectionIsUsed) {
  const LayerConfig c = small_csa(2);
  std::mt19937_64 rng(8);
  const History h = random_tokens(c, 64, rng);
  const Row row = random_row(c, 63, rng, false);
  const oracle::RowResult best = oracle::csa_row(c, h, row.view);
  const std::vector<std::vector<int32_t>> forced(2, std::vector<int32_t>{0, -1});
  const oracle::RowResult r = oracle::csa_row(c, h, row.view, &forced);
  for (const auto& sel : r.selected) EXPECT_EQ(sel, std::vector<int32_t>{0});
  EXPECT_NE(r.output, best.output);
}

TEST(Oracle, SelectionAcceptable) {
  const std::vector<double> scores{1.0, 3.0, 2.0, 3.0, 0.5};
  EXPECT_TRUE(oracle::selection_acceptable(scores, {1, 3}, 2, 0.0));
  EXPECT_TRUE(oracle::selection_acceptable(scores, {1, 2, 3}, 3, 0.0));
  EXPECT_FALSE(oracle::selection_acceptable(scores, {1, 2}, 2, 0.0)) << "2 < 3 left out";
  EXPECT_TRUE(oracle::selection_acceptable(scores, {1, 2}, 2, 0.5)) << "within slack";
  EXPECT_FALSE(oracle::selection_acceptable(scores, {1}, 2, 0.0)) << "too few";
  EXPECT_FALSE(oracle::selection_acceptable(scores, {1, 1}, 2, 0.0)) << "duplicate";
  EXPECT_FALSE(oracle::selection_acceptable(scores, {1, 5}, 2, 0.0)) << "not closed";
  EXPECT_TRUE(oracle::selection_acceptable(scores, {0, 1, 2, 3, 4}, 8, 0.0)) << "C <= K: all";
  EXPECT_FALSE(oracle::selection_acceptable(scores, {0, 1, 2, 3}, 8, 0.0)) << "C <= K: one short";
}

TEST(Oracle, HistoryRewriteAndTruncate) {
  const LayerConfig c = small_csa(4);
  std::mt19937_64 rng(9);
  History h = random_tokens(c, 10, rng);
  const auto kv = static_cast<size_t>(c.num_kv_heads * c.head_size);
  std::vector<float> k(kv, 2.0f), v(kv, 3.0f), ik(static_cast<size_t>(c.index_dim), 4.0f);
  h.write(c, 4, k.data(), v.data(), ik.data(), 5.0f);
  EXPECT_EQ(h.length, 10);
  EXPECT_EQ(h.key[4 * kv], 2.0f);
  EXPECT_EQ(h.index_z[4], 5.0f);
  EXPECT_THROW(h.write(c, 12, k.data(), v.data(), ik.data(), 0.0f), Error) << "gap";
  h.truncate(c, 6);
  EXPECT_EQ(h.length, 6);
  EXPECT_EQ(h.key.size(), 6 * kv);
  EXPECT_THROW(h.truncate(c, 7), Error);
}

}  // namespace
}  // namespace step5
