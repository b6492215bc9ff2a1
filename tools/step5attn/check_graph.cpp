// CUDA-graph cases of `step5attn check`: a uniform decode step of a CSA and
// of an SWA layer is captured once with cudaStreamBeginCapture and replayed
// on new tokens written into the same device buffers (new seq_lens, slots
// and inputs), each replay compared with the cpu reference.
#if defined(STEP5_HAVE_CUDA)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "step5/numerics.h"
#include "step5/testing/step_buffers.h"
#include "step5/testing/step_tensors.h"
#include "step5attn/check.h"
#include "step5attn/cuda_check.h"

namespace step5::tool::check {

namespace {

constexpr Device kGpu = Device::cuda;

struct Layout {
  int32_t blocks_per_request = 0;
  std::vector<int32_t> table;  // [R, blocks_per_request], reversed to exercise paging

  int64_t slot(int32_t r, int32_t p, int B) const {
    return int64_t{table[static_cast<size_t>(r * blocks_per_request + p / B)]} * B + p % B;
  }
  std::vector<int32_t> row(int32_t r) const {
    const auto b = table.begin() + r * blocks_per_request;
    return {b, b + blocks_per_request};
  }
};

// Device metadata of a step of requests `rs` whose new rows start at
// start[i] and end at lens[i].
sim::StepHost step_host(const Layout& layout, const LayerConfig& c, const std::vector<int32_t>& rs,
                        const std::vector<int32_t>& start, const std::vector<int32_t>& lens) {
  sim::StepHost h;
  h.max_blocks = layout.blocks_per_request;
  h.query_start_loc.push_back(0);
  for (size_t i = 0; i < rs.size(); ++i) {
    h.query_start_loc.push_back(h.query_start_loc.back() + lens[i] - start[i]);
    h.seq_lens.push_back(lens[i]);
    h.ring_index.push_back(rs[i]);
    const std::vector<int32_t> row = layout.row(rs[i]);
    h.block_table.insert(h.block_table.end(), row.begin(), row.end());
    for (int32_t p = start[i]; p < lens[i]; ++p)
      h.slot_mapping.push_back(layout.slot(rs[i], p, c.block_size));
  }
  return h;
}

// Dequantized summaries [R, max_closed, Di] read back from the cuda cache,
// in the layout sim::StepOutput uses.
void read_summaries(const LayerConfig& c, const LayerCache& views, const sim::DeviceBuffer& cache,
                    const Layout& layout, const std::vector<int32_t>& lens, int32_t max_closed,
                    sim::StepOutput& out) {
  const std::vector<uint8_t> bytes = cache.to_vector<uint8_t>(cache.bytes());
  const auto base = static_cast<size_t>(static_cast<const char*>(views.summaries.data) -
                                        static_cast<const char*>(cache.data()));
  const auto di = static_cast<size_t>(c.index_dim);
  out.max_closed = max_closed;
  out.summary.assign(lens.size() * static_cast<size_t>(max_closed) * di, 0.0f);
  for (size_t r = 0; r < lens.size(); ++r) {
    out.closed.push_back(lens[r] / 8);
    for (int32_t j = 0; j < lens[r] / 8; ++j) {
      const int32_t block = layout.table[r * static_cast<size_t>(layout.blocks_per_request) +
                                         static_cast<size_t>(8 * j / c.block_size)];
      const size_t at =
          base + static_cast<size_t>(block * views.summaries.block_stride +
                                     (j % (c.block_size / 8)) * views.summaries.region_stride);
      float* dst =
          out.summary.data() + (r * static_cast<size_t>(max_closed) + static_cast<size_t>(j)) * di;
      for (size_t d = 0; d < di; ++d) {
        if (c.summary_dtype == DType::fp8_e4m3) {
          dst[d] = fp8_e4m3_to_float(bytes[at + d]);
        } else {
          uint16_t b;
          std::memcpy(&b, &bytes[at + 2 * d], 2);
          dst[d] = bf16_to_float(b);
        }
      }
    }
  }
}

// indexer_scores and select_regions on a mixed step (requests 0 and 2 with
// 1 and 3 rows at their current ends): rows found by searching
// query_start_loc on the device, judged against the oracle.
std::string check_mixed_ops(Backend& cuda, const sim::LayerSession& ref, const LayerConfig& c,
                            const Layout& layout, const LayerCache& views,
                            const std::vector<int32_t>& lens, std::mt19937_64& rng) {
  const std::vector<int32_t> rs{0, 2}, lengths{lens[0], lens[2]};
  const std::vector<int32_t> starts{lens[0] - 1, lens[2] - 3};
  const sim::StepInput in = sim::random_step(c, rng, rs, starts, {1, 3}, false);
  sim::StepBuffers step(kGpu, step_host(layout, c, rs, starts, lengths), 0);
  const StepPlan plan = cuda.plan(step.desc, {c});
  if (plan.kind != StepKind::mixed) return "mixed ops: expected a mixed plan";
  const int64_t n = 4, G = c.num_kv_heads, I = c.index_heads, Di = c.index_dim;
  sim::InputTensor iq(kGpu, "index_query", in.index_query, static_cast<size_t>(n * G * I * Di),
                      {n, G, I, Di});
  sim::InputTensor iw(kGpu, "index_weight", in.index_weight, static_cast<size_t>(n * G * I),
                      {n, G, I});
  OpsState ops;
  ops.cuda = &cuda;
  ops.ref = &ref;
  ops.desc = &step.desc;
  ops.plan = &plan;
  ops.cache = &views;
  ops.row_request = {0, 2, 2, 2};
  ops.row_position = {lens[0] - 1, lens[2] - 3, lens[2] - 2, lens[2] - 1};
  ops.index_query = iq.view;
  ops.index_weight = iw.view;
  ops.index_query_host = in.index_query;
  ops.index_weight_host = in.index_weight;
  const std::string why = check_single_ops(ops);
  return why.empty() ? "" : concat("mixed step: ", why);
}

// `live` (optional) gives the live requests of each replay: the rest are
// padded away as vLLM pads a captured batch (no rows, length 0, slot -1),
// and their output rows must come out zero. Empty: every request, and the
// single operations are checked after the replays.
void run_graph_case(Backend& cpu, Backend& cuda, const LayerConfig& c, const std::string& name,
                    Tally& tally, const std::vector<int32_t>& live = {}) {
  const bool is_csa = c.kind == LayerKind::csa;
  const std::vector<int32_t> contexts{700, 1, 1500, 64};
  const int replays = 3;
  const auto R = static_cast<int32_t>(contexts.size());
  const int64_t capacity = 1500 + replays + 64;
  const int64_t padding = 2;

  sim::SessionOptions opt;
  opt.max_requests = R;
  opt.max_context = capacity;
  sim::LayerSession ref(cpu, c, opt);

  Layout layout;
  layout.blocks_per_request = static_cast<int32_t>((capacity + c.block_size - 1) / c.block_size);
  const int64_t num_blocks = int64_t{R} * layout.blocks_per_request;
  for (int64_t b = 0; b < num_blocks; ++b)
    layout.table.push_back(static_cast<int32_t>(num_blocks - 1 - b));
  const auto block_stride = static_cast<int64_t>(cache_bytes_per_block(c));
  sim::DeviceBuffer cache(kGpu, static_cast<size_t>(block_stride * num_blocks));
  sim::DeviceBuffer ring(kGpu, is_csa ? ring_entry_bytes(c) * static_cast<size_t>(R) : 0);
  cache.fill(0x5a);
  ring.fill(0x5a);
  const LayerCache views =
      packed_layer_cache(c, cache.data(), num_blocks, block_stride, ring.data(), R, kGpu);

  // Histories through the single operations, one prefill per request.
  std::mt19937_64 rng(5);
  for (int32_t r = 0; r < R; ++r) {
    const int32_t len = contexts[static_cast<size_t>(r)];
    const HistoryRows h = random_history(c, rng, len);
    ref.write_history(r, len, h.key.data(), h.value.data(), is_csa ? h.index_key.data() : nullptr,
                      is_csa ? h.index_z.data() : nullptr);
    sim::StepBuffers step(kGpu, step_host(layout, c, {r}, {0}, {len}), 0);
    const StepPlan plan = cuda.plan(step.desc, {c});
    const int64_t G = c.num_kv_heads, D = c.head_size;
    const auto rows = static_cast<size_t>(len);
    sim::InputTensor k(kGpu, "key", h.key, rows * static_cast<size_t>(G * D), {len, G, D});
    sim::InputTensor v(kGpu, "value", h.value, rows * static_cast<size_t>(G * D), {len, G, D});
    cuda.write_kv(c, step.desc, plan, k.view, v.view, views.kv, nullptr);
    if (is_csa) {
      sim::InputTensor ik(kGpu, "index_key", h.index_key, rows * static_cast<size_t>(c.index_dim),
                          {len, c.index_dim});
      sim::InputTensor iz(kGpu, "index_z", h.index_z, rows, {len});
      cuda.update_summaries(c, step.desc, plan, ik.view, iz.view, views, nullptr);
    }
    sim::synchronize(kGpu);
  }

  // The decode step to capture: fixed device buffers, refilled per replay.
  std::vector<int32_t> requests(static_cast<size_t>(R)), lens = contexts;
  for (int32_t r = 0; r < R; ++r) requests[static_cast<size_t>(r)] = r;
  std::vector<int32_t> next = lens;
  for (auto& x : next) ++x;
  sim::StepInput in = sim::random_step(c, rng, requests, lens,
                                       std::vector<int32_t>(static_cast<size_t>(R), 1), true);
  sim::StepBuffers step(kGpu, step_host(layout, c, requests, lens, next), R + padding);
  const int64_t n = R, H = c.num_heads, G = c.num_kv_heads, D = c.head_size;
  const auto un = static_cast<size_t>(n);
  sim::StepTensors dev(kGpu, c, in);
  const size_t out_elems = static_cast<size_t>((n + padding) * H * D);
  sim::DeviceBuffer output(kGpu, out_elems * 2);
  output.fill(0xff);
  const size_t sel_elems = is_csa ? un * static_cast<size_t>(G * c.topk) : 0;
  sim::DeviceBuffer selected(kGpu, sel_elems * 4);
  LayerOutputs outs;
  outs.output = TensorView::contiguous(output.data(), DType::bf16, {n + padding, H, D}, kGpu);
  if (is_csa)
    outs.selected = TensorView::contiguous(selected.data(), DType::i32, {n, G, c.topk}, kGpu);

  PlanOptions plan_options;
  plan_options.max_context = capacity;
  const StepPlan plan = cuda.plan(step.desc, {c}, plan_options);
  if (plan.kind != StepKind::uniform) {
    throw Error(ErrorCode::invalid_argument,
                concat("graph case: expected a uniform step, got ", step_kind_name(plan.kind)));
  }
  sim::DeviceBuffer workspace(kGpu, plan.workspace_bytes());
  const Workspace ws{workspace.data(), plan.workspace_bytes()};
  cudaStream_t stream = nullptr;
  STEP5_TOOL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda.prepare_step(plan, ws, stream);
  STEP5_TOOL_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    if (is_csa) {
      cuda.forward_csa(c, step.desc, plan, dev.csa(), views, outs, ws, stream);
    } else {
      cuda.forward_swa(c, step.desc, plan, dev.swa(), views.kv, outs, ws, stream);
    }
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream, &broken);
    if (broken != nullptr) cudaGraphDestroy(broken);
    cudaStreamDestroy(stream);
    throw;
  }
  cudaGraph_t graph = nullptr;
  STEP5_TOOL_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  STEP5_TOOL_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  std::string failure;
  sim::StepOutput last;
  for (int i = 0; i < replays && failure.empty(); ++i) {
    const int32_t L = live.empty() ? R : live[static_cast<size_t>(i)];
    const std::vector<int32_t> alive(requests.begin(), requests.begin() + L);
    const std::vector<int32_t> alive_lens(lens.begin(), lens.begin() + L);
    if (i > 0 || L < R) {
      // New tokens for the same buffers: lengths, slots and inputs change;
      // requests past L are padding (no rows, length 0, slot -1).
      in = sim::random_step(c, rng, alive, alive_lens,
                            std::vector<int32_t>(static_cast<size_t>(L), 1), true);
      const std::vector<int32_t> alive_next(next.begin(), next.begin() + L);
      sim::StepHost h = step_host(layout, c, alive, alive_lens, alive_next);
      for (int32_t r = L; r < R; ++r) {
        h.query_start_loc.push_back(h.query_start_loc.back());
        h.seq_lens.push_back(0);
        h.slot_mapping.push_back(-1);
      }
      step.query_start_loc.upload(h.query_start_loc.data(), h.query_start_loc.size() * 4);
      step.seq_lens.upload(h.seq_lens.data(), h.seq_lens.size() * 4);
      step.slot_mapping.upload(h.slot_mapping.data(), h.slot_mapping.size() * 8);
      dev.upload(in);
    }
    const sim::StepOutput want = ref.run(in);
    STEP5_TOOL_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    STEP5_TOOL_CUDA_CHECK(cudaStreamSynchronize(stream));
    sim::StepOutput got;
    std::vector<uint16_t> all = output.to_vector<uint16_t>(out_elems);
    const auto live_elems = static_cast<size_t>(L) * static_cast<size_t>(H * D);
    // Rows of padding requests and padding rows: zeros.
    got.padding_rows = padding + (R - L);
    got.padding_zero = std::all_of(all.begin() + static_cast<std::ptrdiff_t>(live_elems), all.end(),
                                   [](uint16_t b) { return b == 0; });
    all.resize(live_elems);
    got.output = std::move(all);
    if (is_csa) {
      got.selected =
          selected.to_vector<int32_t>(static_cast<size_t>(L) * static_cast<size_t>(G * c.topk));
      const std::vector<int32_t> alive_next(next.begin(), next.begin() + L);
      read_summaries(c, views, cache, layout, alive_next, want.max_closed, got);
    }
    const std::string why = compare_step(ref, in, got, want, sim::default_tolerance(c));
    if (!why.empty()) failure = concat("replay ", i, " (", L, " of ", R, " requests live): ", why);
    for (int32_t r = 0; r < L; ++r) {
      lens[static_cast<size_t>(r)] = next[static_cast<size_t>(r)];
      ++next[static_cast<size_t>(r)];
    }
    last = std::move(got);
  }
  if (!live.empty()) {
    // Padding changed the step; the single operations need the full one.
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    if (failure.empty()) {
      tally.pass();
    } else {
      tally.fail(name, failure);
    }
    return;
  }
  if (failure.empty()) {
    // The single operations over the last replay's step (uniform rows).
    OpsState ops;
    ops.cuda = &cuda;
    ops.ref = &ref;
    ops.desc = &step.desc;
    ops.plan = &plan;
    ops.cache = &views;
    ops.row_request = requests;
    for (int32_t len : lens) ops.row_position.push_back(len - 1);
    ops.query = dev.query.view;
    ops.gate = dev.gate.view;
    ops.index_query = dev.index_query.view;
    ops.index_weight = dev.index_weight.view;
    ops.index_query_host = in.index_query;
    ops.index_weight_host = in.index_weight;
    ops.forward = &last;
    failure = check_single_ops(ops);
    if (failure.empty() && is_csa)
      failure = check_mixed_ops(cuda, ref, c, layout, views, lens, rng);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  if (failure.empty()) {
    tally.pass();
  } else {
    tally.fail(name, failure);
  }
}

}  // namespace

void run_graph_cases(Backend& cpu, Backend& cuda, Tally& tally) {
  LayerConfig c;
  c.topk = 64;
  try {
    run_graph_case(cpu, cuda, c, "cuda graph csa decode G8 H64 D192 K64 + single ops", tally);
  } catch (const std::exception& e) {
    tally.fail("cuda graph csa decode", concat("threw: ", e.what()));
  }
  c.kind = LayerKind::swa;
  c.window = 512;
  try {
    run_graph_case(cpu, cuda, c, "cuda graph swa decode G8 H64 D192 W512 + single ops", tally);
  } catch (const std::exception& e) {
    tally.fail("cuda graph swa decode", concat("threw: ", e.what()));
  }
}

void run_graph_padding_cases(Backend& cpu, Backend& cuda, Tally& tally) {
  // Replays with 4, then 3, then 2 live requests of the 4 captured.
  const std::vector<int32_t> live{4, 3, 2};
  LayerConfig c;
  c.topk = 64;
  try {
    run_graph_case(cpu, cuda, c, "cuda graph csa decode, padding requests (4, 3, 2 live of 4)",
                   tally, live);
  } catch (const std::exception& e) {
    tally.fail("cuda graph csa decode, padding requests", concat("threw: ", e.what()));
  }
  c.kind = LayerKind::swa;
  c.window = 512;
  try {
    run_graph_case(cpu, cuda, c, "cuda graph swa decode, padding requests (4, 3, 2 live of 4)",
                   tally, live);
  } catch (const std::exception& e) {
    tally.fail("cuda graph swa decode, padding requests", concat("threw: ", e.what()));
  }
}

}  // namespace step5::tool::check
#endif
