// select_regions of the cuda backend on crafted scores, against an exact
// top K on the host (larger score first, ties to the lower region, then
// ascending). The scores drive the ways the kernel finds a row's K-th
// score: random scores (the threshold bin's few candidates), a periodic
// pattern (regions 32 i .. 32 i + 3 high), massive ties (more regions at
// the K-th score than shared memory holds: radix passes over global
// memory), moderate ties with +0 and -0, high scores exactly where the
// kernel samples a long row (its guessed floor then lies above the K-th
// score, and a second pass decides), dense scores (all but a few within
// 1/256 of each other: many distinct keys in one distance bin) and scores
// within 48 units in the last place of the best (the K-th key in an exact
// distance bin); rows of at most K regions take every region. Every kernel
// instance runs: score columns up to 2,048, up to 32,768 and above, each
// of the last two in the 1,024-thread instances the plan picks for steps
// of at most one selection per SM and in the 512-thread ones, up to 4,096
// in the 128-thread instance that the plan picks for steps of many
// selections, and up to 16,384 in the staged one it picks past them. On
// sm_90+ launches of at least 65,536 score columns with few selections
// split each row over a cluster of 2 to 8 CTAs (its parts list every key,
// or from a floor sampled over all parts when a part is long, or take an
// ordered pass, or leave massive ties to one CTA). Without a usable GPU the
// tests are skipped visibly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "step5/attention.h"
#include "step5/testing/cuda_internals.h"
#include "step5/testing/device_memory.h"
#include "step5/testing/step_buffers.h"
#include "test_util.h"

namespace step5 {
namespace {

enum class Pattern { random, periodic, four_values, quantized, in_sample, dense, near_best };
constexpr Pattern kPatterns[] = {Pattern::random,    Pattern::periodic,  Pattern::four_values,
                                 Pattern::quantized, Pattern::in_sample, Pattern::dense,
                                 Pattern::near_best};

// Whether region j lies in a block the kernel samples (rows longer than its
// list guess the floor they keep from that sample).
bool sampled(int32_t j) {
  const int32_t b = j / cuda_testing::select_sample_stride();
  const int32_t first = cuda_testing::select_sample_first(b);
  return j >= first && j < first + 8;
}

float crafted_score(Pattern pattern, int32_t j, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  switch (pattern) {
    case Pattern::random: return 2.0f * unit(rng) - 1.0f;
    case Pattern::periodic: return (j % 32 < 4 ? 4.0f : 1.0f) + unit(rng);
    case Pattern::four_values: return static_cast<float>(rng() % 4);
    case Pattern::in_sample: return (sampled(j) ? 4.0f : 1.0f) + unit(rng);
    case Pattern::dense: return j % 97 == 0 ? 100.0f : 1.0f + unit(rng) / 256.0f;
    case Pattern::near_best: {
      // 48 floats one unit in the last place apart: every key within 48 of
      // the best, so the K-th lies in an exact distance bin.
      const uint32_t bits = 0x3f800000u + static_cast<uint32_t>(rng() % 48);
      float x;
      std::memcpy(&x, &bits, sizeof x);
      return x;
    }
    case Pattern::quantized: {
      const float x = std::round((8.0f * unit(rng) - 4.0f) * 8.0f) / 8.0f;
      return x == 0.0f && (rng() & 1) ? -0.0f : x;
    }
  }
  return 0.0f;
}

// The exact selection of one row: K best of C (ties to the lower region),
// ascending, -1 padded; every region when C <= K.
std::vector<int32_t> exact_top_k(const float* scores, int32_t C, int32_t K) {
  std::vector<int32_t> order(static_cast<size_t>(C));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  order.resize(static_cast<size_t>(std::min(C, K)));
  std::sort(order.begin(), order.end());
  order.resize(static_cast<size_t>(K), -1);
  return order;
}

// One decode row per request at the given sequence lengths, G = 7 groups
// (one pattern each), score columns `columns` (>= every row's C).
void check_crafted_selection(int32_t K, const std::vector<int32_t>& lens, int64_t columns) {
  LayerConfig c;
  c.num_heads = 14;
  c.num_kv_heads = 7;
  c.head_size = 64;
  c.topk = K;
  const int64_t G = c.num_kv_heads, R = static_cast<int64_t>(lens.size());
  const std::unique_ptr<Backend> gpu = make_backend(BackendKind::cuda);

  sim::StepHost h;
  h.max_blocks = (*std::max_element(lens.begin(), lens.end()) + c.block_size - 1) / c.block_size;
  h.query_start_loc.push_back(0);
  for (int64_t r = 0; r < R; ++r) {
    const int32_t len = lens[static_cast<size_t>(r)];
    h.query_start_loc.push_back(h.query_start_loc.back() + 1);
    h.seq_lens.push_back(len);
    h.ring_index.push_back(static_cast<int32_t>(r));
    for (int32_t b = 0; b < h.max_blocks; ++b) {
      h.block_table.push_back(static_cast<int32_t>(r * h.max_blocks + b));
    }
    const int64_t block = r * h.max_blocks + (len - 1) / c.block_size;
    h.slot_mapping.push_back(block * c.block_size + (len - 1) % c.block_size);
  }
  sim::StepBuffers step(Device::cuda, h, R);
  const StepPlan plan = gpu->plan(step.desc, {c});

  std::mt19937_64 rng(20261204u + static_cast<uint64_t>(K));
  std::vector<float> scores(static_cast<size_t>(R * G * columns),
                            -std::numeric_limits<float>::infinity());
  for (int64_t r = 0; r < R; ++r) {
    const int32_t C = (lens[static_cast<size_t>(r)] - 1) / 8;
    for (int64_t g = 0; g < G; ++g) {
      float* row = scores.data() + (r * G + g) * columns;
      for (int32_t j = 0; j < C; ++j) {
        row[j] = crafted_score(kPatterns[g], j, rng);
      }
    }
  }
  const sim::DeviceBuffer scores_dev = sim::DeviceBuffer::from(Device::cuda, scores);
  // Poisoned, so an entry the kernel leaves unwritten fails.
  const sim::DeviceBuffer selected = sim::DeviceBuffer::from(
      Device::cuda, std::vector<int32_t>(static_cast<size_t>(R * G * K), 0x7f7f7f7f));
  gpu->select_regions(
      c, step.desc, plan, {0, R},
      TensorView::contiguous(scores_dev.data(), DType::f32, {R, G, columns}, Device::cuda),
      TensorView::contiguous(selected.data(), DType::i32, {R, G, K}, Device::cuda), nullptr);
  sim::synchronize(Device::cuda);
  const std::vector<int32_t> got = selected.to_vector<int32_t>(static_cast<size_t>(R * G * K));
  for (int64_t r = 0; r < R; ++r) {
    const int32_t C = (lens[static_cast<size_t>(r)] - 1) / 8;
    for (int64_t g = 0; g < G; ++g) {
      const std::vector<int32_t> want = exact_top_k(scores.data() + (r * G + g) * columns, C, K);
      const std::vector<int32_t> row(got.begin() + (r * G + g) * K,
                                     got.begin() + (r * G + g + 1) * K);
      int32_t first_difference = -1;
      for (int32_t i = 0; i < K && first_difference < 0; ++i) {
        if (row[static_cast<size_t>(i)] != want[static_cast<size_t>(i)]) first_difference = i;
      }
      ASSERT_EQ(first_difference, -1)
          << "K " << K << ", row " << r << " (C " << C << "), pattern " << g << ": entry "
          << first_difference << " is " << row[static_cast<size_t>(first_difference)] << ", want "
          << want[static_cast<size_t>(first_difference)];
    }
  }
}

// `lens` repeated to `rows` rows: 70 rows x 7 groups are more selections
// than any GPU has SMs, so the plan keeps 512-thread CTAs for them.
std::vector<int32_t> cycled(const std::vector<int32_t>& lens, size_t rows) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < rows; ++i) out.push_back(lens[i % lens.size()]);
  return out;
}

// Score columns above 32,768: the long-row instances; rows of 300 (<= K),
// 9,001 (under its list: two passes), 16,385 and 40,000 regions (one pass
// from a sampled floor; the in-sample pattern misleads the sample, the
// massive ties overflow the list). 4 rows x 7 groups: 1,024 threads.
TEST(CudaSelect, ExactOnCraftedScoresLongRows) {
  STEP5_REQUIRE_GPU();
  check_crafted_selection(512, {2401, 72009, 131081, 320001}, 40000);
}

// One row at a time (7 selections) in 250,000 score columns: clusters of
// 8 CTAs on sm_90+. Rows of 300 (<= K), 524 and 2,500 regions (parts of a
// few hundred keys, some empty), 40,000 and 131,072 (parts that list every
// key) and 250,000 (parts longer than their lists: a floor sampled over
// all parts; the in-sample pattern misleads it, the massive ties overflow
// the parts' lists).
TEST(CudaSelect, ExactOnCraftedScoresOneRowInClusters) {
  STEP5_REQUIRE_GPU();
  for (const int32_t len : {2401, 4200, 20001, 320001, 1048577, 2000001}) {
    SCOPED_TRACE(len);
    check_crafted_selection(512, {len}, 250000);
  }
}

// 8 rows (56 selections): clusters of 2 CTAs on sm_90+, whose parts of up to
// 70,000 scores are longer than their lists: they list from a floor sampled
// over both parts (the in-sample pattern misleads it: ordered passes), and
// the four-value pattern's ties exceed a part's list (one CTA selects over
// the whole row). Rows of 300 (<= K), 37,500, 75,000 and 140,000 regions.
TEST(CudaSelect, ExactOnCraftedScoresInClustersOfTwo) {
  STEP5_REQUIRE_GPU();
  check_crafted_selection(512, cycled({1120001, 2401, 300001, 600001}, 8), 140000);
}

// The same rows, 70 of them: the 512-thread long-row instance.
TEST(CudaSelect, ExactOnCraftedScoresLongRowsManySelections) {
  STEP5_REQUIRE_GPU();
  check_crafted_selection(512, cycled({2401, 72009, 131081, 320001}, 70), 40000);
}

// Score columns above 2,048 up to 32,768: rows of 300 (<= K), 2,500, 9,001
// and 16,385 regions; 4 rows x 7 groups: 1,024 threads.
TEST(CudaSelect, ExactOnCraftedScoresMediumRows) {
  STEP5_REQUIRE_GPU();
  check_crafted_selection(512, {2401, 20001, 72009, 131081}, 16388);
}

// The same rows, 70 of them: the 512-thread instance.
TEST(CudaSelect, ExactOnCraftedScoresMediumRowsManySelections) {
  STEP5_REQUIRE_GPU();
  check_crafted_selection(512, cycled({2401, 20001, 72009, 131081}, 70), 16388);
}

// Many selections (512 rows x 7 groups, at least 8 per SM on a GPU of up
// to 320 SMs): the plan takes the 128-thread instance up to 4,096 columns;
// rows of 300 (<= K), 2,500 and 4,000 regions.
TEST(CudaSelect, ExactOnCraftedScoresManyRows) {
  STEP5_REQUIRE_GPU();
  std::vector<int32_t> lens;
  for (int i = 0; i < 512; ++i) lens.push_back(i % 3 == 0 ? 2401 : i % 3 == 1 ? 20001 : 32001);
  check_crafted_selection(512, lens, 4000);
}

// Many selections in 16,384 score columns: the plan stages each row in
// shared memory (staged_rows.cuh); rows of 300 (<= K), 2,500, 9,001 and
// 16,384 regions (every column). The patterns take each of its paths: the
// sampled floor's list (random, periodic; four values at 9,001 regions,
// finished by radix passes), a floor above the K-th score (the in-sample
// pattern at 2,500 regions: the whole row binned), and shares overflowed
// twice (four values at 16,384 regions: the staged row's own pass).
TEST(CudaSelect, ExactOnCraftedScoresStagedRows) {
  STEP5_REQUIRE_GPU();
  std::vector<int32_t> lens;
  for (int i = 0; i < 512; ++i) {
    const int32_t choices[] = {2401, 20001, 72009, 131073};
    lens.push_back(choices[i % 4]);
  }
  check_crafted_selection(512, lens, 16384);
}

// Score columns up to 2,048: the 128-thread instance; rows of 40 (<= K),
// 200 and 2,000 regions.
TEST(CudaSelect, ExactOnCraftedScoresShortRows) {
  STEP5_REQUIRE_GPU();
  check_crafted_selection(64, {321, 1601, 16001}, 2000);
}

}  // namespace
}  // namespace step5
