// Built only with the cuda backend (the CPU-only build has no CUDA runtime).
#if defined(STEP5_HAVE_CUDA)
#include "step5attn/bench_graph.h"

#include <chrono>
#include <cstdio>
#include <numeric>
#include <vector>

#include "step5/testing/sim.h"
#include "step5attn/bench_timer.h"
#include "step5attn/bench_workload.h"
#include "step5attn/cuda_check.h"

namespace step5::tool::bench {

namespace {

template <class T>
sim::DeviceBuffer put(const std::vector<T>& host) {
  return sim::DeviceBuffer::from(Device::cuda, host);
}
TensorView dev_view(const sim::DeviceBuffer& b, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(b.data(), dtype, shape, Device::cuda);
}

std::vector<LayerConfig> step_layers(int query_len) {
  std::vector<LayerConfig> layers;
  for (LayerKind kind : {LayerKind::csa, LayerKind::swa}) {
    for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
      LayerConfig c;  // SPEC 2 reference values
      c.kind = kind;
      c.kv_dtype = kv;
      c.spec_tokens = query_len - 1;
      if (kv == DType::fp8_e4m3) {
        c.k_scale = 0.05f;
        c.v_scale = 0.05f;
      }
      layers.push_back(c);
    }
  }
  return layers;
}

}  // namespace

Result run_graph_step(Backend& gpu, sim::DeviceBuffer& pool, Timer& timer, const GraphShape& sh,
                      int reps, std::mt19937_64& rng) {
  const std::vector<LayerConfig> layers = step_layers(sh.query_len);
  // One block holds every layer's cache: layer i at byte offset[i].
  std::vector<int64_t> offset;
  int64_t block_stride = 0;
  for (const LayerConfig& c : layers) {
    offset.push_back(block_stride);
    block_stride += static_cast<int64_t>(cache_bytes_per_block(c));
  }
  const int64_t pool_blocks = static_cast<int64_t>(pool.bytes()) / block_stride;
  const LayerConfig& csa = layers.front();
  const std::vector<int32_t> seq(static_cast<size_t>(sh.batch), static_cast<int32_t>(sh.context));
  const std::vector<int32_t> qlen(static_cast<size_t>(sh.batch), sh.query_len);
  const StepHost h = make_step(csa, seq, qlen, pool_blocks, rng);
  std::vector<int32_t> requests(static_cast<size_t>(sh.batch));
  std::iota(requests.begin(), requests.end(), 0);
  const std::vector<int32_t> start(requests.size(),
                                   static_cast<int32_t>(sh.context) - sh.query_len);
  const sim::StepInput in = sim::random_step(csa, rng, requests, start, qlen, true, false);

  const int64_t n = h.num_tokens, R = h.num_requests;
  const int64_t H = csa.num_heads, G = csa.num_kv_heads, D = csa.head_size;
  const int64_t I = csa.index_heads, Di = csa.index_dim;
  auto qsl = put(h.query_start_loc), seql = put(h.seq_lens), table = put(h.block_table);
  auto slots = put(h.slot_mapping), ring_ids = put(h.ring_index);
  auto query = put(in.query), gate = put(in.gate), key = put(in.key), value = put(in.value);
  auto iq = put(in.index_query), iw = put(in.index_weight), ik = put(in.index_key);
  auto iz = put(in.index_z);
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
  PlanOptions options;
  options.max_context = sh.context;  // graph replays may bring longer contexts
  const StepPlan plan = gpu.plan(step, layers, options);

  std::vector<sim::DeviceBuffer> rings, outputs;
  std::vector<LayerCache> caches;
  for (size_t i = 0; i < layers.size(); ++i) {
    rings.emplace_back(Device::cuda, static_cast<size_t>(R) * ring_entry_bytes(layers[i]));
    rings.back().fill(0);
    outputs.emplace_back(Device::cuda, static_cast<size_t>(n * H * D) * 2);
    caches.push_back(packed_layer_cache(layers[i], static_cast<char*>(pool.data()) + offset[i],
                                        pool_blocks, block_stride, rings.back().data(), R,
                                        Device::cuda));
  }
  sim::DeviceBuffer ws(Device::cuda, std::max<size_t>(plan.workspace_bytes(), 256));
  const Workspace w{ws.data(), ws.bytes()};
  const TensorView q = dev_view(query, DType::bf16, {n, H, D});
  const TensorView kt = dev_view(key, DType::bf16, {n, G, D});
  const TensorView vt = dev_view(value, DType::bf16, {n, G, D});
  const TensorView g = dev_view(gate, DType::bf16, {n, H});
  const CsaInputs csa_in{q,
                         kt,
                         vt,
                         dev_view(iq, DType::bf16, {n, G, I, Di}),
                         dev_view(iw, DType::f32, {n, G, I}),
                         dev_view(ik, DType::bf16, {n, Di}),
                         dev_view(iz, DType::f32, {n}),
                         g};
  const SwaInputs swa_in{q, kt, vt, g};

  cudaStream_t stream = nullptr;
  STEP5_TOOL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  gpu.prepare_step(plan, w, stream);
  auto forward = [&](size_t i) {
    const LayerOutputs out{dev_view(outputs[i], DType::bf16, {n, H, D}), TensorView{}};
    if (layers[i].kind == LayerKind::csa) {
      gpu.forward_csa(layers[i], step, plan, csa_in, caches[i], out, w, stream);
    } else {
      gpu.forward_swa(layers[i], step, plan, swa_in, caches[i].kv, out, w, stream);
    }
  };

  // Host time of one forward call: 92 calls (a Step5 model's layers), the
  // four layer kinds in turn, none waiting for the GPU (bench_timer.h).
  for (size_t i = 0; i < layers.size(); ++i) forward(i);
  const double host_us =
      bench::host_us_per_forward([&](int i) { forward(static_cast<size_t>(i) % layers.size()); },
                                 bench::max_launches_per_forward(plan, LayerKind::csa), stream);
  // For scale: the host cost of one plain stream operation on this machine.
  const auto m0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 92; ++i) STEP5_TOOL_CUDA_CHECK(cudaMemsetAsync(ws.data(), 0, 4, stream));
  const auto m1 = std::chrono::steady_clock::now();
  STEP5_TOOL_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::printf("  (host: one 4-byte cudaMemsetAsync costs %.1f us here)\n",
              std::chrono::duration<double, std::micro>(m1 - m0).count() / 92);

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  STEP5_TOOL_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    for (size_t i = 0; i < layers.size(); ++i) forward(i);
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    throw;
  }
  STEP5_TOOL_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  STEP5_TOOL_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double ms =
      timer.median_ms([&] { STEP5_TOOL_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, reps, stream);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);

  Result r;
  r.op = "step";
  r.layer = "csa+swa";
  r.kv = "bf16+fp8_e4m3";
  r.phase = sh.query_len == 1 ? "decode" : "verify";
  r.regime = "independent";
  r.context = sh.context;
  r.batch = sh.batch;
  r.query_len = sh.query_len;
  r.rows = n;
  r.ms = ms;
  r.host_us = host_us;
  for (const LayerConfig& c : layers) {
    Counts counts = c.kind == LayerKind::csa ? csa_full_attention_counts(c, h)
                                             : attention_counts(c, h, nullptr);
    const Counts extra = c.kind == LayerKind::csa ? csa_layer_extra(c, h) : kv_write_counts(c, h);
    r.bytes += counts.bytes + extra.bytes;
    r.flops += counts.flops + extra.flops;
    r.floor_bytes += counts.floor_bytes + extra.floor_bytes;
  }
  return r;
}

}  // namespace step5::tool::bench
#endif
