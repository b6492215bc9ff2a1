// `step5attn bench`: checks the cuda attention against the cpu backend, then
// times, on the SPEC 9 reference workloads, the attention operation alone,
// the whole layer step (one forward call, host enqueue included) and whole
// multi-layer steps captured in a CUDA graph. Every timing is the median of
// several L2-cold runs measured with CUDA events (bench_timer.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "step5/attention.h"
#include "step5/testing/sim.h"
#include "step5attn/cli.h"
#include "step5attn/commands.h"

#ifdef STEP5_HAVE_CUDA
#include "step5/testing/cuda_internals.h"
#include "step5/testing/device_memory.h"
#include "step5attn/bench_ceiling.h"
#include "step5attn/bench_check.h"
#include "step5attn/bench_graph.h"
#include "step5attn/bench_workload.h"
#include "step5attn/cuda_check.h"
#endif

namespace step5::tool {

#ifndef STEP5_HAVE_CUDA
int run_bench(int /*argc*/, char** /*argv*/) {
  print_error("bench",
              "needs the cuda backend; this build has none (configure with STEP5_CUDA=ON)");
  return kExitFailure;
}
#else
namespace {

using bench::Counts;
using bench::Result;
using bench::Shape;

LayerConfig reference_config(const Shape& s) {
  LayerConfig c;  // H=64, G=8, D=192, B=64, I=4, Di=256, K=512, W=512
  c.kind = s.kind;
  c.kv_dtype = s.kv;
  c.spec_tokens = s.query_len > 1 && s.query_len <= 4 ? s.query_len - 1 : 0;
  if (s.kv == DType::fp8_e4m3) {
    c.k_scale = 0.05f;
    c.v_scale = 0.05f;
  }
  return c;
}

template <class T>
sim::DeviceBuffer put(const std::vector<T>& host) {
  return sim::DeviceBuffer::from(Device::cuda, host);
}
TensorView dev_view(const sim::DeviceBuffer& b, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(b.data(), dtype, shape, Device::cuda);
}

// What a shape's rows say about it, for --filter.
std::string shape_label(const Shape& s) {
  std::ostringstream o;
  o << (s.kind == LayerKind::csa ? "csa " : "swa ") << dtype_name(s.kv) << " " << s.phase()
    << " ctx " << s.context / 1024 << "K b" << s.batch << " q" << s.query_len
    << (s.correlated ? " corr" : " indep");
  return o.str();
}
std::string graph_label(const bench::GraphShape& s) {
  std::ostringstream o;
  o << "graph " << (s.query_len == 1 ? "decode" : "verify") << " ctx " << s.context / 1024 << "K b"
    << s.batch << " q" << s.query_len;
  return o.str();
}

Result row_of(const Shape& s, const char* op, int64_t rows) {
  Result r;
  r.op = op;
  r.layer = s.kind == LayerKind::csa ? "csa" : "swa";
  r.kv = dtype_name(s.kv);
  r.phase = s.phase();
  r.regime = s.correlated ? "correlated" : "independent";
  r.context = s.context;
  r.batch = s.batch;
  r.query_len = s.query_len;
  r.rows = rows;
  return r;
}

void add(Result& r, const Counts& c) {
  r.bytes += c.bytes;
  r.flops += c.flops;
  r.floor_bytes += c.floor_bytes;
}

class Bench {
 public:
  Bench(Backend& gpu, size_t pool_bytes, int reps, const PlanOptions& options,
        const bench::MeasuredCopy& copy)
      : gpu_(gpu), pool_(Device::cuda, pool_bytes), reps_(reps), options_(options), copy_(copy) {
    cuda_testing::fill_cache_random(pool_.data(), pool_.bytes(), 5, nullptr);
  }
  void run(const Shape& shape);
  void run(const bench::GraphShape& shape) {
    results_.push_back(bench::run_graph_step(gpu_, pool_, timer_, shape, reps_, rng_));
    bench::print_row(results_.back(), copy_);
  }
  const std::vector<Result>& results() const { return results_; }

 private:
  Backend& gpu_;
  sim::DeviceBuffer pool_;
  int reps_;
  PlanOptions options_;  // the layer rows' plan options (--tiles, --max-score-mib)
  bench::MeasuredCopy copy_;
  bench::Timer timer_;
  std::mt19937_64 rng_{9};
  std::vector<Result> results_;
};

void Bench::run(const Shape& sh) {
  const LayerConfig c = reference_config(sh);
  const bool csa = c.kind == LayerKind::csa;
  const auto block_bytes = static_cast<int64_t>(cache_bytes_per_block(c));
  const int64_t pool_blocks = static_cast<int64_t>(pool_.bytes()) / block_bytes;
  const std::vector<int32_t> seq(static_cast<size_t>(sh.batch), static_cast<int32_t>(sh.context));
  const std::vector<int32_t> qlen(static_cast<size_t>(sh.batch), sh.query_len);
  const bench::StepHost h = bench::make_step(c, seq, qlen, pool_blocks, rng_);
  std::vector<int32_t> requests(static_cast<size_t>(sh.batch));
  std::iota(requests.begin(), requests.end(), 0);
  const std::vector<int32_t> start(requests.size(),
                                   static_cast<int32_t>(sh.context) - sh.query_len);
  const sim::StepInput in = sim::random_step(c, rng_, requests, start, qlen, true, sh.correlated);

  const int64_t n = h.num_tokens, H = c.num_heads, G = c.num_kv_heads, D = c.head_size;
  const int64_t R = h.num_requests;
  auto qsl = put(h.query_start_loc), seql = put(h.seq_lens), table = put(h.block_table);
  auto slots = put(h.slot_mapping), ring_ids = put(h.ring_index);
  auto query = put(in.query), gate = put(in.gate), key = put(in.key), value = put(in.value);
  sim::DeviceBuffer output(Device::cuda, static_cast<size_t>(n * H * D) * 2);
  StepDesc step;
  step.num_tokens = n;
  step.num_requests = h.num_requests;
  step.query_start_loc = dev_view(qsl, DType::i32, {R + 1});
  step.seq_lens = dev_view(seql, DType::i32, {R});
  step.block_table = dev_view(table, DType::i32, {R, h.max_blocks});
  step.slot_mapping = dev_view(slots, DType::i64, {n});
  step.ring_index = dev_view(ring_ids, DType::i32, {R});
  step.host_query_start_loc = h.query_start_loc.data();
  step.host_seq_lens = h.seq_lens.data();
  step.host_block_table = h.block_table.data();
  step.host_slot_mapping = h.slot_mapping.data();
  step.host_ring_index = h.ring_index.data();
  const StepPlan plan = gpu_.plan(step, {c}, options_);

  sim::DeviceBuffer ring(Device::cuda, static_cast<size_t>(R) * ring_entry_bytes(c));
  ring.fill(0);
  const LayerCache cache =
      packed_layer_cache(c, pool_.data(), pool_blocks, block_bytes, ring.data(), R, Device::cuda);
  const TensorView q = dev_view(query, DType::bf16, {n, H, D});
  const TensorView g = dev_view(gate, DType::bf16, {n, H});
  const TensorView out = dev_view(output, DType::bf16, {n, H, D});

  // The attention operation alone, on host-drawn selections.
  Result op = row_of(sh, "attention", n);
  if (csa) {
    const std::vector<int32_t> sel = bench::make_selection(c, h, sh.correlated, rng_);
    auto sel_dev = put(sel);
    const TensorView sv = dev_view(sel_dev, DType::i32, {n, G, c.topk});
    op.jaccard = bench::neighbour_jaccard(c, h, sel);
    op.union_ratio = bench::tile_union_ratio(c, plan.row_tiles, sel);
    add(op, bench::attention_counts(c, h, &sel));
    op.ms = timer_.median_ms(
        [&] {
          gpu_.sparse_attention(c, step, plan, RowRange{0, n}, q, sv, g, cache.kv, out, nullptr);
        },
        reps_);
  } else {
    add(op, bench::attention_counts(c, h, nullptr));
    op.ms = timer_.median_ms(
        [&] { gpu_.window_attention(c, step, plan, q, g, cache.kv, out, nullptr); }, reps_);
  }
  results_.push_back(op);
  bench::print_row(op, copy_);

  // The whole layer step (KV write, summaries, scores, selection, attention),
  // one forward call as an engine makes it, host enqueue included.
  sim::DeviceBuffer ws(Device::cuda, std::max<size_t>(plan.workspace_bytes(), 256));
  const Workspace w{ws.data(), ws.bytes()};
  gpu_.prepare_step(plan, w, nullptr);
  const TensorView kt = dev_view(key, DType::bf16, {n, G, D});
  const TensorView vt = dev_view(value, DType::bf16, {n, G, D});
  Result layer = row_of(sh, "layer", n);
  std::function<void()> forward;
  auto iq = put(in.index_query), iw = put(in.index_weight), ik = put(in.index_key);
  auto iz = put(in.index_z);
  sim::DeviceBuffer sel_out(Device::cuda, csa ? static_cast<size_t>(n * G * c.topk) * 4 : 4);
  const CsaInputs ci{q,
                     kt,
                     vt,
                     dev_view(iq, DType::bf16, {n, G, c.index_heads, c.index_dim}),
                     dev_view(iw, DType::f32, {n, G, c.index_heads}),
                     dev_view(ik, DType::bf16, {n, c.index_dim}),
                     dev_view(iz, DType::f32, {n}),
                     g};
  if (csa) {
    const LayerOutputs lo{out, dev_view(sel_out, DType::i32, {n, G, c.topk})};
    forward = [&, lo] { gpu_.forward_csa(c, step, plan, ci, cache, lo, w, nullptr); };
    forward();
    sim::synchronize(Device::cuda);
    const auto sel = sel_out.to_vector<int32_t>(static_cast<size_t>(n * G * c.topk));
    layer.jaccard = bench::neighbour_jaccard(c, h, sel);
    layer.union_ratio = bench::tile_union_ratio(c, plan.row_tiles, sel);
    add(layer, bench::attention_counts(c, h, &sel));
    add(layer, bench::csa_layer_extra(c, h));
  } else {
    const SwaInputs si{q, kt, vt, g};
    const LayerOutputs lo{out, TensorView{}};
    forward = [&, si, lo] { gpu_.forward_swa(c, step, plan, si, cache.kv, lo, w, nullptr); };
    add(layer, bench::attention_counts(c, h, nullptr));
    add(layer, bench::kv_write_counts(c, h));
  }
  layer.ms = timer_.median_ms(forward, reps_);
  if (sh.query_len <= 4) {
    layer.host_us = bench::host_us_per_forward(
        [&](int) { forward(); }, bench::max_launches_per_forward(plan, c.kind), nullptr);
  }
  results_.push_back(layer);
  bench::print_row(layer, copy_);
}

struct Sweep {
  std::vector<Shape> shapes;
  std::vector<bench::GraphShape> graphs;
};

Sweep sweep(bool quick) {
  Sweep s;
  const DType bf16 = DType::bf16, fp8 = DType::fp8_e4m3;
  const LayerKind csa = LayerKind::csa, swa = LayerKind::swa;
  if (quick) {
    // The rows the layer-step goals are stated on, and the contexts the
    // peers (bench/peers.py) are timed at.
    s.graphs = {{131072, 32, 1}, {32768, 32, 1}, {1048576, 32, 1}, {131072, 32, 4}};
    s.shapes = {{csa, bf16, 131072, 32, 1, false},   {csa, fp8, 131072, 32, 1, false},
                {csa, bf16, 131072, 32, 4, false},   {csa, bf16, 131072, 32, 4, true},
                {csa, bf16, 1048576, 32, 1, false},  {csa, bf16, 8192, 32, 1, false},
                {csa, bf16, 32768, 32, 1, false},    {swa, bf16, 32768, 32, 1, false},
                {swa, bf16, 1048576, 32, 1, false},  {swa, fp8, 32768, 32, 1, false},
                {csa, bf16, 1048576, 128, 4, false}, {csa, bf16, 8192, 1, 2048, false},
                {csa, bf16, 8192, 1, 2048, true},    {csa, bf16, 32768, 1, 2048, false},
                {csa, fp8, 8192, 1, 2048, false},    {swa, bf16, 8192, 1, 2048, false}};
    return s;
  }
  // Whole steps first (what engines see), then the longest contexts and the
  // batch extremes, then prefill, so a --max-seconds cut drops the least
  // telling shapes.
  for (int64_t ctx : {8192, 32768, 131072, 1048576}) s.graphs.push_back({ctx, 32, 1});
  s.graphs.push_back({131072, 32, 4});
  s.graphs.push_back({131072, 1, 1});
  for (int64_t ctx : {131072, 1048576, 32768, 8192}) {
    for (int batch : {32, 128, 1, 8}) {
      for (DType kv : {bf16, fp8}) {
        s.shapes.push_back({csa, kv, ctx, batch, 1, false});
        s.shapes.push_back({csa, kv, ctx, batch, 4, false});
        s.shapes.push_back({csa, kv, ctx, batch, 4, true});
        s.shapes.push_back({swa, kv, ctx, batch, 1, false});
        s.shapes.push_back({swa, kv, ctx, batch, 4, false});
      }
    }
  }
  for (DType kv : {bf16, fp8}) {
    for (int64_t ctx : {8192, 32768, 131072}) {
      for (int chunk : {2048, 8192}) {
        s.shapes.push_back({csa, kv, ctx, 1, chunk, false});
        s.shapes.push_back({csa, kv, ctx, 1, chunk, true});
        s.shapes.push_back({swa, kv, ctx, 1, chunk, false});
      }
    }
  }
  return s;
}

// Comma-separated substrings; a shape runs when its label contains any.
bool selected_by(const std::string& filter, const std::string& label) {
  if (filter.empty()) return true;
  std::stringstream items(filter);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (!item.empty() && label.find(item) != std::string::npos) return true;
  }
  return false;
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

}  // namespace

int run_bench(int argc, char** argv) {
  std::string json_path, max_seconds_text, max_score_text, crossover_text, filter,
      tiles_text = "auto";
  bool quick = false, check_only = false, no_check = false, portable = false;
  std::vector<std::string> positional;
  std::string error;
  if (!parse_args(argc, argv,
                  {{"quick", nullptr, &quick},
                   {"check-only", nullptr, &check_only},
                   {"no-check", nullptr, &no_check},
                   {"json", &json_path, nullptr},
                   {"filter", &filter, nullptr},
                   {"max-seconds", &max_seconds_text, nullptr},
                   {"tiles", &tiles_text, nullptr},
                   {"max-score-mib", &max_score_text, nullptr},
                   {"crossover", &crossover_text, nullptr},
                   {"portable", nullptr, &portable}},
                  positional, error) ||
      !positional.empty()) {
    print_error("bench", error.empty() ? "takes no positional arguments" : error);
    return kExitUsage;
  }
  int64_t max_seconds = 0;
  if (!max_seconds_text.empty() && !parse_int(max_seconds_text, 1, 86400, max_seconds)) {
    print_error("bench", "--max-seconds expected an integer in [1, 86400]");
    return kExitUsage;
  }
  TileAttention tiles = TileAttention::automatic;
  if (tiles_text == "always") {
    tiles = TileAttention::always;
  } else if (tiles_text == "never") {
    tiles = TileAttention::never;
  } else if (tiles_text != "auto") {
    print_error("bench", "--tiles expected auto, always or never, got \"" + tiles_text + "\"");
    return kExitUsage;
  }
  PlanOptions plan_options;
  plan_options.tile_attention = tiles;
  if (!max_score_text.empty()) {
    int64_t mib = 0;
    if (!parse_int(max_score_text, 1, 65536, mib)) {
      print_error("bench", "--max-score-mib expected an integer in [1, 65536], got \"" +
                               max_score_text + "\"");
      return kExitUsage;
    }
    plan_options.max_score_bytes = static_cast<size_t>(mib) << 20;
  }
  if (!crossover_text.empty()) {
    // A tuning knob: the per-tile choice's crossover, in union regions per
    // row and K (PlanOptions::tile_union_crossover).
    char* end = nullptr;
    const double x = std::strtod(crossover_text.c_str(), &end);
    if (end == crossover_text.c_str() || *end != '\0' || !std::isfinite(x) || x <= 0.0 ||
        x > 64.0) {
      print_error("bench",
                  "--crossover expected a number in (0, 64], got \"" + crossover_text + "\"");
      return kExitUsage;
    }
    plan_options.tile_union_crossover = x;
  }
  try {
    auto cpu = make_backend(BackendKind::cpu);
    BackendOptions options;
    options.cuda_kernels = portable ? CudaKernels::portable : CudaKernels::automatic;
    auto gpu = make_backend(BackendKind::cuda, options);
    cudaDeviceProp prop{};
    STEP5_TOOL_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::cout << "step5attn bench on " << prop.name << " (" << prop.multiProcessorCount << " SMs)"
              << (portable ? ", portable kernels" : "") << "\n";
    std::string checks;
    if (!no_check) {
      std::cout << "phase 1: cuda attention vs cpu backend\n";
      const bool ok = bench::run_attention_checks(*cpu, *gpu, std::cout, checks);
      if (!ok || check_only) {
        if (!json_path.empty()) {
          bench::write_json(json_path, prop.name, today(), checks, {}, 0,
                            bench::MeasuredCopy{std::nan(""), 0});
        }
        if (!ok) print_error("bench", "attention check failed; not timing");
        return ok ? kExitOk : kExitFailure;
      }
    }
    size_t free_bytes = 0, total_bytes = 0;
    STEP5_TOOL_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const bench::MeasuredCopy copy = bench::measure_copy_ceiling(free_bytes);
    std::cout << "device copy measured here: ";
    if (std::isfinite(copy.bytes_per_s)) {
      char tb[32];
      std::snprintf(tb, sizeof tb, "%.2f", copy.bytes_per_s / 1e12);
      std::cout << tb << " TB/s (" << (copy.buffer_bytes >> 20)
                << " MiB copies, bytes read + written)\n";
    } else {
      std::cout << "not measured\n";
    }
    std::cout << "phase 2: timings (median of " << (quick ? 5 : 7)
              << " L2-cold runs; % of 4.27 TB/s, the H200's copy; floor = unique bytes at 4.27 "
                 "TB/s, and its share of the time at the copy measured here)\n";
    const size_t pool = std::min(quick ? size_t{16} << 30 : size_t{48} << 30,
                                 free_bytes - std::min(free_bytes, size_t{16} << 30));
    Bench bench(*gpu, pool, quick ? 5 : 7, plan_options, copy);
    const auto t0 = std::chrono::steady_clock::now();
    int skipped = 0;
    auto out_of_time = [&] {
      const auto spent = std::chrono::steady_clock::now() - t0;
      return max_seconds > 0 && spent > std::chrono::seconds(max_seconds);
    };
    const Sweep sw = sweep(quick);
    for (const bench::GraphShape& s : sw.graphs) {
      if (!selected_by(filter, graph_label(s))) continue;
      if (out_of_time()) {
        ++skipped;
        continue;
      }
      bench.run(s);
    }
    for (const Shape& s : sw.shapes) {
      if (!selected_by(filter, shape_label(s))) continue;
      if (out_of_time()) {
        ++skipped;
        continue;
      }
      bench.run(s);
    }
    if (skipped > 0) std::cout << "  (" << skipped << " shapes skipped: --max-seconds)\n";
    if (!json_path.empty()) {
      bench::write_json(json_path, prop.name, today(), checks, bench.results(), skipped, copy);
    }
    return kExitOk;
  } catch (const Error& e) {
    print_error("bench", std::string(error_code_name(e.code())) + ": " + e.what());
    return kExitFailure;
  }
}
#endif

}  // namespace step5::tool
