// The per-tile choice between the tile kernel and the row kernel for a CSA
// scoring chunk (tiled::CsaTiles::per_tile). A tile's cost follows the
// union of the regions its rows selected, a row's does not; the union is
// known only once the selection has run, so this launch, between the
// selection and the attention, counts it for every planned tile and
// writes which kernel computes each row.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace step5::cuda {

struct TileChoiceParams {
  // The chunk's selection, indexed by (t - row_begin): -1 entries skipped,
  // regions >= bitmap_regions not counted.
  const int32_t* selected = nullptr;  // i32 [num_rows, G, topk] device; not null
  int64_t selected_row_stride = 0;    // elements between rows
  int64_t selected_group_stride = 0;  // elements between groups (innermost contiguous)
  int64_t row_begin = 0;              // step row of selection row 0
  int64_t num_rows = 0;               // rows of the chunk
  int32_t num_groups = 0;             // G
  int32_t topk = 0;                   // K
  const int32_t* tiles = nullptr;     // i32 [num_tiles, 2] device; not null when num_tiles > 0:
                                      // first step row, row count (1..16)
  int32_t num_tiles = 0;
  const int32_t* untiled = nullptr;  // i32 [num_untiled] device; may be null when num_untiled
                                     // is 0: the chunk's step rows in no tile
  int64_t num_untiled = 0;
  // Regions the bitmap holds (a multiple of 32, at most
  // tiled::tile_choice_max_regions()): the plan's score stride rounded up.
  int32_t bitmap_regions = 0;
  // A tile runs as a tile when 16 x (its union summed over the groups)
  // <= crossover x rows x K x G (LayerSchedule::tile_union_crossover).
  float crossover = 0.0f;
  int32_t* tile_runs = nullptr;  // i32 [num_tiles] device; not null: 1 tile kernel, 0 rows
  int32_t* row_list = nullptr;   // i32 [num_rows] device; not null: entry t - row_begin is t
                                 // for a row of the row kernel, -1 for a row of a tile
};

// A chunk's choice in scratch for `rows` rows and at most `rows` tiles:
// tile_runs at 0, row_list at tile_choice_list_offset(rows), each array
// 256-byte aligned, tile_choice_bytes(rows) in all.
size_t tile_choice_list_offset(int64_t rows);
size_t tile_choice_bytes(int64_t rows);

// Writes params.tile_runs and params.row_list. Throws Error(invalid_argument)
// for inconsistent params. Asynchronous on `stream`, a plain launch (the
// tile kernel after it reads tile_runs from its first instruction).
void launch_tile_choice(const TileChoiceParams& params, cudaStream_t stream);

}  // namespace step5::cuda
