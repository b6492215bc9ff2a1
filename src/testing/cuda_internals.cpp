// step5/testing/cuda_internals.h: each entry point forwards to the cuda
// backend's internal function of the same name.
#include "step5/testing/cuda_internals.h"

#include "core/check.h"
#include "cuda/attention/heuristics.h"
#include "cuda/attention/tiles.h"
#include "cuda/common/arch.h"
#include "cuda/select/bins.h"
#include "cuda/tile_attention/heuristics.h"
#if defined(STEP5_HAVE_CUDA)
#include "cuda/attention/fill.h"
#include "cuda/attention/launch.h"
#include "cuda/common/device.h"
#include "cuda/cuda_backend.h"
#include "cuda/kv_write/params.h"
#include "cuda/schedule.h"
#include "cuda/tile_attention/tile_choice.h"
#endif

namespace step5::cuda_testing {

namespace {

KernelPath to_testing(cuda::KernelPath path) {
  return path == cuda::KernelPath::hopper ? KernelPath::hopper : KernelPath::portable;
}

#if defined(STEP5_HAVE_CUDA)
cuda::KernelPath to_internal(KernelPath path) {
  return path == KernelPath::hopper ? cuda::KernelPath::hopper : cuda::KernelPath::portable;
}
#endif

template <int D>
bool has_compact_tile_of(bool fp8, bool csa) {
  using cuda::attn::has_compact_tile;
  if (fp8) return csa ? has_compact_tile<D, true, true>() : has_compact_tile<D, true, false>();
  return csa ? has_compact_tile<D, false, true>() : has_compact_tile<D, false, false>();
}

}  // namespace

KernelPath select_kernel_path(int major, int minor, bool built_sm90a, CudaKernels requested) {
  return to_testing(cuda::select_kernel_path(major, minor, built_sm90a, requested));
}

std::string capability_problem(int major, int minor) {
  return cuda::capability_problem(major, minor);
}

void attention_split_pages(int32_t num_pages, int num_splits, int split, int32_t* begin,
                           int32_t* end) {
  const cuda::attn::SplitPages pages = cuda::attn::split_pages(num_pages, num_splits, split);
  *begin = pages.begin;
  *end = pages.end;
}

int attention_last_page_split(int32_t num_pages, int num_splits) {
  return cuda::attn::last_page_split(num_pages, num_splits);
}

int select_bin(uint32_t key, uint32_t best) {
  return cuda::select_bin(key, best);
}

uint32_t select_bin_floor(int bin, uint32_t best) {
  return cuda::select_bin_floor(bin, best);
}

int32_t select_sample_first(int32_t b) {
  return cuda::select_sample_first(b);
}

int select_sample_stride() {
  return cuda::select_sample_stride();
}

int32_t tile_choice_max_regions() {
  return cuda::tiled::tile_choice_max_regions();
}

int select_bins() {
  return cuda::select_bins();
}

int attention_stages(bool fp8) {
  return cuda::attn::attention_stages(fp8);
}

int attention_compact_stages(bool fp8) {
  return cuda::attn::attention_compact_stages(fp8);
}

bool has_compact_tile(int head_size, bool fp8, bool csa) {
  switch (head_size) {
    case 64: return has_compact_tile_of<64>(fp8, csa);
    case 128: return has_compact_tile_of<128>(fp8, csa);
    case 192: return has_compact_tile_of<192>(fp8, csa);
    default: break;
  }
  detail::fail_invalid("has_compact_tile: head_size expected 64, 128 or 192, got ", head_size);
}

#if defined(STEP5_HAVE_CUDA)
int paged_attention_stages(const LayerConfig& config, size_t max_smem) {
  return cuda::paged_attention_stages(config, max_smem);
}

LayerSchedule schedule_layer(const DeviceInfo& device, const StepPlan& plan,
                             const LayerConfig& config) {
  cuda::DeviceInfo info;
  info.device_id = device.device_id;
  info.name = device.name;
  info.major = device.major;
  info.minor = device.minor;
  info.sm_count = device.sm_count;
  info.max_smem_per_block = device.max_smem_per_block;
  info.path = to_internal(device.path);
  for (int k = 0; k < 4; ++k) info.select_active_clusters[k] = device.select_active_clusters[k];
  return cuda::schedule_layer(info, plan, config);
}

bool cuda_backend_available(int device_id, std::string* why) {
  return cuda::cuda_backend_available(device_id, why);
}

std::string cuda_backend_summary(const Backend& backend) {
  return cuda::cuda_backend_summary(backend);
}

void launch_tile_choice(const int32_t* selected, int64_t rows, int groups, int topk,
                        int64_t row_begin, const int32_t* tiles, int32_t num_tiles,
                        const int32_t* untiled, int64_t num_untiled, int32_t bitmap_regions,
                        float crossover, int32_t* tile_runs, int32_t* row_list, Stream stream) {
  cuda::TileChoiceParams p;
  p.selected = selected;
  p.selected_row_stride = int64_t{groups} * topk;
  p.selected_group_stride = topk;
  p.row_begin = row_begin;
  p.num_rows = rows;
  p.num_groups = groups;
  p.topk = topk;
  p.tiles = tiles;
  p.num_tiles = num_tiles;
  p.untiled = untiled;
  p.num_untiled = num_untiled;
  p.bitmap_regions = bitmap_regions;
  p.crossover = crossover;
  p.tile_runs = tile_runs;
  p.row_list = row_list;
  cuda::launch_tile_choice(p, cuda::to_cuda_stream(stream));
}

void launch_fp8_convert(const float* in, uint8_t* out, int64_t count, Stream stream) {
  cuda::launch_fp8_convert(in, out, count, cuda::to_cuda_stream(stream));
}

void launch_e4m3_widen(uint32_t* out, Stream stream) {
  cuda::launch_e4m3_widen(out, cuda::to_cuda_stream(stream));
}

void fill_cache_random(void* data, size_t bytes, uint64_t seed, Stream stream) {
  cuda::fill_cache_random(data, bytes, seed, cuda::to_cuda_stream(stream));
}
#endif

}  // namespace step5::cuda_testing
