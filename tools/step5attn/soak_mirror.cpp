// The cpu backend as the cuda run's reference (soak_reference.h).
#include <algorithm>
#include <cstring>
#include <sstream>

#include "step5/numerics.h"
#include "step5/testing/oracle.h"
#include "step5/testing/step_buffers.h"
#include "step5attn/soak_reference.h"

namespace step5::tool::soak {

namespace {

TensorView row_view(const void* data, DType dtype, std::initializer_list<int64_t> shape) {
  // The views are only read; the API takes non-const pointers.
  return TensorView::contiguous(const_cast<void*>(data), dtype, shape);
}

class CpuMirror final : public Reference {
 public:
  CpuMirror(const std::vector<LayerConfig>& layers, int64_t num_blocks, int32_t ring_entries,
            const StepLimits& limits)
      : backend_(make_backend(BackendKind::cpu)),
        engine_(*backend_, layers, num_blocks, ring_entries, limits) {}

  std::string name() const override { return "cpu backend (mirrored cache writes)"; }

  void record(const ScheduledStep& step) override { engine_.write_caches(step); }
  void forget(int64_t) override {}

  RowsCheck check_rows(const ScheduledStep& step, size_t layer, const std::vector<int64_t>& rows,
                       const LayerResult& device) override {
    const LayerConfig& c = engine_.layers()[layer];
    RowsCheck check;
    OutputDiff diff;
    for (const int64_t t : rows) {
      if (!check_row(step, layer, t, device, diff, check)) break;
      ++check.rows;
    }
    diff.finish(check, c, check.rows);
    return check;
  }

  CacheCompare compare(const Engine& device, const std::vector<Request>& live) override {
    CacheCompare result;
    std::vector<uint8_t> got, want;
    for (size_t l = 0; l < engine_.layers().size(); ++l) {
      const LayerConfig& c = engine_.layers()[l];
      const LayerCache& view = engine_.cache(l);
      const int64_t B = c.block_size;
      const size_t kv_bytes = static_cast<size_t>(2 * c.head_size) * dtype_size(c.kv_dtype);
      const size_t summary_offset = kv_bytes_per_block(c);
      const size_t summary_bytes = static_cast<size_t>(c.index_dim) * dtype_size(c.summary_dtype);
      for (const Request& r : live) {
        const int64_t closed = r.length / kRegionSize;
        for (int64_t b = 0; b * B < r.length; ++b) {
          const int32_t block = r.blocks[static_cast<size_t>(b)];
          device.read_block(l, block, got);
          engine_.read_block(l, block, want);
          const int64_t tokens = std::min(B, r.length - b * B);
          for (int g = 0; g < c.num_kv_heads; ++g) {
            for (int64_t o = 0; o < tokens; ++o) {
              const size_t at =
                  static_cast<size_t>(g * view.kv.head_stride + o * view.kv.token_stride);
              ++result.kv_rows;
              if (std::memcmp(got.data() + at, want.data() + at, kv_bytes) != 0) {
                note(result, result.kv_mismatches, c, r, "K/V at position ", b * B + o, g);
              }
            }
          }
          if (c.kind != LayerKind::csa) continue;
          for (int64_t i = 0; i < B / kRegionSize; ++i) {
            const int64_t region = b * (B / kRegionSize) + i;
            if (region >= closed) break;
            const size_t at =
                summary_offset + static_cast<size_t>(i * view.summaries.region_stride);
            ++result.summaries;
            if (std::memcmp(got.data() + at, want.data() + at, summary_bytes) != 0) {
              note(result, result.summary_mismatches, c, r, "summary of region ", region, -1);
            }
          }
        }
      }
    }
    return result;
  }

 private:
  static void note(CacheCompare& result, int64_t& counter, const LayerConfig& c, const Request& r,
                   const char* what, int64_t where, int group) {
    if (counter++ == 0 && result.first_mismatch.empty()) {
      std::ostringstream s;
      s << layer_kind_name(c.kind) << " request " << r.serial << (r.is_long ? " (long)" : "")
        << ": " << what << where;
      if (group >= 0) s << " KV head " << group;
      s << " differs from the cpu backend's";
      result.first_mismatch = s.str();
    }
  }

  // One row as a step of its own: a request of one query row at the row's
  // position over the same block table (rows are independent and causal, so
  // it reads exactly what the row read in its step).
  bool check_row(const ScheduledStep& step, size_t layer, int64_t t, const LayerResult& device,
                 OutputDiff& diff, RowsCheck& check) {
    const LayerConfig& c = engine_.layers()[layer];
    const sim::StepInput& in = step.inputs[layer];
    const RowOrigin origin = row_origin(step, t);
    const auto m = origin.request;
    sim::StepHost probe;
    probe.max_blocks = step.host.max_blocks;
    probe.query_start_loc = {0, 1};
    probe.seq_lens = {static_cast<int32_t>(origin.position + 1)};
    probe.ring_index = {step.host.ring_index[m]};
    probe.slot_mapping = {step.host.slot_mapping[static_cast<size_t>(t)]};
    const auto width = static_cast<size_t>(probe.max_blocks);
    probe.block_table.assign(
        step.host.block_table.begin() + static_cast<std::ptrdiff_t>(m * width),
        step.host.block_table.begin() + static_cast<std::ptrdiff_t>((m + 1) * width));
    sim::StepBuffers buffers(Device::host, std::move(probe), 0);
    const StepPlan plan = backend_->plan(buffers.desc, {c});
    sim::DeviceBuffer workspace(Device::host, plan.workspace_bytes());
    backend_->prepare_step(plan, {workspace.data(), plan.workspace_bytes()}, nullptr);

    const int H = c.num_heads, G = c.num_kv_heads, D = c.head_size, K = c.topk;
    const auto row = static_cast<size_t>(t);
    const size_t hd = static_cast<size_t>(H) * static_cast<size_t>(D);
    const TensorView query = row_view(in.query.data() + row * hd, DType::bf16, {1, H, D});
    const TensorView gate =
        row_view(in.gate.data() + row * static_cast<size_t>(H), DType::bf16, {1, H});
    std::vector<uint16_t> out(hd);
    const TensorView output = TensorView::contiguous(out.data(), DType::bf16, {1, H, D});
    const LayerCache& cache = engine_.cache(layer);
    const RowRange one{0, 1};
    if (c.kind == LayerKind::swa) {
      backend_->window_attention(c, buffers.desc, plan, query, gate, cache.kv, output, nullptr);
    } else {
      const int I = c.index_heads, Di = c.index_dim;
      const size_t gi = static_cast<size_t>(G) * static_cast<size_t>(I);
      const int64_t closed = origin.position / kRegionSize;
      std::vector<float> scores;
      TensorView scores_view;
      if (closed > K) {
        scores.resize(static_cast<size_t>(G * closed));
        scores_view = TensorView::contiguous(scores.data(), DType::f32, {1, G, closed});
        backend_->indexer_scores(
            c, buffers.desc, plan, one,
            row_view(in.index_query.data() + row * gi * static_cast<size_t>(Di), DType::bf16,
                     {1, G, I, Di}),
            row_view(in.index_weight.data() + row * gi, DType::f32, {1, G, I}), cache.summaries,
            scores_view, nullptr);
      }
      std::vector<int32_t> mine(static_cast<size_t>(G * K));
      backend_->select_regions(c, buffers.desc, plan, one, scores_view,
                               TensorView::contiguous(mine.data(), DType::i32, {1, G, K}), nullptr);
      const int32_t* theirs = device.selected.data() + row * static_cast<size_t>(G * K);
      bool differs = false;
      for (int g = 0; g < G; ++g) {
        std::vector<int32_t> sel, want;
        std::string why, unused;
        const auto off = static_cast<size_t>(g * K);
        sim::parse_selection(mine.data() + off, K, want, unused);
        if (sim::parse_selection(theirs + off, K, sel, why) && sel != want) {
          const std::vector<double> group_scores(
              scores.begin() + static_cast<std::ptrdiff_t>(g * closed),
              scores.begin() + static_cast<std::ptrdiff_t>((g + 1) * closed));
          if (closed <= K || !oracle::selection_acceptable(group_scores, sel, K,
                                                           sim::default_tolerance(c).score)) {
            why = "not a top-" + std::to_string(K) + " of " + std::to_string(closed) +
                  " closed regions by the cpu backend's scores";
          }
        }
        if (!why.empty()) {
          fail(check, c, step, t, origin, "group " + std::to_string(g) + " selection " + why);
          return false;
        }
        differs = differs || sel != want;
      }
      check.selection_differs += differs ? 1 : 0;
      // Attention with the device's selection: near-tie selections are
      // accepted above, the attention over them is checked here.
      backend_->sparse_attention(c, buffers.desc, plan, one, query,
                                 row_view(theirs, DType::i32, {1, G, K}), gate, cache.kv, output,
                                 nullptr);
    }
    std::vector<double> want(hd);
    for (size_t e = 0; e < hd; ++e) want[e] = bf16_to_float(out[e]);
    diff.add(device.output.data() + row * hd, want.data(), hd);
    return true;
  }

  static void fail(RowsCheck& check, const LayerConfig& c, const ScheduledStep& step, int64_t t,
                   const RowOrigin& origin, const std::string& why) {
    check.ok = false;
    if (check.message.empty()) {
      check.message = std::string(layer_kind_name(c.kind)) + " row " + std::to_string(t) +
                      " (request " + std::to_string(step.serial[origin.request]) + ", position " +
                      std::to_string(origin.position) + "): " + why;
    }
  }

  std::unique_ptr<Backend> backend_;
  Engine engine_;
};

}  // namespace

std::unique_ptr<Reference> make_cpu_mirror(const std::vector<LayerConfig>& layers,
                                           int64_t num_blocks, int32_t ring_entries,
                                           const StepLimits& limits) {
  return std::make_unique<CpuMirror>(layers, num_blocks, ring_entries, limits);
}

}  // namespace step5::tool::soak
