// Layer shapes the tool's runs share.
#pragma once

#include "step5/config.h"

namespace step5::tool {

// A reduced Step5 layer for runs that check every step against the oracle
// on two cores (demo, soak with its default shapes): fewer heads, a smaller
// indexer, a short top-k and window, SPEC 2's D and B (layers.cpp says why).
LayerConfig reduced_layer(LayerKind kind, int spec_tokens, DType kv_dtype);

}  // namespace step5::tool
