// `step5attn soak`, one backend's side: every layer's paged cache and ring
// on the backend's device, one workspace sized once for the whole run (as
// an engine allocates it before its first step), and the steps run through
// plan + prepare_step + forward (or the cache-writing operations alone).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "step5/attention.h"
#include "step5/testing/device_memory.h"
#include "step5attn/soak_workload.h"

namespace step5::tool::soak {

struct LayerResult {
  std::vector<uint16_t> output;   // [n, H, D] bf16 bits
  std::vector<int32_t> selected;  // [n, G, K] (CSA)
};

struct StepResult {
  std::vector<LayerResult> layers;
  DeviceStatus status;  // read after the step (all layers)
  StepKind kind = StepKind::empty;
  double seconds = 0;  // plan to the end of the last layer, synchronized
  // The step run a second time (same inputs, same cache): layers whose
  // output or selection differ bit for bit, and the status of that run.
  bool repeated = false;
  int repeat_mismatches = 0;
  DeviceStatus repeat_status;
};

class Engine {
 public:
  Engine(Backend& backend, const std::vector<LayerConfig>& layers, int64_t num_blocks,
         int32_t ring_entries, const StepLimits& limits);

  Backend& backend() const { return backend_; }
  const std::vector<LayerConfig>& layers() const { return layers_; }
  const LayerCache& cache(size_t layer) const { return caches_[layer]; }
  size_t block_bytes(size_t layer) const;

  // Runs `step`: cache writes only for write_only steps, else the whole
  // forward of every layer (outputs returned). `repeat` runs the forwards a
  // second time and compares.
  StepResult run(const ScheduledStep& step, bool repeat);
  // Only the cache-writing operations of `step` (write_kv and
  // update_summaries), whatever the step is: what the cpu reference mirrors.
  void write_caches(const ScheduledStep& step);

  // Bytes of one block of `layer`'s cache (KV, then summaries).
  void read_block(size_t layer, int32_t block, std::vector<uint8_t>& bytes) const;
  // Flips the low bit of one byte of `layer`'s cache: --inject-corruption.
  void flip_byte(size_t layer, int64_t offset);

 private:
  struct Uploaded;
  void poison_status(const StepPlan& plan);
  DeviceStatus read_status(const StepPlan& plan) const;
  StepPlan plan_and_prepare(const StepDesc& desc);
  void forward_all(const StepDesc& desc, const StepPlan& plan, const Uploaded& in,
                   std::vector<sim::DeviceBuffer>& outputs,
                   std::vector<sim::DeviceBuffer>& selected);
  void write_all(const StepDesc& desc, const StepPlan& plan, const Uploaded& in);

  Backend& backend_;
  std::vector<LayerConfig> layers_;
  Device device_;
  std::vector<sim::DeviceBuffer> blocks_;  // per layer
  std::vector<sim::DeviceBuffer> rings_;
  std::vector<LayerCache> caches_;
  sim::DeviceBuffer workspace_;
};

}  // namespace step5::tool::soak
