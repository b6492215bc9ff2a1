// Tile sizes and the split-KV heuristic of the paged attention family. All
// values are constexpr so kernels, launcher and scratch sizing agree; the
// comments say why each value.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace step5::cuda::attn {

// Region size of the page lists (SPEC 3): one page = 8 consecutive tokens.
constexpr int page_tokens() {
  return 8;
}

// One warp step consumes two pages: 16 keys is the k extent of one
// m16n8k16 P.V product, and two n8 tiles of the Q.K^T product.
constexpr int pages_per_step() {
  return 2;
}
constexpr int keys_per_step() {
  return page_tokens() * pages_per_step();
}

// Query heads of one CTA (H/G <= 16): the M side of the tile kernel's
// m16n8k16 tiles, two N tiles of 8 at most in the row kernel; the row
// kernel's end-of-CTA merge keeps this many heads per warp.
constexpr int mma_rows() {
  return 16;
}

// 4 warps per CTA, each streaming its own steps: with 2 CTAs per SM that is
// 8 independent cp.async streams of 2 x 12 KB (bf16, D = 192) each, about
// 100 KB in flight per SM, well above the ~32 KB/SM that Little's law asks
// for at 4.3 TB/s and ~1 us latency.
constexpr int attention_warps() {
  return 4;
}
constexpr int attention_threads() {
  return attention_warps() * 32;
}

// Steps staged per warp: bf16 double buffers (one 12 KB step in flight
// while the other computes; 2 CTAs x 4 warps x 12 KB ~ 100 KB in flight per
// SM). An fp8 step is half the bytes, so it keeps three in flight to hold
// the same bytes in flight per SM; with two, fp8 ran no faster than bf16
// (latency-bound at the same step rate).
constexpr int attention_stages(bool fp8) {
  return fp8 ? 4 : 2;
}

// GPUs with less shared memory than Hopper (227 KB per block): sm_80 has
// 163 KB, sm_86 / sm_89 / sm_120 99 KB per block and 100 KB per SM, where
// the default D = 192 tiles (~98 KB of stages, plus the page lists) do not
// fit at all. There the compact tiles halve the depth: one CTA of default
// depth would not fit, two compact CTAs per SM keep about the same bytes in
// flight as one default CTA would. The plan picks the default depth when it
// fits the device's opt-in limit, else the compact one (schedule.cpp).
constexpr int attention_compact_stages(bool fp8) {
  return fp8 ? 2 : 1;
}
// The smallest opt-in shared memory per block of any supported GPU
// (compute capability 8.6, 8.9, 12.x: 99 KB); tiles that can exceed it get a
// compact variant (tiles.h).
constexpr size_t min_optin_smem() {
  return 99 * 1024;
}
// Static shared memory of the kernel (warp counters, fault flag) that the
// opt-in limit must also hold; a bound, checked against the device at plan
// time with the dynamic bytes.
constexpr size_t static_smem_reserve() {
  return 256;
}
// config.topk's upper bound (validate_config): the largest CSA page list.
constexpr int max_topk() {
  return 4096;
}

// Split-KV fills the GPU's resident CTA slots, two CTAs per SM (shared
// memory, K <= 512), since a decode step has only rows * G (row, group)
// pairs, e.g. 8 for one request, and each CTA would otherwise stream 513
// pages on one SM.
constexpr int64_t target_ctas(int sm_count) {
  return 2 * int64_t{sm_count};
}
// A split should give every warp at least one full step, else the split's
// fixed cost (Q load, merge, partial write) dominates.
constexpr int min_pages_per_split() {
  return attention_warps() * pages_per_step();
}
// Bounds scratch and the in-kernel combine loop.
constexpr int max_splits() {
  return 64;
}

// Splits for `rows` rows of `groups` KV heads whose page lists hold at most
// `max_pages` pages, on a GPU of `sm_count` SMs: the fewest whose CTAs fill
// their waves of target_ctas() slots at least 9/10 as well as the best
// count up to the useful limit does. Fewer splits mean fewer list
// compactions, block lookups and partials per row, and nothing to combine
// at one split; equal-length CTAs finish in waves, so a count that leaves
// the last wave mostly empty costs a whole wave. E.g. 256 (row, group)
// pairs on 132 SMs: two splits ran as two waves of 264 CTAs, one split runs
// as one (CSA decode 128K b32 attention 0.229 -> 0.218 ms bf16, 0.157 ->
// 0.135 ms fp8; benchmarks.md, seventh session). Depends only on
// shapes, never on the step's contexts, so scratch is sized at plan time
// and CUDA graphs replay unchanged.
constexpr int num_splits(int64_t rows, int groups, int64_t max_pages, int sm_count) {
  const int64_t pairs = std::max<int64_t>(1, rows * groups);
  const int64_t slots = target_ctas(sm_count);
  if (pairs >= slots) return 1;
  const int64_t useful =
      std::max<int64_t>(1, (max_pages + min_pages_per_split() - 1) / min_pages_per_split());
  const int64_t most = std::min<int64_t>(useful, max_splits());
  // Fill of s splits: pairs * s / (waves(s) * slots), compared by cross
  // multiplication to stay in integers.
  auto waves = [&](int64_t s) { return (pairs * s + slots - 1) / slots; };
  int64_t best = 1;
  for (int64_t s = 2; s <= most; ++s) {
    if (s * waves(best) > best * waves(s)) best = s;
  }
  for (int64_t s = 1; s < best; ++s) {
    if (10 * s * waves(best) >= 9 * best * waves(s)) return static_cast<int>(s);
  }
  return static_cast<int>(best);
}
static_assert(num_splits(32, 8, 513, 132) == 1, "256 pairs fill one wave of 264");
static_assert(num_splits(16, 8, 513, 132) == 2, "128 pairs: two splits fill one wave");
static_assert(num_splits(8, 8, 513, 132) == 4, "64 pairs: four splits, not five (two waves)");
static_assert(num_splits(1, 8, 513, 132) == 30, "8 pairs: 240 of 264 slots");
static_assert(num_splits(1, 8, 9, 132) == 2, "no more splits than useful");

// A split's pages [begin, end) of a row's `num_pages`: ceil(num_pages /
// num_splits) each, the first splits full, the last ones short or empty.
struct SplitPages {
  int32_t begin = 0;
  int32_t end = 0;
};
constexpr int32_t pages_per_split(int32_t num_pages, int num_splits) {
  return (num_pages + num_splits - 1) / num_splits;
}
constexpr SplitPages split_pages(int32_t num_pages, int num_splits, int split) {
  const int32_t per_split = pages_per_split(num_pages, num_splits);
  const int32_t begin = std::min(num_pages, split * per_split);
  return {begin, std::min(num_pages, begin + per_split)};
}
static_assert(split_pages(65, 4, 3).begin == 51 && split_pages(65, 4, 3).end == 65, "17 x 3 + 14");
static_assert(split_pages(9, 4, 3).begin == 9 && split_pages(9, 4, 3).end == 9,
              "3 x 3, last empty");
// An SWA row at position `pos` reads pages first..pos / 8 with first =
// max(0, pos - W + 1) / 8 (W = `window` keys including its own).
constexpr int32_t swa_first_page(int32_t pos, int32_t window) {
  return std::max(0, pos - window + 1) / page_tokens();
}

// The split that holds a row's last page, its own position's (0 for a row
// without pages): the one that writes the row's K/V when the attention
// launch carries the write (PagedAttentionParams::write_kv).
constexpr int last_page_split(int32_t num_pages, int num_splits) {
  return num_pages <= 0
             ? 0
             : static_cast<int>((num_pages - 1) / pages_per_split(num_pages, num_splits));
}
static_assert(last_page_split(65, 4) == 3 && last_page_split(9, 4) == 2, "the split holding it");

// Block ids of a split's pages kept in shared memory (4 bytes each): every
// CSA split (K <= 4096) and SWA windows up to 16K tokens; wider windows
// fall back to block-table loads in the copy loop.
constexpr int64_t block_table_pages(int64_t max_pages) {
  return std::min<int64_t>(max_pages, 4097);
}

// Most pages of a row: CSA K selected regions plus the current one; SWA
// positions p-W+1..p cover at most ceil((W-1)/8)+1 pages.
constexpr int64_t csa_max_pages(int topk) {
  return int64_t{topk} + 1;
}
constexpr int64_t swa_max_pages(int window) {
  return (int64_t{window} + 6) / 8 + 1;
}

}  // namespace step5::cuda::attn
