#include "step5attn/soak_engine.h"

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

#include "step5/testing/step_buffers.h"

namespace step5::tool::soak {

namespace {

// The cache and rings start as large finite garbage (bf16 0x5a5a ~ 1.5e16,
// fp8 0x5a = 20), as sim::LayerSession does: a read of a slot never written
// dominates the result instead of hiding as a zero.
constexpr uint8_t kCacheGarbage = 0x5a;
// Outputs start as NaN and selections as an impossible region id, so an
// element the backend never wrote fails every comparison.
constexpr uint8_t kOutputPoison = 0xff;
constexpr uint8_t kSelectedPoison = 0x7f;

enum Input : size_t {
  kQuery,
  kKey,
  kValue,
  kGate,
  kIndexQuery,
  kIndexWeight,
  kIndexKey,
  kIndexZ,
  kInputs
};

}  // namespace

// One step's inputs of every layer on the backend's device; the inputs a
// write-only step (or an SWA layer) lacks stay absent views.
struct Engine::Uploaded {
  std::vector<std::vector<sim::InputTensor>> layers;

  Uploaded(Device device, const std::vector<LayerConfig>& configs, const ScheduledStep& step,
           bool writes_only) {
    const int64_t n = step.num_tokens();
    const auto un = static_cast<size_t>(n);
    for (size_t l = 0; l < configs.size(); ++l) {
      const LayerConfig& c = configs[l];
      const sim::StepInput& in = step.inputs[l];
      const int H = c.num_heads, G = c.num_kv_heads, D = c.head_size;
      const int I = c.index_heads, Di = c.index_dim;
      const auto hd = static_cast<size_t>(H) * static_cast<size_t>(D);
      const auto gd = static_cast<size_t>(G) * static_cast<size_t>(D);
      const auto gi = static_cast<size_t>(G) * static_cast<size_t>(I);
      const auto di = static_cast<size_t>(Di);
      const bool csa = c.kind == LayerKind::csa;
      static const std::vector<uint16_t> no_bf16;
      static const std::vector<float> no_f32;
      auto bf16 = [&](const std::vector<uint16_t>& v, bool wanted) -> const std::vector<uint16_t>& {
        return wanted ? v : no_bf16;
      };
      auto f32 = [&](const std::vector<float>& v, bool wanted) -> const std::vector<float>& {
        return wanted ? v : no_f32;
      };
      const bool attends = !writes_only;
      std::vector<sim::InputTensor> t;
      t.reserve(kInputs);
      t.emplace_back(device, "query", bf16(in.query, attends), un * hd,
                     std::initializer_list<int64_t>{n, H, D}, true);
      t.emplace_back(device, "key", in.key, un * gd, std::initializer_list<int64_t>{n, G, D});
      t.emplace_back(device, "value", in.value, un * gd, std::initializer_list<int64_t>{n, G, D});
      t.emplace_back(device, "gate", bf16(in.gate, attends), un * static_cast<size_t>(H),
                     std::initializer_list<int64_t>{n, H}, true);
      t.emplace_back(device, "index_query", bf16(in.index_query, csa && attends), un * gi * di,
                     std::initializer_list<int64_t>{n, G, I, Di}, true);
      t.emplace_back(device, "index_weight", f32(in.index_weight, csa && attends), un * gi,
                     std::initializer_list<int64_t>{n, G, I}, true);
      t.emplace_back(device, "index_key", bf16(in.index_key, csa), un * di,
                     std::initializer_list<int64_t>{n, Di}, true);
      t.emplace_back(device, "index_z", f32(in.index_z, csa), un, std::initializer_list<int64_t>{n},
                     true);
      layers.push_back(std::move(t));
    }
  }
  const TensorView& view(size_t layer, Input which) const { return layers[layer][which].view; }
};

Engine::Engine(Backend& backend, const std::vector<LayerConfig>& layers, int64_t num_blocks,
               int32_t ring_entries, const StepLimits& limits)
    : backend_(backend), layers_(layers), device_(backend.device()) {
  for (const LayerConfig& c : layers_) {
    const auto stride = static_cast<int64_t>(cache_bytes_per_block(c));
    blocks_.emplace_back(device_, static_cast<size_t>(stride * num_blocks));
    blocks_.back().fill(kCacheGarbage);
    const size_t ring_bytes =
        c.kind == LayerKind::csa ? ring_entry_bytes(c) * static_cast<size_t>(ring_entries) : 0;
    rings_.emplace_back(device_, ring_bytes);
    rings_.back().fill(kCacheGarbage);
    caches_.push_back(packed_layer_cache(c, blocks_.back().data(), num_blocks, stride,
                                         rings_.back().data(), ring_entries, device_));
  }
  // Once for the whole run, from the limits of every step it will run: a
  // plan that needs more than this breaks the workspace bound (run() says).
  workspace_ = sim::DeviceBuffer(device_, backend_.workspace_bytes(layers_, limits));
}

size_t Engine::block_bytes(size_t layer) const {
  return cache_bytes_per_block(layers_[layer]);
}

void Engine::poison_status(const StepPlan& plan) {
  // prepare_step must zero the status word (contract.md): what a step
  // leaves there is then its own, never the previous step's.
  const std::vector<uint8_t> poison(sizeof(DeviceStatus), 0xff);
  workspace_.upload(poison.data(), poison.size(), plan.workspace.status_offset);
}

DeviceStatus Engine::read_status(const StepPlan& plan) const {
  DeviceStatus status;
  workspace_.download(&status, sizeof status, plan.workspace.status_offset);
  return status;
}

void Engine::forward_all(const StepDesc& desc, const StepPlan& plan, const Uploaded& in,
                         std::vector<sim::DeviceBuffer>& outputs,
                         std::vector<sim::DeviceBuffer>& selected) {
  const int64_t n = desc.num_tokens;
  const Workspace ws{workspace_.data(), plan.workspace_bytes()};
  outputs.clear();
  selected.clear();
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerConfig& c = layers_[l];
    const auto out_bytes = static_cast<size_t>(n * c.num_heads * c.head_size) * 2;
    outputs.emplace_back(device_, out_bytes);
    outputs.back().fill(kOutputPoison);
    const bool csa = c.kind == LayerKind::csa;
    const auto sel_bytes = csa ? static_cast<size_t>(n * c.num_kv_heads * c.topk) * 4 : 0;
    selected.emplace_back(device_, sel_bytes);
    selected.back().fill(kSelectedPoison);
    LayerOutputs outs;
    outs.output = TensorView::contiguous(outputs.back().data(), DType::bf16,
                                         {n, c.num_heads, c.head_size}, device_);
    if (csa) {
      outs.selected = TensorView::contiguous(selected.back().data(), DType::i32,
                                             {n, c.num_kv_heads, c.topk}, device_);
      CsaInputs inputs;
      inputs.query = in.view(l, kQuery);
      inputs.key = in.view(l, kKey);
      inputs.value = in.view(l, kValue);
      inputs.gate = in.view(l, kGate);
      inputs.index_query = in.view(l, kIndexQuery);
      inputs.index_weight = in.view(l, kIndexWeight);
      inputs.index_key = in.view(l, kIndexKey);
      inputs.index_z = in.view(l, kIndexZ);
      backend_.forward_csa(c, desc, plan, inputs, caches_[l], outs, ws, nullptr);
    } else {
      SwaInputs inputs{in.view(l, kQuery), in.view(l, kKey), in.view(l, kValue), in.view(l, kGate),
                       ForwardFlags::none};
      backend_.forward_swa(c, desc, plan, inputs, caches_[l].kv, outs, ws, nullptr);
    }
  }
}

void Engine::write_all(const StepDesc& desc, const StepPlan& plan, const Uploaded& in) {
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerConfig& c = layers_[l];
    backend_.write_kv(c, desc, plan, in.view(l, kKey), in.view(l, kValue), caches_[l].kv, nullptr);
    if (c.kind == LayerKind::csa) {
      backend_.update_summaries(c, desc, plan, in.view(l, kIndexKey), in.view(l, kIndexZ),
                                caches_[l], nullptr);
    }
  }
}

StepPlan Engine::plan_and_prepare(const StepDesc& desc) {
  const StepPlan plan = backend_.plan(desc, layers_);
  if (plan.workspace_bytes() > workspace_.bytes()) {
    throw std::logic_error("soak: a plan needs " + std::to_string(plan.workspace_bytes()) +
                           " workspace bytes, more than Backend::workspace_bytes(limits) = " +
                           std::to_string(workspace_.bytes()) + " (the workspace bound is broken)");
  }
  poison_status(plan);
  backend_.prepare_step(plan, {workspace_.data(), plan.workspace_bytes()}, nullptr);
  return plan;
}

StepResult Engine::run(const ScheduledStep& step, bool repeat) {
  using Clock = std::chrono::steady_clock;
  StepResult result;
  sim::StepBuffers buffers(device_, step.host, 0);
  const Uploaded in(device_, layers_, step, step.write_only);
  const Clock::time_point start = Clock::now();
  const StepPlan plan = plan_and_prepare(buffers.desc);
  result.kind = plan.kind;
  std::vector<sim::DeviceBuffer> outputs, selected;
  if (step.write_only) {
    write_all(buffers.desc, plan, in);
  } else {
    forward_all(buffers.desc, plan, in, outputs, selected);
  }
  sim::synchronize(device_);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.status = read_status(plan);
  for (size_t l = 0; l < outputs.size(); ++l) {
    LayerResult layer;
    layer.output = outputs[l].to_vector<uint16_t>(outputs[l].bytes() / 2);
    layer.selected = selected[l].to_vector<int32_t>(selected[l].bytes() / 4);
    result.layers.push_back(std::move(layer));
  }
  if (!repeat || step.write_only) return result;

  // The same step again on the cache it just wrote: its K/V, ring rows and
  // summaries are rewritten with the same values, so a deterministic
  // backend gives the same bits.
  result.repeated = true;
  poison_status(plan);
  backend_.prepare_step(plan, {workspace_.data(), plan.workspace_bytes()}, nullptr);
  forward_all(buffers.desc, plan, in, outputs, selected);
  sim::synchronize(device_);
  result.repeat_status = read_status(plan);
  for (size_t l = 0; l < outputs.size(); ++l) {
    const bool same =
        outputs[l].to_vector<uint16_t>(outputs[l].bytes() / 2) == result.layers[l].output &&
        selected[l].to_vector<int32_t>(selected[l].bytes() / 4) == result.layers[l].selected;
    result.repeat_mismatches += same ? 0 : 1;
  }
  return result;
}

void Engine::write_caches(const ScheduledStep& step) {
  sim::StepBuffers buffers(device_, step.host, 0);
  const Uploaded in(device_, layers_, step, true);
  const StepPlan plan = plan_and_prepare(buffers.desc);
  write_all(buffers.desc, plan, in);
  sim::synchronize(device_);
}

void Engine::read_block(size_t layer, int32_t block, std::vector<uint8_t>& bytes) const {
  const size_t size = block_bytes(layer);
  bytes.resize(size);
  blocks_[layer].download(bytes.data(), size, static_cast<size_t>(block) * size);
}

void Engine::flip_byte(size_t layer, int64_t offset) {
  uint8_t byte = 0;
  blocks_[layer].download(&byte, 1, static_cast<size_t>(offset));
  byte ^= 1u;
  blocks_[layer].upload(&byte, 1, static_cast<size_t>(offset));
}

}  // namespace step5::tool::soak
