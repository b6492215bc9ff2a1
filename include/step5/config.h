// Per-layer configuration (SPEC section 2). One LayerConfig describes one
// attention layer on one tensor-parallel rank.
#pragma once

#include <cstdint>
#include <string>

#include "step5/tensor.h"

namespace step5 {

enum class LayerKind : uint8_t { csa, swa };

const char* layer_kind_name(LayerKind kind);

// Region size of the CSA indexer, in tokens. Fixed by the model family.
constexpr int kRegionSize = 8;

// Largest num_heads and num_kv_heads validate_config accepts (per rank).
constexpr int kMaxHeads = 1024;

struct LayerConfig {
  LayerKind kind = LayerKind::csa;
  int num_heads = 64;            // H, query heads
  int num_kv_heads = 8;          // G, KV heads; num_heads % num_kv_heads == 0
  int head_size = 192;           // D of Q, K and V
  int block_size = 64;           // B, tokens per KV block; a multiple of 8
  DType kv_dtype = DType::bf16;  // bf16 or fp8_e4m3
  float k_scale = 1.0f;          // fp8 only: stored = e4m3(k / k_scale)
  float v_scale = 1.0f;
  float scale = 0.0f;   // softmax scale; 0 means 1/sqrt(head_size)
  int spec_tokens = 0;  // k, MTP draft tokens per verify step (0 = none)

  // CSA only.
  int index_heads = 4;                    // I, indexer heads per KV group
  int index_dim = 256;                    // Di, indexer dim of index keys and summaries
  int topk = 512;                         // K, regions selected per (token, group) row
  DType summary_dtype = DType::fp8_e4m3;  // fp8_e4m3 or bf16

  // SWA only.
  int window = 512;  // W, keys per row including the row itself

  int heads_per_group() const { return num_heads / num_kv_heads; }
  float softmax_scale() const;
  // Rows held per request in the open-region ring: the up to 7 rows of an
  // open region plus k drafts that a later step may rewrite (SPEC 3).
  int ring_capacity() const { return kRegionSize + spec_tokens; }
};

// Throws step5::Error naming the bad field, the allowed values and the value
// given. Called by every operation; engines may call it once up front.
void validate_config(const LayerConfig& config);

std::string describe(const LayerConfig& config);

}  // namespace step5
