// LayerConfig and the cache sizes, with enums as the strings the library
// prints ("csa", "swa", "bf16", "fp8_e4m3").
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "errors.h"
#include "step5/attention.h"
#include "step5/cache.h"
#include "step5/config.h"

namespace step5::python {

namespace nb = nanobind;
using namespace nb::literals;

namespace {

LayerKind parse_kind(const std::string& text) {
  if (text == "csa") return LayerKind::csa;
  if (text == "swa") return LayerKind::swa;
  fail_argument("config.kind: expected 'csa' or 'swa', got '" + text + "'");
}

DType parse_storage(const char* field, const std::string& text) {
  if (text == "bf16") return DType::bf16;
  if (text == "fp8_e4m3") return DType::fp8_e4m3;
  fail_argument(std::string("config.") + field + ": expected 'bf16' or 'fp8_e4m3', got '" + text +
                "'");
}

}  // namespace

void bind_config(nb::module_& m) {
  const LayerConfig d;
  nb::class_<LayerConfig>(m, "LayerConfig",
                          "One attention layer on one tensor-parallel rank (SPEC section 2).")
      .def(
          "__init__",
          [](LayerConfig* self, const std::string& kind, int num_heads, int num_kv_heads,
             int head_size, int block_size, const std::string& kv_dtype, float k_scale,
             float v_scale, float scale, int spec_tokens, int index_heads, int index_dim, int topk,
             const std::string& summary_dtype, int window) {
            LayerConfig c;
            c.kind = parse_kind(kind);
            c.num_heads = num_heads;
            c.num_kv_heads = num_kv_heads;
            c.head_size = head_size;
            c.block_size = block_size;
            c.kv_dtype = parse_storage("kv_dtype", kv_dtype);
            c.k_scale = k_scale;
            c.v_scale = v_scale;
            c.scale = scale;
            c.spec_tokens = spec_tokens;
            c.index_heads = index_heads;
            c.index_dim = index_dim;
            c.topk = topk;
            c.summary_dtype = parse_storage("summary_dtype", summary_dtype);
            c.window = window;
            validate_config(c);
            new (self) LayerConfig(c);
          },
          nb::kw_only(), "kind"_a = "csa", "num_heads"_a = d.num_heads,
          "num_kv_heads"_a = d.num_kv_heads, "head_size"_a = d.head_size,
          "block_size"_a = d.block_size, "kv_dtype"_a = "bf16", "k_scale"_a = d.k_scale,
          "v_scale"_a = d.v_scale, "scale"_a = d.scale, "spec_tokens"_a = d.spec_tokens,
          "index_heads"_a = d.index_heads, "index_dim"_a = d.index_dim, "topk"_a = d.topk,
          "summary_dtype"_a = "fp8_e4m3", "window"_a = d.window,
          "Keyword arguments as in step5::LayerConfig; SPEC reference values by default. "
          "Raises ValueError naming the first bad field.")
      .def_prop_rw(
          "kind", [](const LayerConfig& c) { return std::string(layer_kind_name(c.kind)); },
          [](LayerConfig& c, const std::string& v) { c.kind = parse_kind(v); })
      .def_rw("num_heads", &LayerConfig::num_heads)
      .def_rw("num_kv_heads", &LayerConfig::num_kv_heads)
      .def_rw("head_size", &LayerConfig::head_size)
      .def_rw("block_size", &LayerConfig::block_size)
      .def_prop_rw(
          "kv_dtype", [](const LayerConfig& c) { return std::string(dtype_name(c.kv_dtype)); },
          [](LayerConfig& c, const std::string& v) { c.kv_dtype = parse_storage("kv_dtype", v); })
      .def_rw("k_scale", &LayerConfig::k_scale)
      .def_rw("v_scale", &LayerConfig::v_scale)
      .def_rw("scale", &LayerConfig::scale)
      .def_rw("spec_tokens", &LayerConfig::spec_tokens)
      .def_rw("index_heads", &LayerConfig::index_heads)
      .def_rw("index_dim", &LayerConfig::index_dim)
      .def_rw("topk", &LayerConfig::topk)
      .def_prop_rw(
          "summary_dtype",
          [](const LayerConfig& c) { return std::string(dtype_name(c.summary_dtype)); },
          [](LayerConfig& c, const std::string& v) {
            c.summary_dtype = parse_storage("summary_dtype", v);
          })
      .def_rw("window", &LayerConfig::window)
      .def_prop_ro("softmax_scale", &LayerConfig::softmax_scale)
      .def_prop_ro("heads_per_group", &LayerConfig::heads_per_group)
      .def_prop_ro("ring_capacity", &LayerConfig::ring_capacity)
      .def("validate", &validate_config, "Raises ValueError naming the first bad field.")
      .def("__repr__", [](const LayerConfig& c) { return "LayerConfig(" + describe(c) + ")"; });

  m.def("kv_bytes_per_block", &kv_bytes_per_block, "config"_a,
        "Bytes of K/V in one cache block: G * B * 2D * sizeof(kv_dtype).");
  m.def("summary_bytes_per_block", &summary_bytes_per_block, "config"_a,
        "Bytes of CSA region summaries in one block (0 for SWA).");
  m.def("cache_bytes_per_block", &cache_bytes_per_block, "config"_a,
        "Bytes one block of the packed layout needs (K/V, then summaries, 16-byte rounded).");
  m.def("ring_row_bytes", &ring_row_bytes, "config"_a, "Bytes of one CSA ring row.");
  m.def("ring_entry_bytes", &ring_entry_bytes, "config"_a,
        "Bytes of one request's CSA ring entry (ring_capacity rows).");
  m.def(
      "interleaved_blocks",
      [](const std::vector<LayerConfig>& layers) {
        const InterleavedBlocks b = interleaved_blocks(layers);
        return std::make_pair(b.block_stride, b.layer_offset);
      },
      "layers"_a,
      "The seed's BLNHC layout, the layer dimension inside the block: (block_stride, "
      "layer_offsets). Layer i's cache is bytes [offset_i, offset_i + cache_bytes_per_block) "
      "of every block_stride-byte block, e.g. storage[:, offset_i:] of a [num_blocks, "
      "block_stride] uint8 array.");
  // ForwardFlags bits (step5_attention.AttentionWrapper takes them as keywords).
  m.attr("FORWARD_SKIP_KV_WRITE") = static_cast<uint32_t>(ForwardFlags::skip_kv_write);
  m.attr("FORWARD_SKIP_SUMMARY_UPDATE") = static_cast<uint32_t>(ForwardFlags::skip_summary_update);
  m.attr("FORWARD_SKIP_PADDING_ZERO") = static_cast<uint32_t>(ForwardFlags::skip_padding_zero);
}

}  // namespace step5::python
