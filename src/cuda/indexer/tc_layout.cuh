// Layouts of the tensor-core indexer: its shared memory, the order of the
// index-query columns in a tile, and the permutation of the Di dimension
// that lets each thread read its A fragments (summaries) as whole 16-byte
// vectors.
//
// Summary stages are packed rows, neither swizzled nor padded: a bulk copy
// writes a whole run of a block's rows as it lies in the cache. The A loads
// of a shared-memory phase (rows g and g + 1) then meet 2-way bank
// conflicts; on the H200 that cost less than one copy per row (128K b32
// decode: indexer 81 us with per-16-byte cp.async and swizzle, 81 us with
// per-row bulk copies into padded rows, 70 us with per-run copies).
//
// Di permutation. A dot product does not care in which order its terms are
// summed, so the k position kappa of the MMA holds element pi(kappa) of
// both operands. For thread t = lane % 4, k-step kk (16 wide) of atom
// a = kk / 4 (64 wide), s = kk % 4:
//   pi(16 kk + 2t + e)     = 64 a + 16 t + 4 s + e        (A regs 0, 1)
//   pi(16 kk + 8 + 2t + e) = 64 a + 16 t + 4 s + 2 + e    (A regs 2, 3)
// so the 16 values [64 a + 16 t, +16) of a summary row are exactly the A
// fragments of thread t for the four k-steps of atom a. The index queries
// are stored in shared memory under the same permutation.
//
// Tile columns. N = 4 x P with P = (query rows x G) padded to 8: column
// n = h * P + slot holds index head h of slot = row * G + group. Thread t
// then holds, for slot 8 jj + 2 t + e, the columns of all four heads at
// accumulator j = h * P / 8 + jj.
#pragma once

#include <cstdint>

#include "cuda/heuristics.h"

namespace step5::cuda::tc {

// wgmma M-tiles (64 regions each) per pipeline tile: two at N = 32
// (decode), so each barrier, copy and lookup serves 128 regions; one from
// N = 64 on, where two (with their A fragments, double buffered) would
// spill. Measured at 128K b32 decode (H200, the earlier kernel where one
// warpgroup did everything): 64-region tiles with five stages made the
// indexer slower (98-110 us) than 128-region tiles with two (70 us): the
// cost was per tile, not bytes in flight.
constexpr int mtiles(int tile_n) {
  return tile_n <= 32 ? 2 : 1;
}
constexpr int tile_regions(int tile_n) {
  return mtiles(tile_n) * indexer_tc_tile_regions();
}

// One request's query rows in a launch, kept in shared memory
// (IndexerSmem::requests).
struct RequestRows {
  int32_t first;     // first step row of the request inside the launch's rows
  int32_t count;     // its rows inside the launch's rows
  int32_t last_pos;  // position of the last of them
};

// Shared memory of one CTA; byte offsets from a 1024-byte aligned base.
// Each consumer warpgroup owns a block of its own (its staged index
// queries and their per-slot tables), consumer_stride bytes apart, so the
// consumers stage different blocks of rows without waiting for each other;
// the summary stages, their barriers and the work table are shared. Sizes
// depend on N, Di, R, the consumer count and the stage count at run time,
// so this is a layout computed once per launch rather than a struct of
// arrays. Offsets of per-consumer arrays are those of consumer 0.
struct IndexerSmem {
  uint32_t query;            // B operand: [Di/64 atoms][N rows][128 B], 1024-aligned atoms
  uint32_t weight;           // f32 [4 heads][P slots]: index_weight, 0 for padding
  uint32_t qscale;           // f32 [4 heads][P slots]: inverse scale of each f16 query row
  uint32_t closed;           // i32 [P]: closed regions of each slot's row, 0 = not scored
  uint32_t out_row;          // i64 [P]: element offset of each slot's scores row
  uint32_t row_max;          // u32 [P]: best order key of each slot in this block
  uint32_t max_index;        // i32 [P]: each slot's entry of IndexerParams::row_max
  uint32_t exponent;         // i32 [N]: largest bf16 exponent of each query row
  uint32_t source;           // i64 [P]: element offset of each slot's index-query row, -1 padding
  uint32_t consumer_stride;  // bytes from one consumer's block to the next, 1024-aligned
  uint32_t stages;           // summary tiles: [stages][tile regions][Di * summary bytes]
  uint32_t full;             // u64 [stages]: mbarrier of each stage, complete when its tile landed
  uint32_t empty;            // u64 [stages]: mbarrier of each stage, complete when it was read
  uint32_t prefix;           // i32 [R + 1]: work tiles before request r
  uint32_t cmax;             // i32 [R]: regions the request's rows need scored
  uint32_t requests;         // RequestRows [R]: each request's rows in the launch
  uint32_t total;            // bytes from the aligned base
  uint32_t tile_bytes;
};

__host__ __device__ inline uint32_t align_to(uint32_t x, uint32_t a) {
  return (x + a - 1) / a * a;
}

__host__ __device__ inline IndexerSmem indexer_smem_layout(int tile_n, int index_dim,
                                                           int summary_bytes, int num_requests,
                                                           int consumers, int stages) {
  const uint32_t slots = static_cast<uint32_t>(tile_n / indexer_tc_heads());
  const auto regions = static_cast<uint32_t>(tile_regions(tile_n));
  IndexerSmem s{};
  s.query = 0;
  s.weight = static_cast<uint32_t>(tile_n * index_dim * 2);
  s.qscale = s.weight + static_cast<uint32_t>(indexer_tc_heads()) * slots * 4u;
  s.closed = s.qscale + static_cast<uint32_t>(indexer_tc_heads()) * slots * 4u;
  s.out_row = align_to(s.closed + slots * 4u, 8);
  s.row_max = s.out_row + slots * 8u;
  s.max_index = s.row_max + slots * 4u;
  s.exponent = s.max_index + slots * 4u;
  s.source = align_to(s.exponent + static_cast<uint32_t>(tile_n) * 4u, 8);
  s.consumer_stride = align_to(s.source + slots * 8u, 1024);
  s.tile_bytes = regions * static_cast<uint32_t>(index_dim * summary_bytes);
  s.stages = static_cast<uint32_t>(consumers) * s.consumer_stride;
  s.full = s.stages + static_cast<uint32_t>(stages) * s.tile_bytes;
  s.empty = s.full + static_cast<uint32_t>(stages) * 8u;
  s.prefix = s.empty + static_cast<uint32_t>(stages) * 8u;
  s.cmax = s.prefix + static_cast<uint32_t>(num_requests + 1) * 4u;
  s.requests = align_to(s.cmax + static_cast<uint32_t>(num_requests) * 4u, 16);
  s.total = align_to(
      s.requests + static_cast<uint32_t>(num_requests) * static_cast<uint32_t>(sizeof(RequestRows)),
      16);
  return s;
}

// Byte offset of the 16-bit pair at (row n, permuted k position kappa,
// even) inside the query operand (tile_n rows per atom).
__device__ __forceinline__ uint32_t query_offset(int tile_n, int n, int kappa) {
  const int atom = kappa / 64, in_atom = kappa % 64;
  return static_cast<uint32_t>(atom * tile_n * 128 + n * 128 + (((in_atom / 8) ^ (n % 8)) * 16) +
                               (in_atom % 8) * 2);
}

// Permuted k position of the pair of elements (d, d + 1) of the source
// rows, d even (see the permutation above).
__device__ __forceinline__ int kappa_of(int d) {
  const int atom = d / 64, r = d % 64;
  const int t = r / 16, s = (r % 16) / 4, u = d % 4;  // u is 0 or 2
  return atom * 64 + 16 * s + (u == 0 ? 2 * t : 8 + 2 * t);
}

}  // namespace step5::cuda::tc
