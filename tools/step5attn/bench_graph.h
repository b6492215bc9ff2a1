// Whole steps as engines run them: the forwards of several layers of one
// decode or verify step captured once in a CUDA graph and replayed, so the
// time is the kernels', not the host's enqueue; plus the host time of one
// forward call.
#pragma once

#include <cstdint>
#include <random>

#include "step5/attention.h"
#include "step5/testing/device_memory.h"
#include "step5attn/bench_result.h"
#include "step5attn/bench_timer.h"

namespace step5::tool::bench {

struct GraphShape {
  int64_t context = 131072;
  int batch = 32;
  int query_len = 1;  // 1 = decode, k+1 = MTP verify
};

// Four layers, CSA and SWA each with bf16 and fp8 KV, in one packed pool of
// blocks that holds every layer's cache side by side (the seed's BLNHC
// layout). Returns the step's row; `host_us` is the host time of one
// forward call (92 calls, all four layer kinds in turn, bench_timer.h).
Result run_graph_step(Backend& gpu, sim::DeviceBuffer& pool, Timer& timer, const GraphShape& shape,
                      int reps, std::mt19937_64& rng);

}  // namespace step5::tool::bench
