// Properties of the whole layer through the CPU backend: dense equivalence
// below K, summaries independent of how a prompt arrives, the gate formula,
// padding rows, and that check_step itself catches a wrong step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "step5/testing/oracle.h"
#include "test_util.h"

namespace step5 {
namespace {

// Rows [begin, begin + count) of a one-request step `all` (which starts at
// position 0) as their own step, for request 0.
sim::StepInput slice(const LayerConfig& c, const sim::StepInput& all, int32_t begin,
                     int32_t count) {
  sim::StepInput s;
  s.request = {0};
  s.query_start_loc = {0, count};
  s.seq_lens = {begin + count};
  auto take = [&](const auto& v, size_t per_row, auto& out) {
    if (v.empty()) return;
    out.assign(
        v.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(begin) * per_row),
        v.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(begin + count) * per_row));
  };
  const auto H = static_cast<size_t>(c.num_heads), G = static_cast<size_t>(c.num_kv_heads);
  const auto D = static_cast<size_t>(c.head_size), I = static_cast<size_t>(c.index_heads);
  const auto Di = static_cast<size_t>(c.index_dim);
  take(all.query, H * D, s.query);
  take(all.key, G * D, s.key);
  take(all.value, G * D, s.value);
  take(all.gate, H, s.gate);
  take(all.index_query, G * I * Di, s.index_query);
  take(all.index_weight, G * I, s.index_weight);
  take(all.index_key, Di, s.index_key);
  take(all.index_z, 1, s.index_z);
  return s;
}

sim::SessionOptions one_request(int64_t context, uint64_t seed) {
  sim::SessionOptions o;
  o.max_requests = 1;
  o.max_context = context;
  o.seed = seed;
  return o;
}

TEST(Properties, CsaBelowTopkEqualsDenseCausal) {
  auto backend = test::cpu_backend();
  const LayerConfig c = test::csa_config({16, 2, 192, 32}, 64);
  sim::LayerSession session(*backend, c, one_request(300, 1));
  std::mt19937_64 rng(41);
  const sim::StepInput step = sim::random_step(c, rng, {0}, {0}, {257}, true);
  const sim::StepOutput out = test::run_checked(session, step, "prefill");
  const auto hd = static_cast<size_t>(c.num_heads * c.head_size);
  double err2 = 0, ref2 = 0;
  for (int32_t t = 0; t < 257; ++t) {
    std::vector<float> q(hd), gate(static_cast<size_t>(c.num_heads));
    for (size_t e = 0; e < hd; ++e)
      q[e] = bf16_to_float(step.query[static_cast<size_t>(t) * hd + e]);
    for (size_t h = 0; h < gate.size(); ++h) {
      gate[h] = bf16_to_float(step.gate[static_cast<size_t>(t) * gate.size() + h]);
    }
    oracle::QueryRow row;
    row.position = t;
    row.query = q.data();
    row.gate = gate.data();
    const oracle::RowResult dense = oracle::dense_causal_row(c, session.history(0), row);
    for (size_t e = 0; e < hd; ++e) {
      const double got = bf16_to_float(out.output[static_cast<size_t>(t) * hd + e]);
      err2 += (got - dense.output[e]) * (got - dense.output[e]);
      ref2 += dense.output[e] * dense.output[e];
    }
  }
  EXPECT_LT(std::sqrt(err2 / ref2), sim::default_tolerance(c).rel_l2);
}

// The summaries after a prompt of P tokens, fed to a fresh session by
// `feed`, which runs steps through `run`.
template <class Feed>
std::vector<float> summaries_after(Backend& backend, const LayerConfig& c, uint64_t seed,
                                   Feed feed) {
  sim::LayerSession session(backend, c, one_request(256, seed));
  sim::StepOutput last;
  feed([&](const sim::StepInput& step) { last = test::run_checked(session, step, "feed"); });
  return last.summary;
}

TEST(Properties, SummariesIndependentOfHowThePromptArrives) {
  auto backend = test::cpu_backend();
  for (DType summary : {DType::fp8_e4m3, DType::bf16}) {
    const LayerConfig c = test::csa_config({2, 1, 64, 16}, 4, 3, DType::bf16, summary);
    const int32_t P = 203;
    std::mt19937_64 rng(42);
    const sim::StepInput prompt = sim::random_step(c, rng, {0}, {0}, {P}, false);
    const std::vector<float> whole =
        summaries_after(*backend, c, 1, [&](auto run) { run(prompt); });
    ASSERT_EQ(whole.size(), static_cast<size_t>(P / 8 * c.index_dim));
    const std::vector<float> chunked = summaries_after(*backend, c, 2, [&](auto run) {
      const int32_t sizes[] = {7, 13, 1, 29, 3, 9, 17, 5, 11};
      int32_t at = 0;
      for (size_t i = 0; at < P; ++i) {
        const int32_t n = std::min(sizes[i % 9], P - at);
        run(slice(c, prompt, at, n));
        at += n;
      }
    });
    const std::vector<float> tokens = summaries_after(*backend, c, 3, [&](auto run) {
      for (int32_t at = 0; at < P; ++at) run(slice(c, prompt, at, 1));
    });
    // Verify steps of k + 1 = 4 rows: the accepted ones are the prompt's,
    // the rejected ones random drafts that later steps overwrite (some of
    // them close a region that must then be summarized again).
    std::mt19937_64 accept(43);
    const std::vector<float> verified = summaries_after(*backend, c, 4, [&](auto run) {
      int32_t at = 0;
      while (at < P) {
        const int32_t rows = std::min(c.spec_tokens + 1, P - at);
        const int32_t good = std::min<int32_t>(rows, 1 + static_cast<int32_t>(accept() % 4));
        sim::StepInput step = slice(c, prompt, at, rows);
        const sim::StepInput drafts = sim::random_step(c, rng, {0}, {at}, {rows}, false);
        const auto Di = static_cast<size_t>(c.index_dim);
        for (int32_t r = good; r < rows; ++r) {
          std::copy_n(drafts.index_key.begin() + static_cast<std::ptrdiff_t>(r * c.index_dim), Di,
                      step.index_key.begin() + static_cast<std::ptrdiff_t>(r * c.index_dim));
          step.index_z[static_cast<size_t>(r)] = drafts.index_z[static_cast<size_t>(r)];
        }
        run(step);
        at += good;
      }
    });
    auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same_bits(whole, chunked)) << dtype_name(summary) << ": chunks of odd sizes";
    EXPECT_TRUE(same_bits(whole, tokens)) << dtype_name(summary) << ": token by token";
    EXPECT_TRUE(same_bits(whole, verified)) << dtype_name(summary) << ": verify with rewrites";
  }
}

TEST(Properties, GateIsTheSigmoidFactor) {
  auto backend = test::cpu_backend();
  for (LayerKind kind : {LayerKind::csa, LayerKind::swa}) {
    LayerConfig c = test::csa_config({16, 2, 64, 16}, 4);
    c.kind = kind;
    c.window = 40;
    std::mt19937_64 rng(44);
    const sim::StepInput gated = sim::random_step(c, rng, {0}, {0}, {120}, true);
    sim::StepInput plain = gated;
    plain.gate.clear();
    sim::LayerSession a(*backend, c, one_request(128, 5)), b(*backend, c, one_request(128, 6));
    const sim::StepOutput with = test::run_checked(a, gated, "gated");
    const sim::StepOutput without = test::run_checked(b, plain, "plain");
    const auto D = static_cast<size_t>(c.head_size);
    for (size_t e = 0; e < with.output.size(); ++e) {
      const double sig =
          1.0 / (1.0 + std::exp(-static_cast<double>(bf16_to_float(gated.gate[e / D]))));
      const double want = bf16_to_float(without.output[e]) * sig;
      // Both outputs are rounded to bf16 once: 2^-8 relative each.
      ASSERT_NEAR(bf16_to_float(with.output[e]), want, std::fabs(want) * 0x1p-7 + 1e-30)
          << layer_kind_name(kind) << " element " << e;
    }
  }
}

TEST(Properties, PaddingRowsAreZero) {
  auto backend = test::cpu_backend();
  for (LayerKind kind : {LayerKind::csa, LayerKind::swa}) {
    LayerConfig c = test::csa_config({8, 2, 64, 16}, 4, 3);
    c.kind = kind;
    sim::SessionOptions o = one_request(64, 7);
    o.max_requests = 2;
    o.padding_rows = 6;
    sim::LayerSession session(*backend, c, o);
    std::mt19937_64 rng(45);
    sim::StepOutput out = test::run_checked(
        session, sim::random_step(c, rng, {0, 1}, {0, 0}, {20, 9}, true), "prefill");
    EXPECT_TRUE(out.padding_zero);
    out = test::run_checked(session, sim::random_step(c, rng, {1, 0}, {9, 20}, {4, 4}, true),
                            "verify");
    EXPECT_EQ(out.kind, StepKind::uniform);
    EXPECT_TRUE(out.padding_zero);
    // A step with no rows still zeroes every padding row.
    sim::StepInput empty;
    empty.query_start_loc = {0};
    out = session.run(empty);
    EXPECT_EQ(out.kind, StepKind::empty);
    EXPECT_TRUE(out.padding_zero);
  }
}

TEST(Properties, CheckStepCatchesWrongResults) {
  auto backend = test::cpu_backend();
  const LayerConfig c = test::csa_config({4, 2, 64, 16}, 2);
  sim::LayerSession session(*backend, c, one_request(64, 8));
  std::mt19937_64 rng(46);
  const sim::StepInput step = sim::random_step(c, rng, {0}, {0}, {60}, true);
  const sim::StepOutput good = session.run(step);
  const sim::Tolerance tol = sim::default_tolerance(c);
  ASSERT_TRUE(sim::check_step(session, step, good, tol, true).ok);
  auto expect_fail = [&](sim::StepOutput bad, const char* what) {
    const sim::CheckResult r = sim::check_step(session, step, bad, tol, true);
    EXPECT_FALSE(r.ok) << "a wrong " << what << " passed";
    EXPECT_NE(r.message.find(what), std::string::npos) << r.message;
  };
  sim::StepOutput bad = good;
  bad.output[1000] = float_to_bf16(bf16_to_float(bad.output[1000]) + 0.5f);
  expect_fail(bad, "output row");
  bad = good;
  bad.output[77] = 0xffff;  // NaN
  expect_fail(bad, "output row");
  bad = good;
  // Row 59 (position 59, 7 closed regions, K = 2): a selection that keeps
  // its lowest-scoring region is not a top-2.
  const oracle::RowResult ref = [&] {
    std::vector<float> q(static_cast<size_t>(c.num_heads * c.head_size));
    std::vector<float> iq(static_cast<size_t>(c.num_kv_heads * c.index_heads * c.index_dim));
    for (size_t e = 0; e < q.size(); ++e) q[e] = bf16_to_float(step.query[59 * q.size() + e]);
    for (size_t e = 0; e < iq.size(); ++e)
      iq[e] = bf16_to_float(step.index_query[59 * iq.size() + e]);
    oracle::QueryRow row;
    row.position = 59;
    row.query = q.data();
    row.index_query = iq.data();
    row.index_weight = step.index_weight.data() + 59 * c.num_kv_heads * c.index_heads;
    return oracle::csa_row(c, session.history(0), row);
  }();
  const auto& scores = ref.scores[0];
  const auto worst =
      static_cast<int32_t>(std::min_element(scores.begin(), scores.end()) - scores.begin());
  const int32_t keep = ref.selected[0][0] == worst ? ref.selected[0][1] : ref.selected[0][0];
  int32_t* sel = bad.selected.data() + 59 * c.num_kv_heads * c.topk;
  sel[0] = std::min(keep, worst);
  sel[1] = std::max(keep, worst);
  expect_fail(bad, "is not a top-2");
  bad = good;
  bad.selected[5] = 0x7f7f7f7f;
  expect_fail(bad, "group");
  bad = good;
  bad.summary[3] = -bad.summary[3] + 1.0f;
  expect_fail(bad, "summary of request 0 region 0");
  bad = good;
  bad.closed[0] = 6;
  expect_fail(bad, "closed[0]");
  bad = good;
  bad.padding_zero = false;
  expect_fail(bad, "padding rows");
}

}  // namespace
}  // namespace step5
