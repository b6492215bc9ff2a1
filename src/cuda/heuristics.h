// Launch shapes of the cuda backend's own kernels (the attention family has
// its own in src/cuda/attention/). Every choice is a constexpr so kernels and
// launchers agree at compile time; the comments say why each value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace step5::cuda {

// kv_write: one thread per 16-byte bf16 input vector (8 values). 256
// threads keeps enough independent loads in flight per SM at the small
// decode sizes and is a multiple of every row's vector count we support.
constexpr int kv_write_threads() {
  return 256;
}

// summaries: one CTA per (request, closing region), one thread per 8
// summary values; Di = 256 needs 32 threads, larger Di loops. A single warp
// keeps the eight-row reduction inside registers of one warp.
constexpr int summary_threads() {
  return 32;
}

// cache update (K/V write + summaries of a CSA forward in one launch): 256
// threads, one 16-byte K/V vector per thread or one summary per warp.
constexpr int cache_update_threads() {
  return 256;
}

// ring write: one warp per ring row (Di bf16 + z is at most ~2 KB).
constexpr int ring_threads() {
  return 32;
}

// generic indexer (fp32 FFMA, shapes the tensor-core path does not take):
// one warp per region, each lane holding 8 summary values per 256-wide
// chunk (Di <= 1024 -> at most 4 chunks in registers). 8 warps x 8 regions
// per warp = 64 regions per CTA so the query block staged in shared memory
// (up to G*I*Di fp32) is reused across 64 summaries.
constexpr int indexer_warps() {
  return 8;
}
constexpr int indexer_regions_per_cta() {
  return 64;
}
constexpr int indexer_max_chunks() {
  return 4;
}

// tensor-core indexer: warp-specialized, one CTA per SM. A producer
// warpgroup looks up block ids and starts the summary copies; one or two
// consumer warpgroups multiply and reduce (M = 64 regions per wgmma tile).
// Index heads are padded to 4 so a tile's N columns are 4 x (rows x G
// padded to 8) and every thread holds all heads of its (row, group) slots:
// the weighted-ReLU sum needs no shuffle.
constexpr int indexer_tc_threads() {  // one warpgroup
  return 128;
}
constexpr int indexer_tc_tile_regions() {
  return 64;
}
constexpr int indexer_tc_heads() {
  return 4;
}
// Consumers take the CTA's tiles in turn, each with its own copy of the
// staged index queries: two, so one's epilogue, staging and barrier waits
// overlap the other's MMAs (ncu, 128K b32 decode, one warpgroup doing
// everything: 0.35 instructions issued per scheduler and cycle, 65 % of
// cycles with no eligible warp). One when two query operands would leave
// no stage in flight besides the two being read (N = 256 prefill tiles).
// The plan keeps the stage count a multiple of the consumers (schedule.cpp).
constexpr int indexer_tc_max_consumers() {
  return 2;
}
constexpr int indexer_tc_block_threads() {
  return indexer_tc_threads() * (1 + indexer_tc_max_consumers());
}
// Registers per thread after the split (setmaxnreg): the producer needs
// few, the consumers hold accumulators and double-buffered A fragments
// (at N = 256, 232 spilled). 128 x 24 + 256 x 240 = 64,512 of the SM's
// 65,536. A queue of four block-id lookups in the producer (40 registers,
// consumers 232) left the decode indexer unchanged (55.6 vs 56.1 us) and
// made the N = 256 prefill one slower (288 vs 266 us, spills).
constexpr int indexer_tc_producer_registers() {
  return 24;
}
constexpr int indexer_tc_consumer_registers() {
  return 240;
}
// Stages of summary tiles per CTA, the most that fit next to the query
// operands: the producer keeps all but the ones being read in flight, and
// 4.3 TB/s at ~1-2 us of loaded latency needs 32-64 KB in flight per SM.
constexpr int indexer_tc_min_stages() {
  return 2;
}
constexpr int indexer_tc_max_stages() {
  return 8;
}
constexpr int indexer_tc_max_index_dim() {
  return 512;
}
// Requests whose work table fits in shared memory ((R+1) + R ints).
constexpr int indexer_tc_max_requests() {
  return 8192;
}

// select: one CTA per (row, group). Pass 1 histograms the row's scores by
// their distance below the row's best (fine bins near the top, where the
// K-th score lies), pass 2 keeps every region of the bins above the
// threshold bin plus the candidates inside it in shared memory, and the
// exact K-th key is found among those. Only when the threshold bin holds
// more than select_capacity() entries (massive ties) do four radix passes
// over global memory decide. 512 threads x 8 scores per pass step.
constexpr int select_threads() {
  return 512;
}
constexpr int select_items() {
  return 8;
}
// CTAs per SM each select instance is built for: 64 registers per thread,
// so two 512-thread CTAs share an SM and the 256 rows of a 32-request
// decode step (G = 8) run in one wave. The cache update a decode step's
// select launch may carry (LayerSchedule::cache_update_in_select) would
// take the kernel to 81 registers otherwise.
constexpr int select_min_ctas(int threads) {
  return 1024 / threads;
}
// Launches of few selections (at most one per SM: decode and verify steps
// of up to 16 requests at G = 8) take CTAs of 1,024 threads for rows past
// select_short_columns(): a row's scores are read by one CTA, whose loads
// in flight (8 scores a thread, one step ahead) bound the pass, so twice
// the threads stream a row about twice as fast while the other SMs idle.
constexpr int select_wide_threads() {
  return 1024;
}
constexpr int select_radix_bits() {
  return 8;
}
// Distance bins: 64 exact bins for distances < 64 key units, then 64
// sub-bins per power of two up to 2^32 (like a float with 6 mantissa bits).
constexpr int select_bins() {
  return 64 * 27;
}
// Candidates of the threshold bin (the K-th key is among them) up to which
// the K-th is found by counting (each candidate compares itself with all:
// at most 256 x 256 shared reads spread over the CTA) instead of four radix
// passes with three barriers each. Random scores leave a few dozen there.
constexpr int select_few() {
  return 256;
}
// Entries (index, key) kept in shared memory: 6144 x 8 B = 48 KB, so three
// CTAs of 512 threads share one SM.
constexpr int select_capacity() {
  return 6144;
}
// Launches of rows past 32,768 score columns (contexts past 256K tokens,
// whose score matrix comes from HBM) take the long-row instance: its rows
// longer than its list take one pass over their scores instead of two
// (long_rows.cuh). H100, session 25, against the two-pass kernel: 1M x 32
// decode 1.7 % faster, verify k=3 2.9-3.1 %; with the instance from 6,144
// columns on, the 128K x 32 rows (16,384 scores, in L2) were 1.3-2 %
// slower: there the sample costs more than the pass it saves. Its list
// holds twice the entries (96 KB: two CTAs still share an SM), so that
// each warp's share (768; 384 in the 1,024-thread instance, whose warps'
// chunks are half as long) holds the keys of its chunk of the row at or
// above the sampled floor even when the best scores gather in a few
// chunks. The sample is one block of 8 scores per select_sample_stride()
// (1/16 of the row).
constexpr int select_long_columns() {
  return 32768;
}
// Static shared memory of a select instance (the histogram, cub's storage,
// the carried cache work's), at most (ptxas, sm_90a: 9,200 bytes at 512
// threads, 11,312 at 1,024): the plan adds it to a list's bytes to tell
// whether the list fits the GPU, and the launcher checks the real figure.
constexpr size_t select_static_smem_bound() {
  return 12 * 1024;
}
constexpr int select_long_capacity() {
  return 12288;
}
// Whether the long-row instances' list (8 bytes an entry) fits a GPU's
// shared memory per block: not on GPUs of 99 KB (sm_86, sm_89), whose long
// rows take the two-pass instances (LayerSchedule::select_long_rows).
constexpr bool select_long_rows_fit(size_t max_smem_per_block) {
  return size_t{select_long_capacity()} * 8u + select_static_smem_bound() <= max_smem_per_block;
}
static_assert(select_long_rows_fit(227u * 1024u) && !select_long_rows_fit(99u * 1024u),
              "Hopper holds the long-row list, sm_86/89 do not");
constexpr int select_sample_stride() {
  return 128;
}
// Short rows (prefill chunks at short contexts: C <= 2048 score columns)
// take CTAs of 128 threads with a list of C entries: at 8K context a
// 512-thread CTA left three quarters of its threads without scores and
// spent ~40 % of its time at barriers (ncu: 381 us for 16,384 rows of
// 1,024 scores), and the 48 KB list held occupancy to two CTAs per SM.
// One warp per selection with the row in its registers (branch
// wip/warp-select, session 37) cut the 8K chunk's warp instructions from
// 89 M to 62 M but took 133 -> 170 us: the 128-thread CTAs stay.
constexpr int select_short_columns() {
  return 2048;
}
constexpr int select_short_threads() {
  return 128;
}
// Launches of many selections (at least select_many_ctas_per_sm() per SM:
// prefill chunks) take the 128-thread instance up to 4,096 columns too
// (32K contexts): there the CTAs' count, not one row's latency, sets the
// time. H100, 32K context (ncu, session 25): 2,048-row prefill chunk
// 440 -> 343 us (layer -1.3 % indep, -2.5 % corr); the 128-row verify
// step 39.4 -> 38.2 us; the 32-row decode step 17.0 -> 22.3 us, so few
// selections keep 512 threads.
constexpr int select_many_short_columns() {
  return 4096;
}
constexpr int select_many_ctas_per_sm() {
  return 8;
}
// Steps of few selections (sm_90+: thread-block clusters): each (row, group)
// takes select_cluster_parts() CTAs of one cluster, CTA p reading part p of
// the row's scores (cluster_rows.cuh). A one-request decode step has G = 8
// selections, so one CTA per selection left 124 of 132 SMs idle while each
// CTA streamed a whole row (ncu, H100, 1M context: 51 us for 131,072 scores
// a row). The most parts (2, 4 or 8, the portable cluster sizes) whose
// CTAs fit the SMs and whose clusters all run at once: `active[k]` is how
// many clusters of 2^k CTAs the device holds together (DeviceInfo::
// select_active_clusters, from an occupancy query), fewer than the SMs
// over 2^k where a GPC's SMs are not a multiple of it (an H100: 66 / 30 /
// 15). A cluster that waits for another's SMs doubles the selection: a
// one-request verify step at 1M in 32 clusters of 4 took 0.161 ms against
// 0.150 ms with one CTA per selection; in 32 clusters of 2 (this rule)
// 0.142 ms against 0.154. One-request decode (8 clusters of 8) 0.103 ->
// 0.093 ms, eight requests (64 clusters of 2) 0.266 -> 0.256 ms (H100).
constexpr int select_cluster_max_parts() {
  return 8;
}
constexpr int select_cluster_parts(int64_t selections, int sm_count, const int (&active)[4]) {
  if (selections <= 0) return 1;
  for (int k = 3; k >= 1; --k) {
    const int parts = 1 << k;
    if (selections * parts <= int64_t{sm_count} && selections <= int64_t{active[k]}) return parts;
  }
  return 1;
}
namespace heuristics_check {
constexpr int kH100Clusters[4] = {132, 66, 30, 15};  // measured on an H100
constexpr int kNoClusters[4] = {132, 0, 0, 0};
static_assert(select_cluster_parts(8, 132, kH100Clusters) == 8 &&
                  select_cluster_parts(16, 132, kH100Clusters) == 4 &&
                  select_cluster_parts(32, 132, kH100Clusters) == 2 &&
                  select_cluster_parts(64, 132, kH100Clusters) == 2 &&
                  select_cluster_parts(67, 132, kH100Clusters) == 1 &&
                  select_cluster_parts(8, 132, kNoClusters) == 1,
              "one to eight decode requests at G = 8 on 132 SMs");
}  // namespace heuristics_check
// Launches of fewer score columns keep one CTA per selection: a cluster
// CTA's fixed cost (its phases, each a barrier across the cluster, and a
// longer kernel's instruction fetch) outweighs the shorter part. ncu on an
// H100, one decode request at G = 8: the one-CTA kernel took 19.9 us at
// 16,384 columns (128K context) and 51.6 us at 131,072 (1M); clusters of
// eight 26.7 and 35.5 us. Linear in the columns, the two meet near 53,000;
// 65,536 (512K context) leaves a margin.
constexpr int32_t select_cluster_min_columns() {
  return 65536;
}
// A part's list (8 bytes an entry: 128 KB): parts of up to this many scores
// list every key in their one pass over the scores (each warp's chunk fits
// its share), so no sample is taken (one-request decode up to 1M tokens at
// 8 parts). Longer parts list the keys at or above a sampled floor, as the
// long-row instance does.
constexpr int select_cluster_capacity() {
  return 16384;
}
// Keys of the threshold bin each part keeps for the others (its own), and
// all parts' together, gathered by each CTA; more take radix passes over
// the parts' lists in distributed shared memory.
constexpr int select_cluster_part_candidates() {
  return 512;
}
constexpr int select_cluster_candidates() {
  return 2048;
}
// Static shared memory of the cluster instance, at most (ptxas, sm_90a:
// 28,752 bytes): the plan adds it to the list's bytes to tell whether the
// list fits the GPU.
constexpr size_t select_cluster_static_smem_bound() {
  return 36 * 1024;
}
constexpr bool select_cluster_fits(size_t max_smem_per_block) {
  return size_t{select_cluster_capacity()} * 8u + select_cluster_static_smem_bound() <=
         max_smem_per_block;
}
static_assert(select_cluster_fits(227u * 1024u), "Hopper holds a part's list");

// Launches of many selections (select_many_ctas_per_sm() per SM or more:
// prefill chunks) of rows past select_many_short_columns() up to
// select_staged_columns() scores take the staged instance (staged_rows.cuh):
// its row in shared memory, a sampled floor and one listing pass instead of
// a histogram of every score. H100, session 36, a 512-row chunk of 16,384
// columns (128K context): 233 -> 203 us and 145 M -> 120 M warp
// instructions (ncu); the 2,048-row layer at 128K 1.2-2.6 % faster. Three
// earlier versions were slower than select.cuh: every pass over the whole
// staged row (256 threads: the 128K layer +0.5 ms); the whole row binned,
// then a list in warp shares (263 us); a sampled floor with that list read
// through per-warp share lookups (285 us), which in place of the
// 128-thread instance for 32K chunks (4,096 columns) also made that layer
// 6-9 % slower, so the staged instance starts past 4,096. The merged
// version is slower there too (session 37: 338 -> 519 us per 2,048 rows,
// the layer 2.5-4.2 % slower): its floor and list pay only for rows much
// longer than K. A listing pass comparing floats instead of keys over a
// NaN-padded row (branch wip/staged-listing-rebased) ran no faster (204.0
// -> 204.7 us at 128K). Decode steps of more than sm_count x 8 / G
// requests past 32K take it too (not measured). 16,384 columns are 64 KB;
// with the 32 KB list two 512-thread CTAs share an SM.
constexpr int select_staged_threads() {
  return 512;
}
constexpr int select_staged_min_ctas() {
  return 2;
}
constexpr int32_t select_staged_columns() {
  return 16384;
}
// The list of keys at or above a floor (8 bytes an entry): a share of 256
// for each of the 16 warps, where a floor that ~1,024 of 16,384 keys reach
// puts ~64 on average.
constexpr int32_t select_staged_capacity() {
  return 4096;
}
constexpr int32_t select_staged_share_max() {
  return select_staged_capacity() / (select_staged_threads() / 32);
}
// Static shared memory of the staged instance, at most (ptxas, sm_90a; the
// launcher checks the real figure).
constexpr size_t select_staged_static_smem_bound() {
  return 12 * 1024;
}
constexpr size_t select_staged_smem(int32_t columns) {
  return static_cast<size_t>((columns + 3) / 4) * 16u +
         static_cast<size_t>(select_staged_capacity()) * 8u;
}
constexpr bool select_staged_fits(size_t max_smem_per_block) {
  return select_staged_smem(select_staged_columns()) + select_staged_static_smem_bound() <=
         max_smem_per_block;
}
static_assert(select_staged_fits(227u * 1024u) && !select_staged_fits(99u * 1024u),
              "Hopper holds a staged row and its list, sm_86/89 do not");

// The list capacity for rows of at most `columns` scores: every score may
// be kept (columns, in whole 256-entry steps) in the 128-thread instance
// (up to `short_columns`), else select_capacity() (select_long_capacity()
// in the long-row instance).
constexpr int select_list_capacity(int columns, int short_columns, bool long_rows) {
  if (long_rows) return select_long_capacity();
  if (columns > short_columns) return select_capacity();
  return columns <= 256 ? 256 : (columns + 255) / 256 * 256;
}

}  // namespace step5::cuda
