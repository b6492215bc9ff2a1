// The engine-facing API on hand-built steps: a uniform plan replayed with
// fewer live requests (CUDA-graph padding by whole requests) and with
// lengths known only on the device, write_kv from a slot mapping alone, and
// the static workspace bound. cpu backend; outputs poisoned with NaN.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "step5/testing/device_memory.h"
#include "step5/testing/step_buffers.h"
#include "test_util.h"

namespace step5 {
namespace {

using sim::DeviceBuffer;

void expect_error(const std::function<void()>& call, ErrorCode code, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "expected " << error_code_name(code) << " containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// One CSA layer's cache for three requests with histories, and the steps
// run on it. Two rigs with the same seed hold identical caches.
struct Rig {
  static constexpr int32_t kRequests = 3, kBlocksPerRequest = 8;
  LayerConfig c = test::csa_config({4, 2, 64, 16}, 4, 1);
  std::unique_ptr<Backend> backend = test::cpu_backend();
  int64_t num_blocks = kRequests * kBlocksPerRequest + 1;
  DeviceBuffer cache{Device::host, cache_bytes_per_block(c) * static_cast<size_t>(num_blocks)};
  DeviceBuffer ring{Device::host, ring_entry_bytes(c) * kRequests};
  LayerCache views = packed_layer_cache(c, cache.data(), num_blocks,
                                        static_cast<int64_t>(cache_bytes_per_block(c)), ring.data(),
                                        kRequests, Device::host);
  std::vector<int32_t> lens{53, 9, 70};
  std::mt19937_64 rng{17};

  Rig() {
    cache.fill(0x5a);
    ring.fill(0x5a);
    run({0, 1, 2}, {0, 0, 0}, lens, 0);  // prefill the histories
  }

  int64_t slot(int32_t r, int32_t p) const {
    return int64_t{block(r, p / c.block_size)} * c.block_size + p % c.block_size;
  }
  int32_t block(int32_t r, int32_t j) const {
    return r * kBlocksPerRequest + (kBlocksPerRequest - 1 - j);  // reversed: paging matters
  }

  sim::StepHost host(const std::vector<int32_t>& rs, const std::vector<int32_t>& start,
                     const std::vector<int32_t>& count) const {
    sim::StepHost h;
    h.max_blocks = kBlocksPerRequest;
    h.query_start_loc.push_back(0);
    for (size_t i = 0; i < rs.size(); ++i) {
      h.query_start_loc.push_back(h.query_start_loc.back() + count[i]);
      h.seq_lens.push_back(start[i] + count[i]);
      h.ring_index.push_back(rs[i]);
      for (int32_t j = 0; j < kBlocksPerRequest; ++j) h.block_table.push_back(block(rs[i], j));
      for (int32_t p = start[i]; p < start[i] + count[i]; ++p) {
        h.slot_mapping.push_back(slot(rs[i], p));
      }
    }
    return h;
  }

  // Inputs of the step (and of any step made of its first rows).
  sim::StepInput inputs(const std::vector<int32_t>& rs, const std::vector<int32_t>& start,
                        const std::vector<int32_t>& count) {
    return sim::random_step(c, rng, rs, start, count, true);
  }

  // Plans requests `rs` (new rows `count` from `start`) after `before_plan`
  // edited the step (host copies), lets `after_plan` change the views (what
  // the device holds when the forward runs) and runs the forward on the
  // first rows of `in`; returns the output [n + 2, H, D].
  using Edit = std::function<void(sim::StepBuffers&)>;
  std::vector<uint16_t> run(const std::vector<int32_t>& rs, const std::vector<int32_t>& start,
                            const std::vector<int32_t>& count, int32_t padding_requests,
                            const sim::StepInput* in = nullptr, const Edit& before_plan = nullptr,
                            const Edit& after_plan = nullptr) {
    sim::StepHost h = host(rs, start, count);
    for (int32_t i = 0; i < padding_requests; ++i) {
      h.query_start_loc.push_back(h.query_start_loc.back());
      h.seq_lens.push_back(0);
      h.ring_index.push_back(0);
      h.block_table.insert(h.block_table.end(), kBlocksPerRequest, 0);
    }
    const int64_t n = h.query_start_loc.back();
    sim::StepBuffers step(Device::host, h, n + 2);
    const sim::StepInput own = in != nullptr ? sim::StepInput{} : inputs(rs, start, count);
    const sim::StepInput& x = in != nullptr ? *in : own;
    if (before_plan) before_plan(step);
    const StepPlan plan = backend->plan(step.desc, {c});
    if (after_plan) after_plan(step);
    DeviceBuffer ws(Device::host, plan.workspace_bytes());
    const Workspace workspace{ws.data(), plan.workspace_bytes()};
    backend->prepare_step(plan, workspace, nullptr);
    std::vector<uint16_t> out(static_cast<size_t>(n + 2) * row_elems(), 0xffff);
    const int64_t G = c.num_kv_heads, H = c.num_heads, D = c.head_size;
    auto view = [](const auto& v, DType dtype, std::initializer_list<int64_t> shape) {
      return TensorView::contiguous(const_cast<void*>(static_cast<const void*>(v.data())), dtype,
                                    shape);
    };
    CsaInputs io;
    io.query = view(x.query, DType::bf16, {n, H, D});
    io.key = view(x.key, DType::bf16, {n, G, D});
    io.value = view(x.value, DType::bf16, {n, G, D});
    io.index_query = view(x.index_query, DType::bf16, {n, G, c.index_heads, c.index_dim});
    io.index_weight = view(x.index_weight, DType::f32, {n, G, c.index_heads});
    io.index_key = view(x.index_key, DType::bf16, {n, c.index_dim});
    io.index_z = view(x.index_z, DType::f32, {n});
    io.gate = view(x.gate, DType::bf16, {n, H});
    LayerOutputs outs;
    outs.output = TensorView::contiguous(out.data(), DType::bf16, {n + 2, H, D});
    last_kind = plan.kind;
    last_output = out;  // the poison, for callers that expect an error
    backend->forward_csa(c, step.desc, plan, io, views, outs, workspace, nullptr);
    last_output = out;
    return out;
  }

  size_t row_elems() const { return static_cast<size_t>(c.num_heads * c.head_size); }

  std::vector<uint16_t> last_output;
  StepKind last_kind = StepKind::empty;
};

// A verify step planned for three live requests (as captured in a graph)
// runs with only two live on the device: request 2 padded away (no rows,
// length 0, slot -1). Rows 0..3 equal a step planned for two requests on
// the same inputs, request 2's rows and the padding rows are zero, and
// request 2's cache is untouched.
TEST(PaddingRequests, UniformPlanServesFewerLiveRequests) {
  Rig padded, reference;
  const std::vector<int32_t> count{2, 2, 2};
  const sim::StepInput in = padded.inputs({0, 1, 2}, padded.lens, count);
  const std::vector<uint8_t> cache_before = padded.cache.to_vector<uint8_t>(padded.cache.bytes());
  const std::vector<uint8_t> ring_before = padded.ring.to_vector<uint8_t>(padded.ring.bytes());
  const std::vector<uint16_t> want =
      reference.run({0, 1}, {padded.lens[0], padded.lens[1]}, {2, 2}, 0, &in);
  const std::vector<uint16_t> got =
      padded.run({0, 1, 2}, padded.lens, count, 0, &in, nullptr, [&](sim::StepBuffers& step) {
        auto* qsl = static_cast<int32_t*>(step.query_start_loc.data());
        auto* lens = static_cast<int32_t*>(step.seq_lens.data());
        auto* slots = static_cast<int64_t*>(step.slot_mapping.data());
        qsl[3] = 4;
        lens[2] = 0;
        slots[4] = -1;
        slots[5] = padded.slot(2, 0);  // stale: a padding row must not be written
      });
  EXPECT_EQ(padded.last_kind, StepKind::uniform);
  const auto e = static_cast<std::ptrdiff_t>(padded.row_elems());
  ASSERT_EQ(static_cast<std::ptrdiff_t>(want.size()), 6 * e);
  EXPECT_TRUE(std::equal(want.begin(), want.begin() + 4 * e, got.begin()))
      << "live rows differ from the step planned without the padding request";
  EXPECT_TRUE(std::all_of(got.begin() + 4 * e, got.end(), [](uint16_t b) { return b == 0; }))
      << "rows of the padding request and padding rows expected +0";
  const std::vector<uint8_t> after = padded.cache.to_vector<uint8_t>(padded.cache.bytes());
  const size_t block_bytes = cache_bytes_per_block(padded.c);
  for (int32_t j = 0; j < Rig::kBlocksPerRequest; ++j) {
    const size_t at = static_cast<size_t>(padded.block(2, j)) * block_bytes;
    EXPECT_EQ(0, std::memcmp(cache_before.data() + at, after.data() + at, block_bytes))
        << "block " << j << " of the padding request was written";
  }
  const size_t entry = ring_entry_bytes(padded.c);
  EXPECT_EQ(
      0, std::memcmp(ring_before.data() + 2 * entry,
                     padded.ring.to_vector<uint8_t>(padded.ring.bytes()).data() + 2 * entry, entry))
      << "the padding request's ring entry was written";
}

// Padding requests planned directly (trailing, length 0, any ring entry)
// keep a decode step uniform and change nothing for the live requests.
TEST(PaddingRequests, PlannedPaddingIsUniform) {
  Rig padded, reference;
  const std::vector<int32_t> count{1, 1, 1};
  const sim::StepInput in = padded.inputs({0, 1, 2}, padded.lens, count);
  const std::vector<uint16_t> want = reference.run({0, 1, 2}, padded.lens, count, 0, &in);
  const std::vector<uint16_t> got = padded.run({0, 1, 2}, padded.lens, count, 2, &in);
  EXPECT_EQ(padded.last_kind, StepKind::uniform);
  EXPECT_EQ(want, got);
  // Padding requests in the middle make the step mixed (rows are found by
  // request then); the results are the same.
  Rig middle;
  const std::vector<uint16_t> mixed = middle.run({0, 1, 2}, padded.lens, count, 0, &in,
                                                 [&](sim::StepBuffers& step) { (void)step; });
  EXPECT_EQ(want, mixed);
}

// Lengths known only on the device: the plan reads upper bounds (2 above
// the truth) and the forward the exact lengths: the same outputs as an
// exact plan, for a mixed step and a uniform verify step.
TEST(UpperBoundSeqLens, ForwardReadsDeviceLengths) {
  for (bool uniform : {false, true}) {
    Rig bounded, exact;
    const std::vector<int32_t> start =
        uniform ? exact.lens : std::vector<int32_t>{exact.lens[0] - 1, 4, exact.lens[2]};
    const std::vector<int32_t> count =
        uniform ? std::vector<int32_t>{2, 2, 2} : std::vector<int32_t>{3, 12, 2};
    const sim::StepInput in = exact.inputs({0, 1, 2}, start, count);
    const std::vector<uint16_t> want = exact.run({0, 1, 2}, start, count, 0, &in);
    std::vector<int32_t> bounds;
    const std::vector<uint16_t> got =
        bounded.run({0, 1, 2}, start, count, 0, &in, [&](sim::StepBuffers& step) {
          bounds = step.host.seq_lens;
          for (int32_t& b : bounds) b += 2;
          step.desc.host_seq_lens = bounds.data();
          step.desc.seq_lens_upper_bound = true;
        });
    EXPECT_EQ(bounded.last_kind, uniform ? StepKind::uniform : StepKind::mixed);
    EXPECT_EQ(want, got) << (uniform ? "uniform" : "mixed");
  }
}

// A device length above the host's bound (or below the query rows) is the
// engine's bug; the cpu backend reports it and writes nothing.
TEST(UpperBoundSeqLens, DeviceLengthOutsideTheBoundIsAnError) {
  for (int32_t delta : {3, -40}) {
    Rig rig;
    const std::vector<int32_t> start{rig.lens[0], 4, rig.lens[2]};
    const std::vector<int32_t> count{1, 12, 2};
    std::vector<int32_t> bounds;
    const std::vector<uint8_t> cache_before = rig.cache.to_vector<uint8_t>(rig.cache.bytes());
    expect_error(
        [&] {
          rig.run(
              {0, 1, 2}, start, count, 0, nullptr,
              [&](sim::StepBuffers& step) {
                bounds = step.host.seq_lens;
                for (int32_t& b : bounds) b += 2;
                step.desc.host_seq_lens = bounds.data();
                step.desc.seq_lens_upper_bound = true;
              },
              [&](sim::StepBuffers& step) {
                static_cast<int32_t*>(step.seq_lens.data())[1] += delta;
              });
        },
        ErrorCode::invalid_argument, "step.seq_lens[1] (read at run time)");
    EXPECT_TRUE(std::all_of(rig.last_output.begin(), rig.last_output.end(),
                            [](uint16_t b) { return b == 0xffff; }));
    EXPECT_EQ(cache_before, rig.cache.to_vector<uint8_t>(rig.cache.bytes()));
  }
}

// write_kv from a slot mapping alone stores what the planned write_kv
// stores, skips slots of -1 (padding) and rejects slots past the cache.
TEST(WriteKvSlots, MatchesThePlannedWrite) {
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    Rig planned, slots_only;
    planned.c = slots_only.c = test::csa_config({4, 2, 64, 16}, 4, 1, kv);
    for (Rig* r : {&planned, &slots_only}) {
      r->views = packed_layer_cache(r->c, r->cache.data(), r->num_blocks,
                                    static_cast<int64_t>(cache_bytes_per_block(r->c)),
                                    r->ring.data(), Rig::kRequests, Device::host);
    }
    const std::vector<int32_t> start{60, 0, 3}, count{5, 17, 1};
    sim::StepBuffers step(Device::host, planned.host({0, 1, 2}, start, count), 0);
    const StepPlan plan = planned.backend->plan(step.desc, {planned.c});
    const int64_t n = 23, G = 2, D = 64;
    const std::vector<uint16_t> key = test::random_bf16(planned.rng, 23 * 2 * 64);
    const std::vector<uint16_t> value = test::random_bf16(planned.rng, 23 * 2 * 64);
    const TensorView k =
        TensorView::contiguous(const_cast<uint16_t*>(key.data()), DType::bf16, {n, G, D});
    const TensorView v =
        TensorView::contiguous(const_cast<uint16_t*>(value.data()), DType::bf16, {n, G, D});
    planned.backend->write_kv(planned.c, step.desc, plan, k, v, planned.views.kv, nullptr);
    slots_only.backend->write_kv(slots_only.c, step.desc.slot_mapping, k, v, slots_only.views.kv,
                                 nullptr);
    EXPECT_EQ(planned.cache.to_vector<uint8_t>(planned.cache.bytes()),
              slots_only.cache.to_vector<uint8_t>(slots_only.cache.bytes()));

    // -1 rows are skipped: only row 1 lands.
    std::vector<int64_t> pad{-1, slots_only.slot(2, 100), -1};
    const std::vector<uint8_t> before =
        slots_only.cache.to_vector<uint8_t>(slots_only.cache.bytes());
    slots_only.backend->write_kv(slots_only.c, TensorView::contiguous(pad.data(), DType::i64, {3}),
                                 k, v, slots_only.views.kv, nullptr);
    const std::vector<uint8_t> after =
        slots_only.cache.to_vector<uint8_t>(slots_only.cache.bytes());
    size_t changed = 0;
    for (size_t i = 0; i < before.size(); ++i) changed += before[i] != after[i] ? 1 : 0;
    EXPECT_GT(changed, 0u);
    EXPECT_LE(changed, 2u * 2u * 64u * dtype_size(kv)) << "more than one token's K/V changed";

    std::vector<int64_t> bad{0, slots_only.num_blocks * 16};
    expect_error(
        [&] {
          slots_only.backend->write_kv(slots_only.c,
                                       TensorView::contiguous(bad.data(), DType::i64, {2}), k, v,
                                       slots_only.views.kv, nullptr);
        },
        ErrorCode::out_of_range, "slot_mapping[1]");
    expect_error(
        [&] {
          std::vector<int64_t> many(24, 0);
          slots_only.backend->write_kv(slots_only.c,
                                       TensorView::contiguous(many.data(), DType::i64, {24}), k, v,
                                       slots_only.views.kv, nullptr);
        },
        ErrorCode::invalid_argument, "key");
  }
}

}  // namespace
}  // namespace step5
