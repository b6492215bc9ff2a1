// A simulator step's inputs copied to the device, as the views a forward
// takes.
#pragma once

#include "step5/attention.h"
#include "step5/testing/sim.h"
#include "step5/testing/step_buffers.h"

namespace step5::sim {

// Every input of `in` for one layer of `config`, each checked against its
// shape ([n, H, D] and so on). The gate is absent when `in` has none; the
// CSA inputs are absent for an SWA layer.
struct StepTensors {
  InputTensor query, key, value, gate;
  InputTensor index_query, index_weight, index_key, index_z;

  StepTensors(Device device, const LayerConfig& config, const StepInput& in);

  // Refills the present tensors from `in`, a step of at most as many rows
  // (CUDA-graph replays keep the buffers the graph captured).
  void upload(const StepInput& in);

  CsaInputs csa(ForwardFlags flags = ForwardFlags::none) const {
    return {query.view,       key.view,          value.view,
            index_query.view, index_weight.view, index_key.view,
            index_z.view,     gate.view,         flags};
  }
  SwaInputs swa(ForwardFlags flags = ForwardFlags::none) const {
    return {query.view, key.view, value.view, gate.view, flags};
  }
};

}  // namespace step5::sim
