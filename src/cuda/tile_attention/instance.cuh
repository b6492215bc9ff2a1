// Definition of run_tiles<D> and tile_smem_bytes<D>: picks the storage and
// page-source variant, sets the dynamic shared memory and launches.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/attention/tiles.h"
#include "cuda/common/check.h"
#include "cuda/common/smem_limit.h"
#include "cuda/tile_attention/hopper_csa_kernel.cuh"
#include "cuda/tile_attention/hopper_window_kernel.cuh"
#include "cuda/tile_attention/instances.h"
#include "cuda/tile_attention/kernel.cuh"

namespace step5::cuda::tiled {

// The row layout of staged keys is the row kernel's (one stage of it = one
// 16-key step); its stage count is not used here.
template <int D, bool kFp8, bool kCsa>
using RowLayout = attn::Tile<D, kFp8, kCsa, 1>;

template <int D, bool kFp8, bool kCsa>
void launch_variant(const TileAttentionParams& p, cudaStream_t stream) {
  using T = RowLayout<D, kFp8, kCsa>;
  auto* kernel = &tile_attention_kernel<T>;
  allow_max_smem(kernel);
  const int hpg = p.attn.num_heads / p.attn.num_kv_heads;
  const int64_t ctas = int64_t{p.num_tiles} * p.attn.num_kv_heads;
  kernel<<<static_cast<unsigned>(ctas), static_cast<unsigned>(32 * hpg), sizeof(TileSmem<T>),
           stream>>>(p);
  check_launch("tile_attention_kernel");
}

template <int D>
size_t tile_wgmma_smem_bytes() {
  return sizeof(HopperTileSmem<D>) + HopperTileSmem<D>::kAlignSlack;
}

// The sm_90a kernels: one instance per (D, kv dtype, page source). CSA:
// one CTA per (tile, group); SWA: a persistent grid of at most p.ctas.
template <int D, bool kFp8, bool kCsa>
void launch_wgmma(const TileAttentionParams& p, cudaStream_t stream) {
  const int64_t items = int64_t{p.num_tiles} * p.attn.num_kv_heads;
  if constexpr (kCsa) {
    auto* kernel = &hopper_csa_tiles_kernel<D, kFp8>;
    allow_max_smem(kernel);
    kernel<<<static_cast<unsigned>(items), hopper_threads(), tile_wgmma_smem_bytes<D>(), stream>>>(
        p);
    check_launch("hopper_csa_tiles_kernel");
  } else {
    auto* kernel = &hopper_window_tiles_kernel<D, kFp8>;
    allow_max_smem(kernel);
    const int64_t ctas = std::min<int64_t>(items, p.ctas);
    kernel<<<static_cast<unsigned>(ctas), hopper_threads(), tile_wgmma_smem_bytes<D>(), stream>>>(
        p);
    check_launch("hopper_window_tiles_kernel");
  }
}

// The one place where the KV dtype and the page source (CSA selection or
// SWA window) become template arguments: calls launch(kFp8, kCsa) with
// std::bool_constant values.
template <class Launch>
void with_tile_kind(bool fp8, bool csa, Launch&& launch) {
  auto with_csa = [&](auto kFp8) {
    if (csa) {
      launch(kFp8, std::true_type{});
    } else {
      launch(kFp8, std::false_type{});
    }
  };
  if (fp8) {
    with_csa(std::true_type{});
  } else {
    with_csa(std::false_type{});
  }
}

template <int D>
void run_tiles(const TileAttentionParams& p, cudaStream_t stream) {
  with_tile_kind(p.attn.kv_dtype == DType::fp8_e4m3, p.attn.selected != nullptr,
                 [&](auto kFp8, auto kCsa) {
                   if (p.wgmma) {
                     launch_wgmma<D, decltype(kFp8)::value, decltype(kCsa)::value>(p, stream);
                   } else {
                     launch_variant<D, decltype(kFp8)::value, decltype(kCsa)::value>(p, stream);
                   }
                 });
}

template <int D>
size_t tile_smem_bytes(bool fp8) {
  // CSA and SWA share the row layout's sizes.
  return fp8 ? sizeof(TileSmem<RowLayout<D, true, true>>)
             : sizeof(TileSmem<RowLayout<D, false, true>>);
}

}  // namespace step5::cuda::tiled
