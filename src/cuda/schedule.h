// The cuda backend's share of a plan: how each layer of a step runs on this
// GPU (split-KV count, indexer path and work shape, scratch). Decided once
// per step from the step's shapes and the device's SM count and shared
// memory; forwards only execute it.
#pragma once

#include "cuda/common/device.h"
#include "step5/step.h"

namespace step5::cuda {

LayerSchedule schedule_layer(const DeviceInfo& device, const StepPlan& plan,
                             const LayerConfig& config);

// Whether a plan may have `config`'s CSA tiles decided on the device
// (LayerSchedule::tile_union_crossover), whose arrays take backend scratch.
bool csa_tiles_may_be_chosen(const DeviceInfo& device, const LayerConfig& config);

}  // namespace step5::cuda
