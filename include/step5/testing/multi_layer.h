// Several layers of one model stepping together on one block table, their
// caches either packed per layer or interleaved in one buffer with the
// layer dimension inside the block (the seed's BLNHC layout,
// step5::interleaved_blocks). The tests run both on the cpu backend and
// require equal outputs; the GPU check runs the interleaved form on both
// backends.
#pragma once

#include <cstdint>
#include <vector>

#include "step5/attention.h"

namespace step5::sim {

struct MultiLayerOptions {
  bool interleaved = true;  // one BLNHC buffer; else a buffer per layer
  uint64_t seed = 3;        // inputs and block order
  int64_t padding_rows = 2;
};

// Outputs (bf16 bits [n, H, D]) of every layer at every step, step-major:
// outputs[step * layers + layer]. The schedule is fixed: two requests
// prefill in chunks (long enough that CSA rows have more closed regions
// than K = 4 picks), then a mixed step and decode steps. Garbage-filled
// caches and NaN-poisoned outputs: a layer that reads or writes another's
// bytes, or leaves a row unwritten, changes the result.
std::vector<std::vector<uint16_t>> run_layers(Backend& backend,
                                              const std::vector<LayerConfig>& layers,
                                              const MultiLayerOptions& options);

// Two layers for run_layers: a CSA layer with K = 4 and an SWA layer of
// another head count, on block size `block_size`.
std::vector<LayerConfig> two_layer_model(int block_size, DType kv_dtype);

}  // namespace step5::sim
