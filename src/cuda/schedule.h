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

}  // namespace step5::cuda
