// AttentionStep: plan once per step, then every layer's forward and the
// single operations. Arguments keep the names engines use; stream is a
// CUDA stream handle as an integer (0: the default stream; ignored on cpu).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "attention_step.h"
#include "bindings.h"

namespace step5::python {

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using OptIn = std::optional<InArray>;
using OptOut = std::optional<OutArray>;

void plan(AttentionStep& step, InArray query_start_loc, InArray seq_lens, InArray block_table,
          InArray slot_mapping, OptIn ring_index, OptIn query_start_loc_cpu, OptIn seq_lens_cpu,
          OptIn block_table_cpu, OptIn slot_mapping_cpu, OptIn ring_index_cpu,
          int64_t num_output_rows, int64_t max_context, std::optional<size_t> max_score_bytes,
          bool seq_lens_upper_bound, const std::string& tile_attention, OptOut workspace,
          uintptr_t stream) {
  StepArrays arrays{std::move(query_start_loc),  std::move(seq_lens),
                    std::move(block_table),      std::move(slot_mapping),
                    std::move(ring_index),       std::move(query_start_loc_cpu),
                    std::move(seq_lens_cpu),     std::move(block_table_cpu),
                    std::move(slot_mapping_cpu), std::move(ring_index_cpu)};
  StepOptions options;
  options.num_output_rows = num_output_rows;
  options.max_context = max_context;
  options.max_score_bytes = max_score_bytes;
  options.seq_lens_upper_bound = seq_lens_upper_bound;
  if (tile_attention == "always") {
    options.tile_attention = TileAttention::always;
  } else if (tile_attention == "never") {
    options.tile_attention = TileAttention::never;
  } else if (tile_attention != "auto") {
    throw nb::value_error(("tile_attention: expected \"auto\", \"always\" or \"never\", got \"" +
                           tile_attention + "\"")
                              .c_str());
  }
  step.plan(std::move(arrays), options, std::move(workspace), stream);
}

std::vector<std::pair<int64_t, int64_t>> chunks(const AttentionStep& step) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const ScoreChunk& c : step.step_plan().chunks) out.emplace_back(c.rows.begin, c.rows.end);
  return out;
}

}  // namespace

void bind_attention_step(nb::module_& m) {
  nb::class_<BoundCache>(m, "BoundCache",
                         "A layer's kv_cache (and CSA ring) converted once by "
                         "AttentionWrapper.bind_cache; holds the arrays.");
  nb::class_<AttentionStep>(m, "AttentionStep")
      .def(nb::init<std::shared_ptr<BackendHandle>, std::vector<LayerConfig>>(), "backend"_a,
           "layers"_a)
      .def("plan", &plan, "query_start_loc"_a, "seq_lens"_a, "block_table"_a, "slot_mapping"_a,
           "ring_index"_a.none() = nb::none(), nb::kw_only(),
           "query_start_loc_cpu"_a.none() = nb::none(), "seq_lens_cpu"_a.none() = nb::none(),
           "block_table_cpu"_a.none() = nb::none(), "slot_mapping_cpu"_a.none() = nb::none(),
           "ring_index_cpu"_a.none() = nb::none(), "num_output_rows"_a = 0, "max_context"_a = 0,
           "max_score_bytes"_a.none() = nb::none(), "seq_lens_upper_bound"_a = false,
           "tile_attention"_a = "auto", "workspace"_a.none() = nb::none(), "stream"_a = 0)
      .def("forward_csa", &AttentionStep::forward_csa, "config"_a, "query"_a, "key"_a.none(),
           "value"_a.none(), "index_query"_a, "index_weight"_a, "index_key"_a.none(),
           "index_z"_a.none(), "kv_cache"_a, "ring"_a.none(), "out"_a, "gate"_a.none() = nb::none(),
           "selected"_a.none() = nb::none(), "flags"_a = 0u, "stream"_a = 0)
      .def("forward_swa", &AttentionStep::forward_swa, "config"_a, "query"_a, "key"_a.none(),
           "value"_a.none(), "kv_cache"_a, "out"_a, "gate"_a.none() = nb::none(), "flags"_a = 0u,
           "stream"_a = 0)
      .def("bind_cache", &AttentionStep::bind_cache, "config"_a, "kv_cache"_a,
           "ring"_a.none() = nb::none())
      .def("forward_csa_bound", &AttentionStep::forward_csa_bound, "config"_a, "query"_a,
           "key"_a.none(), "value"_a.none(), "index_query"_a, "index_weight"_a,
           "index_key"_a.none(), "index_z"_a.none(), "cache"_a, "out"_a,
           "gate"_a.none() = nb::none(), "selected"_a.none() = nb::none(), "flags"_a = 0u,
           "stream"_a = 0)
      .def("forward_swa_bound", &AttentionStep::forward_swa_bound, "config"_a, "query"_a,
           "key"_a.none(), "value"_a.none(), "cache"_a, "out"_a, "gate"_a.none() = nb::none(),
           "flags"_a = 0u, "stream"_a = 0)
      .def("write_kv", &AttentionStep::write_kv, "config"_a, "key"_a, "value"_a, "kv_cache"_a,
           "stream"_a = 0)
      .def("update_summaries", &AttentionStep::update_summaries, "config"_a, "index_key"_a,
           "index_z"_a, "kv_cache"_a, "ring"_a, "stream"_a = 0)
      .def("indexer_scores", &AttentionStep::indexer_scores, "config"_a, "index_query"_a,
           "index_weight"_a, "kv_cache"_a, "scores"_a, "rows"_a.none() = nb::none(), "stream"_a = 0)
      .def("select_regions", &AttentionStep::select_regions, "config"_a, "scores"_a.none(),
           "selected"_a, "rows"_a.none() = nb::none(), "stream"_a = 0)
      .def("sparse_attention", &AttentionStep::sparse_attention, "config"_a, "query"_a,
           "selected"_a, "kv_cache"_a, "out"_a, "gate"_a.none() = nb::none(),
           "rows"_a.none() = nb::none(), "stream"_a = 0)
      .def("window_attention", &AttentionStep::window_attention, "config"_a, "query"_a,
           "kv_cache"_a, "out"_a, "gate"_a.none() = nb::none(), "stream"_a = 0)
      .def_prop_ro("planned", &AttentionStep::planned)
      .def_prop_ro("layers", &AttentionStep::layers)
      .def_prop_ro("workspace_bytes",
                   [](const AttentionStep& s) { return s.step_plan().workspace_bytes(); })
      .def_prop_ro(
          "step_kind",
          [](const AttentionStep& s) { return std::string(step_kind_name(s.step_plan().kind)); })
      .def_prop_ro("num_tokens", [](const AttentionStep& s) { return s.step_plan().num_tokens; })
      .def_prop_ro("num_requests",
                   [](const AttentionStep& s) { return s.step_plan().num_requests; })
      .def_prop_ro("num_output_rows",
                   [](const AttentionStep& s) { return s.step_plan().num_output_rows; })
      .def_prop_ro("max_seq_len", [](const AttentionStep& s) { return s.step_plan().max_seq_len; })
      .def_prop_ro("max_closed", [](const AttentionStep& s) { return s.step_plan().max_closed; })
      .def_prop_ro("score_stride",
                   [](const AttentionStep& s) { return s.step_plan().score_stride; })
      .def_prop_ro("chunks", &chunks);
}

}  // namespace step5::python
