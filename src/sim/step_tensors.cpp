#include "step5/testing/step_tensors.h"

namespace step5::sim {

namespace {

// Elements of an [n, dims...] tensor, in size_t (validate_config bounds
// every factor; no product is formed in int).
size_t elements(int64_t n, std::initializer_list<int64_t> dims) {
  auto count = static_cast<size_t>(n);
  for (int64_t d : dims) count *= static_cast<size_t>(d);
  return count;
}

}  // namespace

StepTensors::StepTensors(Device device, const LayerConfig& c, const StepInput& in)
    : query(device, "query", in.query, elements(in.num_tokens(), {c.num_heads, c.head_size}),
            {in.num_tokens(), c.num_heads, c.head_size}),
      key(device, "key", in.key, elements(in.num_tokens(), {c.num_kv_heads, c.head_size}),
          {in.num_tokens(), c.num_kv_heads, c.head_size}),
      value(device, "value", in.value, elements(in.num_tokens(), {c.num_kv_heads, c.head_size}),
            {in.num_tokens(), c.num_kv_heads, c.head_size}),
      gate(device, "gate", in.gate, elements(in.num_tokens(), {c.num_heads}),
           {in.num_tokens(), c.num_heads}, true),
      index_query(device, "index_query", in.index_query,
                  elements(in.num_tokens(), {c.num_kv_heads, c.index_heads, c.index_dim}),
                  {in.num_tokens(), c.num_kv_heads, c.index_heads, c.index_dim},
                  c.kind != LayerKind::csa),
      index_weight(device, "index_weight", in.index_weight,
                   elements(in.num_tokens(), {c.num_kv_heads, c.index_heads}),
                   {in.num_tokens(), c.num_kv_heads, c.index_heads}, c.kind != LayerKind::csa),
      index_key(device, "index_key", in.index_key, elements(in.num_tokens(), {c.index_dim}),
                {in.num_tokens(), c.index_dim}, c.kind != LayerKind::csa),
      index_z(device, "index_z", in.index_z, elements(in.num_tokens(), {}), {in.num_tokens()},
              c.kind != LayerKind::csa) {}

void StepTensors::upload(const StepInput& in) {
  auto refill = [](InputTensor& t, const auto& data) {
    if (t.view.present()) t.buffer.upload(data.data(), data.size() * sizeof(data[0]));
  };
  refill(query, in.query);
  refill(key, in.key);
  refill(value, in.value);
  refill(gate, in.gate);
  refill(index_query, in.index_query);
  refill(index_weight, in.index_weight);
  refill(index_key, in.index_key);
  refill(index_z, in.index_z);
}

}  // namespace step5::sim
