// The rate at which SMs can gather a prefill chunk's selected K/V when the
// selections are independent: what the row attention kernel's copies
// could reach (docs/prefill_design.md, "The row kernel against the L2
// gather rate"). Each of `rows` CTAs reads `chunks`
// chunks of `chunk` bytes (one region's 8 keys of K || V: 6 KB at D = 192
// bf16), drawn uniformly from a footprint of F bytes and walked in
// ascending order, as a row walks its selection. The footprint is one KV
// group of one request: 25 MB at 32K context, 100 MB at 128K, 805 MB at
// 1M. Two schedules:
//   - whole rows: CTA r reads all of row r's chunks (the row kernel today);
//   - segments: CTA (s, r), s-major, reads the s-th of S equal parts of
//     row r's chunks, so the CTAs resident at once read ~F / S bytes (a
//     split-KV schedule ordered for L2 reuse);
//   - rows at pitch P: whole rows, copied as the row kernel copies a
//     16-key step (its 16 rows x 48 pieces flattened over a warp's lanes)
//     into rows P bytes apart in shared memory: 784 (main's padded rows)
//     or 768.
// Residency is set by dynamic shared memory: 2 CTAs per SM, as the row
// kernel runs, or 8. The CTAs only copy (16-byte cp.async into shared
// memory, 48 KB in flight per CTA at 2 CTAs per SM, 12 KB at 8) and
// compute nothing, so the figure bounds any kernel that gathers the same
// bytes this way. Not part of the build:
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a
//       -o /tmp/l2_gather bench/l2_gather.cu
//   /tmp/l2_gather
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

#define CHECK(x)                                          \
  do {                                                    \
    const cudaError_t e = (x);                            \
    if (e != cudaSuccess) {                               \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e)); \
      std::exit(1);                                       \
    }                                                     \
  } while (0)

constexpr int kThreads = 128;
constexpr int kChunkBytes = 6144;                      // 8 keys x (K || V) x 192 x 2 B
constexpr int kVectors = kChunkBytes / 16 / kThreads;  // 16-byte loads per thread per chunk

// The library's copy is attn::cp_async16 (src/cuda/attention/ptx.cuh), in
// its zero-fill form; this program keeps its own plain form so that it
// builds alone and stays the one whose figures docs/prefill_design.md
// records.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem));
}

// CTA c copies chunks first[c] .. first[c + 1] - 1 of `ids` (chunk numbers
// in the footprint `base`) into shared memory by cp.async, as the row
// kernel copies its pages: batches of kBatch chunks, two batches in flight.
template <int kBatch>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const uint4* base, const int32_t* ids, const int64_t* first) {
  extern __shared__ uint4 stage[];  // [2][kBatch][kChunkBytes / 16]
  const int64_t begin = first[blockIdx.x], end = first[blockIdx.x + 1];
  auto issue = [&](int64_t i, int buffer) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (i + u < end) {
        const uint4* c = base + int64_t{ids[i + u]} * (kChunkBytes / 16);
        uint4* d = stage + (buffer * kBatch + u) * (kChunkBytes / 16);
#pragma unroll
        for (int k = 0; k < kVectors; ++k) {
          cp_async16(d + k * kThreads + threadIdx.x, c + k * kThreads + threadIdx.x);
        }
      }
    }
    asm volatile("cp.async.commit_group;");
  };
  issue(begin, 0);
  int buffer = 1;
  for (int64_t i = begin + kBatch; i < end + kBatch; i += kBatch, buffer ^= 1) {
    issue(i, buffer);  // an empty group past the end
    asm volatile("cp.async.wait_group 1;" ::: "memory");
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
}

// The row attention kernel's copy pattern (row_page_source.cuh,
// issue_step): each warp copies 16-key steps (two chunks of 8 rows of 768
// bytes) into its own two stage buffers, the step's 16 x 48 16-byte pieces
// flattened over the lanes, rows kPitch bytes apart in shared memory.
template <int kPitch>
__global__ void __launch_bounds__(kThreads)
    gather_rows_kernel(const uint4* base, const int32_t* ids, const int64_t* first) {
  extern __shared__ unsigned char stage_rows[];  // [4 warps][2 stages][16][kPitch]
  constexpr int kRow = kChunkBytes / 8, kPieces = kRow / 16;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t begin = first[blockIdx.x], end = first[blockIdx.x + 1];
  const int64_t steps = (end - begin + 1) / 2;
  unsigned char* own = stage_rows + warp * 2 * 16 * kPitch;
  auto issue = [&](int64_t step, int buffer) {
    if (step < steps) {
      for (int k = 0; k < 16 * kPieces / 32; ++k) {
        const int i = 32 * k + lane, tok = i / kPieces, c = i % kPieces;
        const int64_t e = begin + 2 * step + tok / 8;
        if (e < end) {
          const unsigned char* row =
              reinterpret_cast<const unsigned char*>(base + int64_t{ids[e]} * (kChunkBytes / 16)) +
              (tok % 8) * kRow;
          cp_async16(own + (buffer * 16 + tok) * kPitch + c * 16, row + c * 16);
        }
      }
    }
    asm volatile("cp.async.commit_group;");
  };
  issue(warp, 0);
  int buffer = 1;
  for (int64_t s = warp; s < steps; s += 4, buffer ^= 1) {
    issue(s + 4, buffer);
    asm volatile("cp.async.wait_group 1;" ::: "memory");
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
}

__global__ void copy_kernel(const uint4* in, uint4* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = in[i];
  }
}

float time_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0.0f;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

// Median of 5 timed runs of `run` (after one warm-up), each after an
// untimed `prep`.
template <class P, class F>
float median_ms(P&& prep, F&& run) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  prep();
  run();
  std::vector<float> t;
  for (int k = 0; k < 5; ++k) {
    prep();
    CHECK(cudaEventRecord(a));
    run();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    t.push_back(time_ms(a, b));
  }
  std::sort(t.begin(), t.end());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return t[2];
}

}  // namespace

int main() {
  const int64_t max_footprint = int64_t{805} << 20;
  const int rows = 2048;   // tokens of one group in a 2,048-row chunk
  const int chunks = 512;  // K selected regions per row
  unsigned char* pool = nullptr;
  CHECK(cudaMalloc(&pool, 2 * max_footprint));
  CHECK(cudaMemset(pool, 1, 2 * max_footprint));
  CHECK(cudaFuncSetAttribute(gather_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             110 << 10));
  CHECK(cudaFuncSetAttribute(gather_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             110 << 10));
  CHECK(cudaFuncSetAttribute(gather_rows_kernel<768>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             110 << 10));
  CHECK(cudaFuncSetAttribute(gather_rows_kernel<784>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             110 << 10));

  const int64_t copy_vectors = max_footprint / 16;
  const float copy_ms =
      median_ms([] {},
                [&] {
                  copy_kernel<<<132 * 16, 256>>>(reinterpret_cast<const uint4*>(pool),
                                                 reinterpret_cast<uint4*>(pool + max_footprint),
                                                 copy_vectors);
                });
  std::printf("device copy of %lld MB: %.3f TB/s (read + write)\n",
              static_cast<long long>(max_footprint >> 20), 2.0 * max_footprint / copy_ms / 1e9);

  const int64_t gathered = int64_t{rows} * chunks * kChunkBytes;
  std::printf("%d rows x %d chunks of %d B = %.2f GB a pass\n", rows, chunks, kChunkBytes,
              gathered / 1e9);
  std::printf("%-12s %-16s %10s %10s\n", "footprint", "schedule", "ms", "TB/s");
  std::mt19937 rng(12345);
  for (const int64_t mb : {12, 25, 50, 100, 200, 805}) {
    const int64_t footprint = mb << 20;
    const int32_t universe = static_cast<int32_t>(footprint / kChunkBytes);
    // Each row: `chunks` distinct chunk numbers, ascending.
    std::vector<int32_t> row_ids(int64_t{rows} * chunks);
    std::vector<int32_t> all(universe);
    for (int32_t i = 0; i < universe; ++i) all[i] = i;
    for (int r = 0; r < rows; ++r) {
      for (int k = 0; k < chunks; ++k) {
        std::uniform_int_distribution<int32_t> d(k, universe - 1);
        std::swap(all[k], all[d(rng)]);
      }
      std::sort(all.begin(), all.begin() + chunks);
      std::copy(all.begin(), all.begin() + chunks, row_ids.begin() + int64_t{r} * chunks);
    }
    for (const int segments : {1, 2, 4, 8}) {
      // CTA (s, r), s-major: row r's chunks [s * chunks / S, (s + 1) * chunks / S).
      std::vector<int32_t> ids;
      std::vector<int64_t> first;
      for (int s = 0; s < segments; ++s) {
        for (int r = 0; r < rows; ++r) {
          first.push_back(static_cast<int64_t>(ids.size()));
          const int64_t lo = int64_t{r} * chunks + int64_t{s} * chunks / segments;
          const int64_t hi = int64_t{r} * chunks + int64_t{s + 1} * chunks / segments;
          ids.insert(ids.end(), row_ids.begin() + lo, row_ids.begin() + hi);
        }
      }
      first.push_back(static_cast<int64_t>(ids.size()));
      int32_t* d_ids = nullptr;
      int64_t* d_first = nullptr;
      CHECK(cudaMalloc(&d_ids, ids.size() * sizeof(int32_t)));
      CHECK(cudaMalloc(&d_first, first.size() * sizeof(int64_t)));
      CHECK(cudaMemcpy(d_ids, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(d_first, first.data(), first.size() * sizeof(int64_t),
                       cudaMemcpyHostToDevice));
      const int ctas = rows * segments;
      // Times one gather over a cold L2 and prints its row.
      auto time_gather = [&](const char* schedule, auto&& launch) {
        const float ms = median_ms(
            [&] {
              // A cold L2 for every run: copy 128 MB elsewhere first.
              copy_kernel<<<132 * 16, 256>>>(reinterpret_cast<const uint4*>(pool + max_footprint),
                                             reinterpret_cast<uint4*>(pool + max_footprint),
                                             (int64_t{128} << 20) / 16);
            },
            launch);
        CHECK(cudaGetLastError());
        std::printf("%-12s %-16s %10.3f %10.3f\n", (std::to_string(mb) + " MB").c_str(), schedule,
                    ms, gathered / ms / 1e9);
      };
      const uint4* base = reinterpret_cast<const uint4*>(pool);
      char schedule[32];
      for (const int per_sm : {2, 8}) {
        // Residency by shared memory: 110 KB (48 KB of stages) or 27 KB
        // (12 KB of stages) a CTA.
        const int smem = per_sm == 2 ? 110 << 10 : 27 << 10;
        std::snprintf(schedule, sizeof schedule, "%d segs, %d/SM", segments, per_sm);
        time_gather(schedule, [&] {
          if (per_sm == 2) {
            gather_kernel<4><<<ctas, kThreads, smem>>>(base, d_ids, d_first);
          } else {
            gather_kernel<1><<<ctas, kThreads, smem>>>(base, d_ids, d_first);
          }
        });
      }
      for (const int pitch : {768, 784}) {
        std::snprintf(schedule, sizeof schedule, "%d segs, rows %d", segments, pitch);
        time_gather(schedule, [&] {
          if (pitch == 768) {
            gather_rows_kernel<768><<<ctas, kThreads, 110 << 10>>>(base, d_ids, d_first);
          } else {
            gather_rows_kernel<784><<<ctas, kThreads, 110 << 10>>>(base, d_ids, d_first);
          }
        });
      }
      CHECK(cudaFree(d_ids));
      CHECK(cudaFree(d_first));
    }
  }
  CHECK(cudaFree(pool));
  return 0;
}
