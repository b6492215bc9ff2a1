#include "step5/testing/multi_layer.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "core/check.h"
#include "step5/testing/device_memory.h"
#include "step5/testing/sim.h"
#include "step5/testing/step_buffers.h"
#include "step5/testing/step_tensors.h"

namespace step5::sim {

namespace {

struct Schedule {
  std::vector<int32_t> start, count;  // per request
};

// Two requests: prefill chunks, a mixed step, then decodes.
std::vector<Schedule> schedule() {
  return {{{0, 0}, {48, 24}},
          {{48, 24}, {40, 1}},
          {{88, 25}, {1, 30}},
          {{89, 55}, {1, 1}},
          {{90, 56}, {1, 1}}};
}

constexpr int32_t kRequests = 2;
constexpr int32_t kMaxContext = 128;

}  // namespace

std::vector<LayerConfig> two_layer_model(int block_size, DType kv_dtype) {
  LayerConfig csa;
  csa.kind = LayerKind::csa;
  csa.num_heads = 16;
  csa.num_kv_heads = 2;
  csa.head_size = 64;
  csa.block_size = block_size;
  csa.kv_dtype = kv_dtype;
  csa.index_heads = 2;
  csa.index_dim = 64;
  csa.topk = 4;
  LayerConfig swa = csa;
  swa.kind = LayerKind::swa;
  swa.num_heads = 8;
  swa.num_kv_heads = 1;
  swa.head_size = 128;
  swa.window = 40;
  return {csa, swa};
}

std::vector<std::vector<uint16_t>> run_layers(Backend& backend,
                                              const std::vector<LayerConfig>& layers,
                                              const MultiLayerOptions& options) {
  const Device device = backend.device();
  const int B = layers.front().block_size;
  const int32_t per_request = (kMaxContext + B - 1) / B;
  const int64_t num_blocks = int64_t{kRequests} * per_request + 3;
  std::mt19937_64 rng(options.seed);
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);

  // The caches: one BLNHC buffer, or one packed buffer per layer.
  const InterleavedBlocks blocks = interleaved_blocks(layers);
  std::vector<DeviceBuffer> storage, rings;
  std::vector<LayerCache> caches;
  if (options.interleaved) {
    storage.emplace_back(device, static_cast<size_t>(blocks.block_stride * num_blocks));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerConfig& c = layers[i];
    const auto own = static_cast<int64_t>(cache_bytes_per_block(c));
    if (!options.interleaved) storage.emplace_back(device, static_cast<size_t>(own * num_blocks));
    rings.emplace_back(device, c.kind == LayerKind::csa ? ring_entry_bytes(c) * kRequests : 1);
    rings.back().fill(0x5a);
    char* base = static_cast<char*>(storage.back().data()) +
                 (options.interleaved ? blocks.layer_offset[i] : 0);
    caches.push_back(packed_layer_cache(c, base, num_blocks,
                                        options.interleaved ? blocks.block_stride : own,
                                        rings.back().data(), kRequests, device));
  }
  for (DeviceBuffer& b : storage) b.fill(0x5a);

  std::vector<std::vector<uint16_t>> outputs;
  for (const Schedule& s : schedule()) {
    std::vector<int32_t> requests{0, 1};
    StepHost host;
    host.max_blocks = per_request;
    host.query_start_loc.push_back(0);
    for (int32_t r = 0; r < kRequests; ++r) {
      const auto i = static_cast<size_t>(r);
      const int32_t len = s.start[i] + s.count[i];
      host.query_start_loc.push_back(host.query_start_loc.back() + s.count[i]);
      host.seq_lens.push_back(len);
      host.ring_index.push_back(r);
      const auto row = ids.begin() + r * per_request;
      host.block_table.insert(host.block_table.end(), row, row + per_request);
      for (int32_t p = s.start[i]; p < len; ++p) {
        host.slot_mapping.push_back(int64_t{row[p / B]} * B + p % B);
      }
    }
    const int64_t n = host.query_start_loc.back();
    const int64_t rows = n + options.padding_rows;
    StepBuffers step(device, std::move(host), rows);
    const StepPlan plan = backend.plan(step.desc, layers);
    DeviceBuffer workspace(device, plan.workspace_bytes());
    const Workspace ws{workspace.data(), plan.workspace_bytes()};
    backend.prepare_step(plan, ws, nullptr);
    for (size_t i = 0; i < layers.size(); ++i) {
      const LayerConfig& c = layers[i];
      const StepInput in = random_step(c, rng, requests, s.start, s.count, true);
      const int64_t H = c.num_heads, D = c.head_size;
      const StepTensors t(device, c, in);
      const size_t elems = static_cast<size_t>(rows * H * D);
      DeviceBuffer out(device, elems * 2);
      out.fill(0xff);
      LayerOutputs outs;
      outs.output = TensorView::contiguous(out.data(), DType::bf16, {rows, H, D}, device);
      if (c.kind == LayerKind::csa) {
        backend.forward_csa(c, step.desc, plan, t.csa(), caches[i], outs, ws, nullptr);
      } else {
        backend.forward_swa(c, step.desc, plan, t.swa(), caches[i].kv, outs, ws, nullptr);
      }
      synchronize(device);
      outputs.push_back(out.to_vector<uint16_t>(elems));
    }
  }
  return outputs;
}

}  // namespace step5::sim
