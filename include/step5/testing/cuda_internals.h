// White-box entry points into the cuda backend, for its tests and the
// CLI's GPU check and bench: the kernel set a compute capability gets, the
// attention tiles' pipeline depths, the selection's bins and the schedule a
// plan gives a described device (host code: no GPU needed, and the first
// group builds without the cuda backend too), then, in builds with the cuda
// backend, the device's fp8 conversion kernels and the benchmark fill. Each
// function forwards to the backend's internal one of the same name
// (src/testing/cuda_internals.cpp); they are no part of the runtime API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "step5/attention.h"
#include "step5/config.h"
#include "step5/step.h"

namespace step5::cuda_testing {

// The cuda backend's kernel sets (src/cuda/common/arch.h).
enum class KernelPath : uint8_t {
  hopper,    // the sm_90a kernels where they exist (the tensor-core indexer)
  portable,  // sm_80-level kernels only (the indexer's generic fp32 path)
};

// The kernel set of a GPU of compute capability major.minor, for a build
// with (`built_sm90a`) or without sm_90a code. Throws Error(unsupported)
// for a capability the backend does not support.
KernelPath select_kernel_path(int major, int minor, bool built_sm90a, CudaKernels requested);
// Empty when the capability is supported, else what is wrong with it.
std::string capability_problem(int major, int minor);

// cp.async stages per warp of the paged attention: the default depth and
// the compact one of GPUs with less shared memory.
int attention_stages(bool fp8);
int attention_compact_stages(bool fp8);
// Whether the attention tile of head size `head_size` (64, 128 or 192; else
// Error(invalid_argument)) has a compact variant.
bool has_compact_tile(int head_size, bool fp8, bool csa);

// The paged attention's split of a row's `num_pages` pages: split `split`
// of `num_splits` takes pages [*begin, *end).
void attention_split_pages(int32_t num_pages, int num_splits, int split, int32_t* begin,
                           int32_t* end);
// The split holding a row's last page (its own, whose K/V that split writes
// when the launch carries the write).
int attention_last_page_split(int32_t num_pages, int num_splits);

// The selection kernel's distance bins (src/cuda/select/bins.h): the bin of
// order key `key` below a row's best key `best` (larger keys, larger bins;
// 0 .. select_bins() - 1), and the smallest key whose bin is >= `bin`.
int select_bin(uint32_t key, uint32_t best);
uint32_t select_bin_floor(int bin, uint32_t best);
int select_bins();
// Rows longer than the kernel's list are sampled: 8 regions from
// select_sample_first(b) on in each stride b of select_sample_stride().
int32_t select_sample_first(int32_t b);
int select_sample_stride();

// Score columns up to which CSA tiles may be decided one by one on the
// device (the choice's bitmap).
int32_t tile_choice_max_regions();

#if defined(STEP5_HAVE_CUDA)
// The stages the plan takes for `config` on a GPU with `max_smem` bytes of
// opt-in shared memory per block; Error(unsupported) when none fits.
int paged_attention_stages(const LayerConfig& config, size_t max_smem);

// A GPU as the schedule sees it, described by hand.
struct DeviceInfo {
  int device_id = 0;
  std::string name;
  int major = 0;
  int minor = 0;
  int sm_count = 0;
  size_t max_smem_per_block = 0;  // opt-in limit
  KernelPath path = KernelPath::portable;
  // Clusters of 2^k CTAs of the cluster selection the device runs at once,
  // k = 1..3 ([0] unused; 0: none).
  int select_active_clusters[4] = {0, 0, 0, 0};
};
// How one layer of `plan` runs on `device`.
LayerSchedule schedule_layer(const DeviceInfo& device, const StepPlan& plan,
                             const LayerConfig& config);

// Whether make_backend(cuda) would succeed for `device_id`; `why` says
// what was found otherwise. Never throws.
bool cuda_backend_available(int device_id, std::string* why);
// One line for logs: the GPU, its limits and the kernel set `backend` runs.
std::string cuda_backend_summary(const Backend& backend);

// The CSA per-tile choice (src/cuda/tile_attention/tile_choice.h) over a
// chunk's selection of `rows` step rows from `row_begin`: selected i32
// [rows, G, K] device; tiles i32 [num_tiles, 2] device (first step row,
// row count); untiled i32 [num_untiled] device (may be null when 0);
// writes tile_runs i32 [num_tiles] (1: the tile kernel runs the tile) and
// row_list i32 [rows] (the row, or -1 for a row of a running tile).
// Regions >= bitmap_regions (a multiple of 32) are not counted.
void launch_tile_choice(const int32_t* selected, int64_t rows, int groups, int topk,
                        int64_t row_begin, const int32_t* tiles, int32_t num_tiles,
                        const int32_t* untiled, int64_t num_untiled, int32_t bitmap_regions,
                        float crossover, int32_t* tile_runs, int32_t* row_list, Stream stream);

// The kv write's f32 -> e4m3 conversion on the device, `count` values.
// in: f32 [count] device; out: u8 [count] device.
void launch_fp8_convert(const float* in, uint8_t* out, int64_t count, Stream stream);
// The kernels' e4m3 -> f16x2 / bf16x2 widening for every byte pair
// p = 0..65535: out[3p] f16x2, out[3p + 1] f16x2 of the high half,
// out[3p + 2] bf16x2. out: u32 [3 * 65536] device.
void launch_e4m3_widen(uint32_t* out, Stream stream);
// Fills `bytes` (even) device bytes with pseudo-random values that are
// finite and of magnitude <= 2 read as bf16 or e4m3 (benchmark caches).
void fill_cache_random(void* data, size_t bytes, uint64_t seed, Stream stream);
#endif

}  // namespace step5::cuda_testing
