// One engine step (SPEC section 7) and its host-side plan.
//
// An engine fills a StepDesc once per step, asks its backend for a StepPlan
// once per step, calls Backend::prepare_step once (one async copy of the
// plan's metadata into the caller's workspace), and then runs every layer's
// forward with that plan. Nothing in a forward allocates or waits on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "step5/config.h"
#include "step5/tensor.h"

namespace step5 {

struct StepDesc {
  int64_t num_tokens = 0;       // n, real query rows of this step
  int64_t num_output_rows = 0;  // rows of the output buffer (CUDA-graph
                                // padding); 0 means n. Rows n.. come out 0.
  int32_t num_requests = 0;     // R

  // Views on the backend's device (host memory for the cpu backend).
  TensorView query_start_loc;  // i32 [R+1]; [0] = 0, [R] = n, non-decreasing
  TensorView seq_lens;         // i32 [R]; length after this step's tokens
  TensorView block_table;      // i32 [R, max_blocks]; stride[1] == 1
  TensorView slot_mapping;     // i64 [n]; block * B + offset of each token
  TensorView ring_index;       // i32 [R]; CSA ring entry of each request;
                               // may be absent when no CSA layer runs

  // Host copies the planner reads. May be null when the views above are in
  // host memory; then the planner reads the views. query_start_loc and
  // seq_lens are required one way or the other; the block table and slot
  // mapping are checked against each other when visible on the host.
  const int32_t* host_query_start_loc = nullptr;  // [R+1]
  const int32_t* host_seq_lens = nullptr;         // [R]; upper bounds when
                                                  // seq_lens_upper_bound
  const int32_t* host_block_table = nullptr;      // [R, block_table.stride[0]]
  const int64_t* host_slot_mapping = nullptr;     // [n]
  const int32_t* host_ring_index = nullptr;       // [R]

  // Asynchronous scheduling (speculative decoding): the host knows only an
  // upper bound of each request's length, the exact one is on the device
  // when the forward runs. With this set the planner reads host_seq_lens as
  // bounds and sizes everything for them, and the forwards read `seq_lens`
  // itself: query_len[r] <= seq_lens[r] <= host_seq_lens[r] (contract.md,
  // "Lengths known only on the device"). query_start_loc stays exact.
  bool seq_lens_upper_bound = false;

  int64_t output_rows() const { return num_output_rows > 0 ? num_output_rows : num_tokens; }
};

enum class StepKind : uint8_t {
  empty,    // no query rows: forward only zeroes the padding rows
  uniform,  // every request with rows has the same query length <= spec_tokens
            // + 1 (decode, MTP verify), requests without rows come only after
            // them (CUDA-graph padding): kernels derive all row data on device
  mixed,    // anything else (prefill chunks mixed with decode and verify)
};

const char* step_kind_name(StepKind kind);

// Rows [begin, end) of a step, in flattened query order.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Prefill rows in tiles (cuda; StepPlan::row_tiles): automatic lets the
// backend choose per layer, from how much neighbouring rows' key sets
// overlap; always and never force the choice (A/B measurements, tests).
enum class TileAttention : uint8_t { automatic, always, never };

struct PlanOptions {
  // Upper bound of the scores buffer of one scoring chunk, in bytes. Prefill
  // chunks at long context are scored in row chunks of at most this much.
  size_t max_score_bytes = size_t{256} << 20;
  // CUDA graphs: plan for contexts up to this many tokens instead of this
  // step's longest, so one workspace size serves every replay. 0 = this step.
  // At most 2^31 - 1 (positions are i32).
  int64_t max_context = 0;
  TileAttention tile_attention = TileAttention::automatic;
  // cuda, automatic tiles: the union of selected regions per row and K up
  // to which a CSA tile runs on the tile kernel rather than its rows on the
  // row kernel (the device decides tile by tile where the plan cannot).
  // 0: the backend's measured crossover for the layer's KV dtype.
  double tile_union_crossover = 0.0;
};

// How one layer runs this step, decided once by the backend's planner from
// the step's shapes and the device (SM count, shared memory); forwards only
// execute it. Engines need not read it; it is public so a plan can be logged
// and so CUDA-graph users can see that replays keep one launch shape.
enum class IndexerPath : uint8_t {
  none,         // no row of the step has more than K closed regions
  tensor_core,  // sm_90a wgmma over (request, row block) work in tiles of regions
  generic,      // fp32 FFMA: shapes the tensor-core path does not take, GPUs
                // other than Hopper, and CudaKernels::portable
};
const char* indexer_path_name(IndexerPath path);

struct LayerSchedule {
  int32_t attention_splits = 1;  // split-KV partitions per (row, KV head)
  int32_t attention_stages = 0;  // cp.async stages per warp of the attention
                                 // kernel, from the GPU's shared memory (0: default)
  IndexerPath indexer = IndexerPath::none;
  int32_t indexer_rows_per_unit = 0;  // query rows whose G*I index queries form one N tile
  int32_t indexer_tile_n = 0;         // wgmma N: index-query rows per tile (incl. padding)
  int32_t indexer_ctas = 0;           // persistent grid of the indexer
  int32_t indexer_stages = 0;         // summary tiles in each indexer CTA's pipeline
  int32_t indexer_consumers = 0;      // consumer warpgroups of each indexer CTA
  // The plan's row tiles (StepPlan::row_tiles) go to the tile attention
  // kernel, the untiled rows to the row kernel; false: every row to the row
  // kernel (a layer the tile kernel does not serve, or a step without tiles).
  bool tiled_attention = false;
  // The tiles run the sm_90a (wgmma) tile kernel (Hopper, H/G = 8)
  // instead of the mma.sync one.
  bool tile_wgmma = false;
  // CSA tiles on the wgmma kernel decided one by one on the device, after
  // the selection: a tile runs on the tile kernel when the union of its
  // rows' selected regions, per row and K, is at most this; else its rows
  // go to the row kernel. 0: every planned tile runs on the tile kernel
  // (the plan's choice: even independent selections stay under it).
  float tile_union_crossover = 0.0f;
  size_t tile_choice_offset = 0;  // its arrays' bytes into the backend scratch
  // SWA tiles on the wgmma kernel: CTAs of its persistent grid (the SM
  // count: one CTA fills an SM), which prepares a CTA's next tile while
  // the current one's epilogue runs. 0 otherwise.
  int32_t tile_ctas = 0;
  // CSA: the cache update (K/V write, summaries of the regions the step
  // closes) rides on the select launch instead of its own (one launch
  // fewer). Only when every request has at most one query row in a single
  // scoring chunk: then no row of the step scores a region the step closes.
  bool cache_update_in_select = false;
  // SWA: the K/V write rides on the attention launch instead of its own
  // (one launch fewer): the CTA that reads a row's own page writes the
  // row's K/V there first. Only when every request has at most one query
  // row and no row goes to the tile kernel: then no row reads a slot
  // another row writes.
  bool kv_write_in_attention = false;
  // CSA on Hopper: the indexer, select and row-attention launches use
  // programmatic dependent launch: a kernel's CTAs may be placed while the
  // kernel before it finishes (the select and attention ones as the
  // indexer's and select's CTAs end) and wait for it before touching memory.
  bool programmatic_launch = false;
  // CSA: score columns up to which the selection runs CTAs of 128 threads
  // (more of them to an SM) instead of 512; higher for steps of many
  // selections per SM (prefill chunks), where throughput sets the time.
  int32_t select_short_columns = 0;
  // CSA: launches past select_short_columns up to this many score columns
  // stage each row's scores in shared memory and take every pass there,
  // for steps of many selections per SM (prefill chunks); 0 = none.
  int32_t select_staged_columns = 0;
  // CSA: rows past select_short_columns run CTAs of 1,024 threads instead
  // of 512, for steps of at most one selection per SM (few decode or
  // verify rows), where one row's latency sets the time.
  bool select_wide = false;
  // CSA: launches past 32,768 score columns take the selection's long-row
  // instances (one pass over rows longer than their list), whose 96 KB
  // list fits the GPU's shared memory per block (not sm_86 / sm_89: there
  // such rows take the two-pass instances).
  bool select_long_rows = false;
  // CSA, sm_90+: steps of few selections (one to a few decode or verify
  // rows) split each row over this many CTAs of a thread-block cluster,
  // each reading a part of the row's scores, in launches of 65,536 score
  // columns or more (512K context; shorter rows are faster in one CTA);
  // 1 = one CTA per row.
  int32_t select_cluster_parts = 1;
  size_t scratch_bytes = 0;   // backend scratch this layer needs
  size_t counters_bytes = 0;  // backend counters that start and stay zero
};

// Rows of a scoring chunk and the score columns they need.
struct ScoreChunk {
  RowRange rows;
  int32_t columns = 0;  // most closed regions of any row; uniform steps: the
                        // planned capacity (graph replays may grow)
  // The chunk's entries of StepPlan::row_tiles and StepPlan::untiled_rows.
  RowRange tiles;
  RowRange untiled;
};

// What the cuda kernels found wrong in device inputs the host never saw
// (block tables, slots and sequence lengths rewritten between CUDA-graph
// replays). A kernel that meets one reads and writes nothing out of bounds:
// it skips the write, or gives the rows that would have used it NaN output
// (never another request's data), and records the step's first fault in
// the workspace's DeviceStatus, which prepare_step zeroes.
enum class DeviceFault : uint32_t {
  none = 0,
  bad_position = 1,      // a row's position < 0 (seq_lens shorter than its query rows)
  past_block_table = 2,  // a position beyond the request's block-table row
  kv_block = 3,          // a block id outside [0, num_blocks) of the KV cache
  kv_slot = 4,           // a slot_mapping entry >= num_blocks * block_size
  summary_block = 5,     // a block id outside [0, num_blocks) of the summary cache
  beyond_plan = 6,       // a row with more closed regions than the plan's score columns
                         // (a context past PlanOptions.max_context): nothing selected
  ring_entry = 7,        // a ring_index outside [0, num_ring_entries)
};
const char* device_fault_name(DeviceFault fault);

// At workspace + plan.workspace.status_offset; read it after the step.
struct DeviceStatus {
  uint32_t fault = 0;  // DeviceFault of the first fault, 0 = none
  uint32_t row = 0;    // its step row, or request for request-wide faults
  uint32_t value = 0;  // the offending value (low 32 bits)
  uint32_t count = 0;  // faults recorded this step
};

// Where each piece of scratch lives inside the caller's workspace (bytes).
struct WorkspaceLayout {
  size_t status_offset = 0;    // DeviceStatus, zeroed by prepare_step
  size_t row_meta_offset = 0;  // i32 [5 n]: request [n], position [n], untiled rows [n]
                               // (first untiled_rows.size() used), row tiles [n, 2]
  size_t scores_offset = 0;    // f32 [chunk_rows, G, score_stride]
  size_t row_max_offset = 0;   // u32 [chunk_rows, G]: order key of each row's best score
  size_t selected_offset = 0;  // i32 [chunk_rows, G, K]
  size_t counters_offset = 0;  // backend-private u32 counters: zeroed by prepare_step, every
  size_t counters_bytes = 0;   // kernel leaves them zero (e.g. split-KV arrivals)
  size_t scratch_offset = 0;   // backend-private scratch
  size_t scratch_bytes = 0;
  size_t total_bytes = 0;
};

struct StepPlan {
  StepKind kind = StepKind::empty;
  // The planner read upper bounds of seq_lens (StepDesc::seq_lens_upper_bound):
  // seq_len, row_position and max_* below are bounds, forwards take the
  // exact lengths from the device.
  bool seq_lens_upper_bound = false;
  int64_t num_tokens = 0;
  int64_t num_output_rows = 0;
  int32_t num_requests = 0;
  int32_t query_len = 0;    // uniform steps: query tokens per request
  int32_t max_seq_len = 0;  // longest request after the step
  // Longest sequence the plan serves: max_seq_len, or PlanOptions::max_context
  // when larger (the lengths a replayed uniform step may grow to).
  int32_t context_capacity = 0;
  int32_t max_closed = 0;   // most closed regions of any row
  int32_t max_closing = 0;  // most regions one request closes in this step
  int32_t max_blocks = 0;   // block_table.shape[1]
  int32_t sm_count = 0;     // multiprocessors the schedule was built for (0: cpu)

  // The largest block id, slot and ring entry the step uses, read once from
  // the host copies, and where each was read. Forwards compare them with
  // the caches' sizes in O(1). value -1: the host saw no copy.
  struct IdMax {
    int64_t value = -1;
    int64_t index = -1;  // request (block table, ring) or token (slots)
    int64_t entry = -1;  // block table column
  };
  IdMax max_block_id;
  IdMax max_slot;
  IdMax max_ring_index;

  // Per request (host).
  std::vector<int32_t> query_start;  // [R+1]
  std::vector<int32_t> seq_len;      // [R]
  // Per query row (host); also copied into the workspace by prepare_step.
  std::vector<int32_t> row_request;   // [n]
  std::vector<int32_t> row_position;  // [n]

  TileAttention tile_attention = TileAttention::automatic;  // PlanOptions::tile_attention
  double tile_union_crossover = 0.0;                        // PlanOptions::tile_union_crossover
  // Mixed steps (unless TileAttention::never): rows of requests with at
  // least 8 query rows in tiles of up to 16 consecutive rows of one request
  // (never across a scoring chunk), for the cuda tile attention kernel; the
  // other rows in order. Empty for uniform and empty steps. Copied into the
  // workspace by prepare_step (row_meta_offset).
  std::vector<int32_t> row_tiles;     // [tiles, 2]: first row, row count
  std::vector<int32_t> untiled_rows;  // rows in no tile, ascending

  // CSA scoring works in chunks of rows so the scores buffer stays bounded.
  int64_t chunk_rows = 0;    // rows per chunk (the last may be shorter)
  int32_t score_stride = 0;  // scores row stride, >= every chunk's columns
  std::vector<ScoreChunk> chunks;

  // The layers this plan was built for, and how each runs.
  std::vector<LayerConfig> layers;
  std::vector<LayerSchedule> schedules;  // [layers.size()]
  WorkspaceLayout workspace;

  size_t workspace_bytes() const { return workspace.total_bytes; }
  // The schedule of `config`; throws when `config` does not match any layer
  // the plan was built for.
  const LayerSchedule& schedule(const LayerConfig& config) const;
  // Throws when `config` does not match any layer the plan was built for.
  void check_layer(const LayerConfig& config) const { (void)schedule(config); }
};

// Caller-owned scratch on the backend's device, at least
// plan.workspace_bytes() bytes, 256-byte aligned.
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

// Limits of every step an engine will run, for sizing one workspace before
// the first step (and before capturing CUDA graphs):
// Backend::workspace_bytes(layers, limits) is at least plan.workspace_bytes()
// of every plan of those layers whose step has n <= max_tokens, R <=
// max_requests, every seq_len (or its upper bound) <= max_context, and
// PlanOptions::max_context <= max_context (same max_score_bytes).
struct StepLimits {
  int64_t max_tokens = 0;    // query rows n of one step (padding rows excluded)
  int32_t max_requests = 0;  // R, padding requests included
  int64_t max_context = 0;   // longest sequence, tokens
};

}  // namespace step5
