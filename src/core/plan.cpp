#include "core/plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/validate.h"

namespace step5 {

const char* step_kind_name(StepKind kind) {
  switch (kind) {
    case StepKind::empty: return "empty";
    case StepKind::uniform: return "uniform";
    case StepKind::mixed: return "mixed";
  }
  return "?";
}

const char* indexer_path_name(IndexerPath path) {
  switch (path) {
    case IndexerPath::none: return "none";
    case IndexerPath::tensor_core: return "tensor_core";
    case IndexerPath::generic: return "generic";
  }
  return "?";
}

const char* device_fault_name(DeviceFault fault) {
  switch (fault) {
    case DeviceFault::none: return "none";
    case DeviceFault::bad_position: return "bad_position";
    case DeviceFault::past_block_table: return "past_block_table";
    case DeviceFault::kv_block: return "kv_block";
    case DeviceFault::kv_slot: return "kv_slot";
    case DeviceFault::summary_block: return "summary_block";
    case DeviceFault::beyond_plan: return "beyond_plan";
    case DeviceFault::ring_entry: return "ring_entry";
  }
  return "?";
}

namespace {

using detail::require;
constexpr ErrorCode kBad = ErrorCode::invalid_argument;

bool same_shape(const LayerConfig& a, const LayerConfig& b) {
  return a.kind == b.kind && a.num_heads == b.num_heads && a.num_kv_heads == b.num_kv_heads &&
         a.head_size == b.head_size && a.block_size == b.block_size &&
         a.spec_tokens == b.spec_tokens && a.kv_dtype == b.kv_dtype &&
         (a.kind == LayerKind::csa ? a.index_heads == b.index_heads && a.index_dim == b.index_dim &&
                                         a.topk == b.topk && a.summary_dtype == b.summary_dtype
                                   : a.window == b.window);
}

std::string describe_view(const TensorView& v) {
  return v.present() ? detail::concat(dtype_name(v.dtype), " ", detail::shape_string(v))
                     : std::string("none");
}

// A 1-D metadata view with at least `min_len` contiguous entries. Checked
// before any host copy is read: the planner reads exactly that many.
void check_meta_vector(const TensorView& v, const char* what, DType dtype, int64_t min_len) {
  if (!v.present() || v.rank != 1 || v.dtype != dtype) {
    detail::fail_invalid(what, ": expected a ", dtype_name(dtype), " vector of at least ", min_len,
                         " entries, got ", describe_view(v));
  }
  require(v.shape[0] >= min_len, kBad, what, ": dim 0 expected >= ", min_len, ", got ", v.shape[0]);
  require(v.stride[0] == 1, kBad, what, ": stride expected 1 (contiguous), got ", v.stride[0]);
}

void check_block_table_view(const TensorView& v, int32_t R) {
  if (!v.present() || v.rank != 2 || v.dtype != DType::i32) {
    detail::fail_invalid("step.block_table: expected an i32 tensor [R, max_blocks], got ",
                         describe_view(v));
  }
  require(v.shape[0] >= R, kBad, "step.block_table: dim 0 expected >= num_requests (", R, "), got ",
          v.shape[0]);
  require(v.shape[1] >= 0 && v.shape[1] < (int64_t{1} << 31), kBad,
          "step.block_table: dim 1 expected in [0, 2^31), got ", v.shape[1]);
  require(v.stride[1] == 1, kBad, "step.block_table: stride[1] expected 1, got ", v.stride[1]);
  require(v.shape[0] <= 1 || (v.stride[0] >= v.shape[1] && v.stride[0] < (int64_t{1} << 40)), kBad,
          "step.block_table: stride[0] expected in [max_blocks (", v.shape[1], "), 2^40), got ",
          v.stride[0]);
}

// Uniform: every request with rows has the same query length q <= k + 1,
// and requests without rows (CUDA-graph padding) come only after them, so
// row t belongs to request t / q.
int32_t uniform_query_len(const StepPlan& plan, int spec_tokens) {
  int32_t q = 0;
  bool padding = false;
  for (int32_t r = 0; r < plan.num_requests; ++r) {
    const auto i = static_cast<size_t>(r);
    const int32_t len = plan.query_start[i + 1] - plan.query_start[i];
    if (len == 0) {
      padding = true;
      continue;
    }
    if (padding || (q != 0 && len != q)) return 0;
    q = len;
  }
  return q <= spec_tokens + 1 ? q : 0;
}

// Per-request lengths and per-row request / position. With
// seq_lens_upper_bound the lengths, positions and maxima are bounds.
void read_rows(const StepDesc& step, int spec_tokens, int block_size, StepPlan& plan) {
  const int32_t R = plan.num_requests;
  const int64_t n = plan.num_tokens;
  const int32_t* qsl = detail::host_query_start_loc(step);
  const int32_t* lens = detail::host_seq_lens(step);
  require(qsl != nullptr, kBad,
          "step.query_start_loc: the planner needs a host copy (host_query_start_loc, or a host "
          "view), got a device view only");
  require(R == 0 || lens != nullptr, kBad,
          "step.seq_lens: the planner needs a host copy (host_seq_lens, or a host view), got a "
          "device view only");
  plan.query_start.assign(qsl, qsl + R + 1);
  if (R > 0) plan.seq_len.assign(lens, lens + R);

  require(plan.query_start[0] == 0, kBad, "step.query_start_loc[0]: expected 0, got ",
          plan.query_start[0]);
  require(plan.query_start[static_cast<size_t>(R)] == n, kBad, "step.query_start_loc[R=", R,
          "]: expected num_tokens (", n, "), got ", plan.query_start[static_cast<size_t>(R)]);
  const int64_t capacity = int64_t{plan.max_blocks} * block_size;
  const char* what = plan.seq_lens_upper_bound ? "step.seq_lens (upper bound)" : "step.seq_lens";
  for (int32_t r = 0; r < R; ++r) {
    const auto i = static_cast<size_t>(r);
    const int64_t q = int64_t{plan.query_start[i + 1]} - plan.query_start[i];
    const int32_t len = plan.seq_len[i];
    require(q >= 0, kBad, "step.query_start_loc: expected non-decreasing, got [", r,
            "]=", plan.query_start[i], " > [", r + 1, "]=", plan.query_start[i + 1]);
    require(len >= q, kBad, what, "[", r, "]: expected >= the request's query length (", q,
            "), got ", len);
    require(len <= capacity, ErrorCode::out_of_range, what, "[", r,
            "]: the sequence is longer than its block table: expected <= max_blocks (",
            plan.max_blocks, ") * block_size (", block_size, ") = ", capacity, ", got ", len);
    plan.max_seq_len = std::max(plan.max_seq_len, len);
    // Region j closes when 8j+7 is among the request's new positions. For
    // an exact length that is a count; for a bound, ceil(q/8) holds for
    // every length the device may have.
    const int32_t start = len - static_cast<int32_t>(q);
    const int32_t closing = plan.seq_lens_upper_bound
                                ? static_cast<int32_t>((q + kRegionSize - 1) / kRegionSize)
                                : len / kRegionSize - start / kRegionSize;
    plan.max_closing = std::max(plan.max_closing, closing);
  }
  plan.query_len = n > 0 ? uniform_query_len(plan, spec_tokens) : 0;
  plan.kind = n == 0 ? StepKind::empty : plan.query_len > 0 ? StepKind::uniform : StepKind::mixed;

  plan.row_request.resize(static_cast<size_t>(n));
  plan.row_position.resize(static_cast<size_t>(n));
  for (int32_t r = 0; r < R; ++r) {
    const int32_t begin = plan.query_start[static_cast<size_t>(r)];
    const int32_t end = plan.query_start[static_cast<size_t>(r) + 1];
    const int32_t first_position = plan.seq_len[static_cast<size_t>(r)] - (end - begin);
    for (int32_t t = begin; t < end; ++t) {
      plan.row_request[static_cast<size_t>(t)] = r;
      plan.row_position[static_cast<size_t>(t)] = first_position + (t - begin);
    }
    if (end > begin) {
      plan.max_closed =
          std::max(plan.max_closed, detail::closed_regions(first_position + end - begin - 1));
    }
  }
}

// Block ids, slots and ring entries, read once from the host copies: each
// must be non-negative, slots must agree with the block table, ring entries
// must be distinct. Their maxima let every forward check the caches' sizes
// in O(1).
void read_cache_ids(const StepDesc& step, bool any_csa, int block_size, StepPlan& plan) {
  const int32_t R = plan.num_requests;
  const int64_t n = plan.num_tokens;
  const int32_t* table = detail::host_block_table(step);
  if (table != nullptr && R > 0) {
    const int64_t stride = step.block_table.stride[0];
    for (int32_t r = 0; r < R; ++r) {
      const int32_t len = plan.seq_len[static_cast<size_t>(r)];
      const int64_t used = (int64_t{len} + block_size - 1) / block_size;
      if (used <= 0) continue;
      const int32_t* row = table + r * stride;
      // A row's minimum and maximum in one branch-free pass (the compiler
      // vectorizes it: 2M ids at 1M tokens x 128 requests); the entry named
      // in an error, or holding a new maximum, is looked up only then.
      int32_t lo = std::numeric_limits<int32_t>::max();
      int32_t hi = std::numeric_limits<int32_t>::min();
      for (int64_t b = 0; b < used; ++b) {
        lo = std::min(lo, row[b]);
        hi = std::max(hi, row[b]);
      }
      if (lo < 0) {
        const int64_t b = std::find_if(row, row + used, [](int32_t id) { return id < 0; }) - row;
        detail::fail(ErrorCode::out_of_range,
                     detail::concat("step.block_table[", r, "][", b,
                                    "]: block id expected >= 0, got ", row[b]));
      }
      if (hi > plan.max_block_id.value) {
        plan.max_block_id = {hi, r, std::find(row, row + used, hi) - row};
      }
    }
  }
  const int64_t* slots = detail::host_slot_mapping(step);
  if (slots != nullptr && n > 0) {
    for (int64_t t = 0; t < n; ++t) {
      require(slots[t] >= 0, ErrorCode::out_of_range, "step.slot_mapping[", t,
              "]: slot expected >= 0, got ", slots[t]);
      if (slots[t] > plan.max_slot.value) plan.max_slot = {slots[t], t, -1};
    }
    // With upper bounds the host does not know the positions the slots are for.
    if (table != nullptr && !plan.seq_lens_upper_bound) {
      const int64_t stride = step.block_table.stride[0];
      for (int64_t t = 0; t < n; ++t) {
        const int32_t r = plan.row_request[static_cast<size_t>(t)];
        const int32_t p = plan.row_position[static_cast<size_t>(t)];
        const int64_t want =
            int64_t{table[r * stride + p / block_size]} * block_size + p % block_size;
        require(slots[t] == want, kBad, "step.slot_mapping[", t, "]: expected block_table[", r,
                "][", p / block_size, "] * ", block_size, " + ", p % block_size, " = ", want,
                " for position ", p, " of request ", r, ", got ", slots[t]);
      }
    }
  }
  const int32_t* rings = detail::host_ring_index(step);
  if (any_csa && rings != nullptr && R > 0) {
    // A request without rows in this step reads and writes no ring, so its
    // entry is not checked (padding requests may carry any value).
    std::vector<int32_t> sorted;
    for (int32_t r = 0; r < R; ++r) {
      const auto i = static_cast<size_t>(r);
      if (plan.query_start[i + 1] == plan.query_start[i]) continue;
      require(rings[r] >= 0, ErrorCode::out_of_range, "step.ring_index[", r,
              "]: expected >= 0, got ", rings[r]);
      if (rings[r] > plan.max_ring_index.value) plan.max_ring_index = {rings[r], r, -1};
      sorted.push_back(rings[r]);
    }
    // A ring entry is one request's state: two requests of one step sharing
    // an entry would read each other's open-region rows.
    std::sort(sorted.begin(), sorted.end());
    const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    require(dup == sorted.end(), kBad,
            "step.ring_index: expected distinct entries per request, got entry ",
            dup == sorted.end() ? 0 : *dup, " twice");
  }
}

// Row tiles of one chunk's rows (mixed steps): each request's rows in the
// chunk, in tiles of kTileRows when the request has at least kTileMinRows
// query rows, else listed as untiled.
void plan_tiles(StepPlan& plan, ScoreChunk& chunk) {
  chunk.tiles.begin = chunk.tiles.end = static_cast<int64_t>(plan.row_tiles.size() / 2);
  chunk.untiled.begin = chunk.untiled.end = static_cast<int64_t>(plan.untiled_rows.size());
  if (plan.kind != StepKind::mixed || plan.tile_attention == TileAttention::never) return;
  for (int64_t t = chunk.rows.begin; t < chunk.rows.end;) {
    const int32_t r = plan.row_request[static_cast<size_t>(t)];
    const int32_t q =
        plan.query_start[static_cast<size_t>(r) + 1] - plan.query_start[static_cast<size_t>(r)];
    const int64_t end =
        std::min<int64_t>(chunk.rows.end, plan.query_start[static_cast<size_t>(r) + 1]);
    if (q >= detail::kTileMinRows) {
      for (int64_t first = t; first < end; first += detail::kTileRows) {
        plan.row_tiles.push_back(static_cast<int32_t>(first));
        plan.row_tiles.push_back(
            static_cast<int32_t>(std::min<int64_t>(detail::kTileRows, end - first)));
      }
    } else {
      for (int64_t u = t; u < end; ++u) plan.untiled_rows.push_back(static_cast<int32_t>(u));
    }
    t = end;
  }
  chunk.tiles.end = static_cast<int64_t>(plan.row_tiles.size() / 2);
  chunk.untiled.end = static_cast<int64_t>(plan.untiled_rows.size());
}

// Row chunks of the scores buffer and the columns each needs.
void plan_chunks(const std::vector<LayerConfig>& layers, const PlanOptions& options,
                 StepPlan& plan) {
  int max_groups = 0;
  bool any_csa = false;
  for (const auto& layer : layers) {
    max_groups = std::max(max_groups, layer.num_kv_heads);
    any_csa = any_csa || layer.kind == LayerKind::csa;
  }
  const int64_t n = plan.num_tokens;
  int64_t planned_closed = plan.max_closed;
  if (options.max_context > 0) {
    planned_closed = std::max<int64_t>(planned_closed, options.max_context / kRegionSize);
  }
  plan.score_stride =
      any_csa && planned_closed > 0
          ? static_cast<int32_t>(detail::align_up(static_cast<size_t>(planned_closed), 4))
          : 0;
  plan.chunk_rows = std::max<int64_t>(n, 1);
  if (plan.score_stride > 0) {
    const size_t row_bytes =
        static_cast<size_t>(max_groups) * static_cast<size_t>(plan.score_stride) * 4u;
    plan.chunk_rows = std::clamp<int64_t>(static_cast<int64_t>(options.max_score_bytes / row_bytes),
                                          1, std::max<int64_t>(n, 1));
  }
  for (int64_t begin = 0; begin < n; begin += plan.chunk_rows) {
    ScoreChunk chunk;
    chunk.rows = {begin, std::min(n, begin + plan.chunk_rows)};
    if (plan.kind == StepKind::uniform) {
      // Graph replays may bring longer contexts than this step's.
      chunk.columns = plan.score_stride;
    } else {
      for (int64_t t = chunk.rows.begin; t < chunk.rows.end; ++t) {
        chunk.columns = std::max(chunk.columns,
                                 detail::closed_regions(plan.row_position[static_cast<size_t>(t)]));
      }
    }
    plan_tiles(plan, chunk);
    plan.chunks.push_back(chunk);
  }
}

// Region sizes of this plan; the layout itself is shared with the static
// bound (workspace.cpp), which is what makes the bound hold.
void lay_out_workspace(const std::vector<LayerConfig>& layers, StepPlan& plan) {
  const detail::WorkspaceShape shape = detail::workspace_shape(layers);
  const auto rows = static_cast<size_t>(plan.chunk_rows);
  detail::WorkspaceSizes sizes;
  sizes.row_meta = 5u * static_cast<size_t>(plan.num_tokens) * 4u;
  if (shape.any_csa) {
    sizes.scores = rows * shape.groups * static_cast<size_t>(plan.score_stride) * 4u;
    sizes.row_max = rows * shape.groups * 4u;
    sizes.selected = rows * shape.groups * shape.topk * 4u;
  }
  for (const LayerSchedule& s : plan.schedules) {
    sizes.counters = std::max(sizes.counters, s.counters_bytes);
    sizes.scratch = std::max(sizes.scratch, s.scratch_bytes);
  }
  plan.workspace = detail::lay_out(sizes);
}

}  // namespace

const LayerSchedule& StepPlan::schedule(const LayerConfig& config) const {
  for (size_t i = 0; i < layers.size() && i < schedules.size(); ++i) {
    if (same_shape(layers[i], config)) return schedules[i];
  }
  detail::fail_invalid("plan: layer (", describe(config),
                       ") expected one of the shapes the plan was built for (", layers.size(),
                       " layer configs), got none matching; plan the step with this layer");
}

namespace detail {

StepPlan build_plan(const StepDesc& step, const std::vector<LayerConfig>& layers,
                    const PlanOptions& options, int sm_count, const Scheduler& scheduler) {
  require(!layers.empty(), kBad, "plan: layers expected at least one layer config, got none");
  for (const auto& layer : layers) validate_config(layer);
  const int32_t R = step.num_requests;
  const int64_t n = step.num_tokens;
  require(R >= 0, kBad, "step.num_requests: expected >= 0, got ", R);
  require(n >= 0, kBad, "step.num_tokens: expected >= 0, got ", n);
  require(n < (int64_t{1} << 31), ErrorCode::unsupported, "step.num_tokens: expected < 2^31, got ",
          n);
  require(step.num_output_rows == 0 || step.num_output_rows >= n, kBad,
          "step.num_output_rows: expected 0 or >= num_tokens (", n, "), got ",
          step.num_output_rows);
  require(options.max_context >= 0 && options.max_context <= std::numeric_limits<int32_t>::max(),
          kBad, "plan options.max_context: expected 0..2^31-1 tokens, got ", options.max_context);
  require(options.max_score_bytes > 0, kBad, "plan options.max_score_bytes: expected > 0, got 0");
  require(std::isfinite(options.tile_union_crossover) && options.tile_union_crossover >= 0.0, kBad,
          "plan options.tile_union_crossover: expected a finite value >= 0, got ",
          options.tile_union_crossover);

  // One step has one slot mapping and one block table, so every layer it
  // serves shares the block size.
  int spec_tokens = 0;
  bool any_csa = false;
  const int block_size = layers.front().block_size;
  for (const auto& layer : layers) {
    spec_tokens = std::max(spec_tokens, layer.spec_tokens);
    any_csa = any_csa || layer.kind == LayerKind::csa;
    require(layer.block_size == block_size, kBad, "plan: layers expected one block_size (",
            block_size, "), got ", layer.block_size);
  }

  // The views bound every host read below, so they are checked first.
  check_meta_vector(step.query_start_loc, "step.query_start_loc", DType::i32, int64_t{R} + 1);
  if (R > 0) {
    check_meta_vector(step.seq_lens, "step.seq_lens", DType::i32, R);
    check_block_table_view(step.block_table, R);
  }
  if (n > 0) check_meta_vector(step.slot_mapping, "step.slot_mapping", DType::i64, n);
  if (any_csa && R > 0 && step.ring_index.present()) {
    check_meta_vector(step.ring_index, "step.ring_index", DType::i32, R);
  }

  StepPlan plan;
  plan.num_tokens = n;
  plan.num_output_rows = step.output_rows();
  plan.num_requests = R;
  plan.layers = layers;
  plan.sm_count = sm_count;
  plan.max_blocks = R > 0 ? static_cast<int32_t>(step.block_table.shape[1]) : 0;
  plan.seq_lens_upper_bound = step.seq_lens_upper_bound;
  plan.tile_attention = options.tile_attention;
  plan.tile_union_crossover = options.tile_union_crossover;
  read_rows(step, spec_tokens, block_size, plan);
  plan.context_capacity = std::max(plan.max_seq_len, static_cast<int32_t>(options.max_context));
  read_cache_ids(step, any_csa, block_size, plan);
  plan_chunks(layers, options, plan);
  for (const auto& layer : layers) plan.schedules.push_back(scheduler(plan, layer));
  lay_out_workspace(layers, plan);
  return plan;
}

}  // namespace detail
}  // namespace step5
