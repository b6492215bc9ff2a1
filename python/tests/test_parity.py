"""The Python package against the library's oracle and an independent
numpy reference, on every array kit (numpy and torch on the cpu backend,
torch on cuda where a usable GPU is present)."""

import numpy as np
import pytest

import step5_attention as s5
from engine import (SCHEDULE, POISON_BF16, Engine, compare, csa_config, device_inputs, forward,
                    make_wrapper, random_inputs, storage_ulp, swa_config)
from step5_attention import testing

PADDING_ROWS = 2


def run_and_check(kit, backend, configs, interleaved=False, seed=1):
    """Runs SCHEDULE through every layer with one plan per step, checking
    each layer's every step against the oracle; returns steps checked."""
    engine = Engine(kit, configs, max_requests=3, blocks_per_request=6, seed=seed,
                    interleaved=interleaved)
    wrapper = make_wrapper(kit, backend, configs)
    rng = np.random.default_rng(seed)
    exact = kit.backend_kind == "cpu"
    checked = 0
    for step, schedule in enumerate(SCHEDULE):
        meta = engine.step(schedule)
        n = meta.num_tokens
        engine.plan(wrapper, meta, num_output_rows=n + PADDING_ROWS)
        for layer, c in enumerate(configs):
            inputs = random_inputs(c, n, rng)
            out = kit.bf16_empty((n + PADDING_ROWS, c.num_heads, c.head_size), POISON_BF16)
            selected = kit.int32((n, c.num_kv_heads, c.topk), 0x7F7F7F7F) if c.kind == "csa" \
                else None
            forward(wrapper, engine, layer, device_inputs(kit, inputs), out, selected)
            kit.sync()
            engine.commit(layer, meta, inputs)
            out_bits = kit.bf16_numpy(out)
            assert (out_bits[n:] == 0).all(), f"step {step}: padding rows past n must be zero"
            label = f"step {step} layer {layer} ({c.kind})"
            if c.kind == "csa":
                got_sel = kit.numpy(selected)
                forced = None if exact else got_sel
                ref, ref_sel, acceptable = engine.oracle(layer, meta, inputs, selected=forced)
                if exact:
                    np.testing.assert_array_equal(got_sel, ref_sel, err_msg=label)
                else:
                    assert acceptable.all(), f"{label}: selection not among the top-k"
                for request in set(meta.requests):
                    h = engine.layers[layer].histories[request]
                    want = testing.oracle_summaries(c, h.index_key, h.index_z)
                    got = engine.summaries(layer, request)
                    if exact:  # the cpu backend runs the SPEC's fp32 formula in order
                        np.testing.assert_array_equal(got, want, err_msg=f"{label} summaries")
                    else:
                        ulp = storage_ulp(want, c.summary_dtype)
                        assert (np.abs(got - want) <= ulp).all(), f"{label}: summaries"
            else:
                ref, _, _ = engine.oracle(layer, meta, inputs)
            compare(out_bits[:n], ref)
            checked += 1
    return checked


def test_csa_and_swa_layers_match_oracle(kit, backend):
    assert run_and_check(kit, backend, [csa_config(), swa_config()]) == 2 * len(SCHEDULE)


def test_fp8_kv_and_bf16_summaries_match_oracle(kit, backend):
    configs = [csa_config(kv_dtype="fp8_e4m3", k_scale=0.5, v_scale=1.5, summary_dtype="bf16"),
               swa_config(kv_dtype="fp8_e4m3", k_scale=0.25, v_scale=0.75)]
    assert run_and_check(kit, backend, configs, seed=2) == 2 * len(SCHEDULE)


def test_one_plan_serves_layers_of_a_multi_layer_cache(kit, backend):
    """Two CSA layers and an SWA layer whose blocks interleave in one array
    ([blocks, layers, bytes]): each layer sees its cache through a block
    stride larger than its own bytes, all on one plan per step."""
    configs = [csa_config(), swa_config(), csa_config(topk=6, index_heads=1)]
    assert run_and_check(kit, backend, configs, interleaved=True, seed=3) == 3 * len(SCHEDULE)


def dense_reference(c, key, value, positions, query, gate):
    """Causal softmax attention over positions 0..p in float64 numpy, with
    the sigmoid gate: what CSA (C <= K) and SWA (W > p) both reduce to."""
    H, G = c.num_heads, c.num_kv_heads
    out = np.zeros((len(positions), H, c.head_size))
    for t, p in enumerate(positions):
        for h in range(H):
            g = h // (H // G)
            k = key[: p + 1, g].astype(np.float64)
            v = value[: p + 1, g].astype(np.float64)
            logits = c.softmax_scale * (k @ query[t, h].astype(np.float64))
            w = np.exp(logits - logits.max())
            out[t, h] = (w / w.sum()) @ v
            out[t, h] /= 1.0 + np.exp(-np.float64(gate[t, h]))
    return out


def test_layers_reduce_to_dense_causal_attention(kit, backend):
    """Independent of the oracle: with K above every row's closed regions
    and a window above every position, both layers equal numpy's dense
    causal attention, and so each other."""
    configs = [csa_config(topk=16), swa_config(window=200)]
    engine = Engine(kit, configs, max_requests=3, blocks_per_request=6, seed=4)
    wrapper = make_wrapper(kit, backend, configs)
    rng = np.random.default_rng(4)
    for schedule in SCHEDULE[:3]:
        meta = engine.step(schedule)
        n = meta.num_tokens
        engine.plan(wrapper, meta)
        shared = random_inputs(configs[0], n, rng)
        outputs = []
        for layer, c in enumerate(configs):
            out = kit.bf16_empty((n, c.num_heads, c.head_size))
            forward(wrapper, engine, layer, device_inputs(kit, shared), out)
            kit.sync()
            engine.commit(layer, meta, shared)
            outputs.append(kit.bf16_numpy(out))
        ref = np.zeros((n, configs[0].num_heads, configs[0].head_size))
        positions = meta.positions()
        query = testing.bf16_values(shared["query"])
        gate = testing.bf16_values(shared["gate"])
        for i, request in enumerate(meta.requests):
            rows = slice(int(meta.query_start_loc[i]), int(meta.query_start_loc[i + 1]))
            h = engine.layers[0].histories[request]
            ref[rows] = dense_reference(configs[0], h.key, h.value, positions[rows], query[rows],
                                        gate[rows])
        compare(outputs[0], ref)
        compare(outputs[1], ref)


def test_single_operations_compose_to_the_forward(kit, backend):
    """write_kv, update_summaries, then per scoring chunk indexer_scores,
    select_regions and sparse_attention give the CSA forward's output and
    selection; write_kv then window_attention give the SWA forward's."""
    configs = [csa_config(), swa_config()]
    whole = Engine(kit, configs, max_requests=3, blocks_per_request=6, seed=5)
    staged = Engine(kit, configs, max_requests=3, blocks_per_request=6, seed=5)
    w_whole = make_wrapper(kit, backend, configs)
    w_staged = make_wrapper(kit, backend, configs)
    rng = np.random.default_rng(5)
    csa, swa = configs
    exact = kit.backend_kind == "cpu"
    for schedule in SCHEDULE:
        meta = whole.step(schedule)
        n = meta.num_tokens
        whole.plan(w_whole, meta)
        staged.plan(w_staged, meta)
        for layer, c in enumerate(configs):
            host = random_inputs(c, n, rng)
            x = device_inputs(kit, host)
            ref_out = kit.bf16_empty((n, c.num_heads, c.head_size))
            ref_sel = kit.int32((n, c.num_kv_heads, c.topk)) if c.kind == "csa" else None
            forward(w_whole, whole, layer, x, ref_out, ref_sel)
            out = kit.bf16_empty((n, c.num_heads, c.head_size))
            state = staged.layers[layer]
            w_staged.write_kv(c, x["key"], x["value"], kv_cache=state.kv_cache)
            if c is csa:
                w_staged.update_summaries(c, x["index_key"], x["index_z"],
                                          kv_cache=state.kv_cache, ring=state.ring)
                selected = kit.int32((n, c.num_kv_heads, c.topk))
                for begin, end in w_staged.chunks:
                    scores = kit.float32((end - begin, c.num_kv_heads,
                                          max(w_staged.score_stride, 1)))
                    w_staged.indexer_scores(c, x["index_query"], x["index_weight"],
                                            kv_cache=state.kv_cache, scores=scores,
                                            rows=(begin, end))
                    w_staged.select_regions(c, scores, selected=selected[begin:end],
                                            rows=(begin, end))
                    w_staged.sparse_attention(c, x["query"], selected[begin:end],
                                              kv_cache=state.kv_cache, out=out, gate=x["gate"],
                                              rows=(begin, end))
                kit.sync()
                if exact:
                    np.testing.assert_array_equal(kit.numpy(selected), kit.numpy(ref_sel))
            else:
                assert c is swa
                w_staged.window_attention(c, x["query"], kv_cache=state.kv_cache, out=out,
                                          gate=x["gate"])
            kit.sync()
            if exact:  # the same cpu kernels in the same order
                np.testing.assert_array_equal(kit.bf16_numpy(out), kit.bf16_numpy(ref_out))
            else:  # a fused forward may round differently from the staged kernels
                compare(kit.bf16_numpy(out),
                        testing.bf16_values(kit.bf16_numpy(ref_out)).astype(np.float64))
            whole.commit(layer, meta, host)
            staged.commit(layer, meta, host)


def test_strided_inputs_are_read_in_place(kit, backend):
    """Outer strides are free: a query sliced out of a wider array (as from
    a fused QKV projection) gives the same output as a dense copy."""
    c = swa_config()
    engine = Engine(kit, [c], max_requests=1, blocks_per_request=4, seed=6)
    wrapper = make_wrapper(kit, backend, [c])
    rng = np.random.default_rng(6)
    meta = engine.step([(0, 0, 12)])
    engine.plan(wrapper, meta)
    host = random_inputs(c, 12, rng)
    x = device_inputs(kit, host)
    wide = np.concatenate([host["query"], np.zeros_like(host["query"])], axis=2)
    strided = kit.bf16(wide)[:, :, : c.head_size]
    dense_out = kit.bf16_empty((12, c.num_heads, c.head_size))
    strided_out = kit.bf16_empty((12, c.num_heads, c.head_size))
    wrapper.write_kv(c, x["key"], x["value"], kv_cache=engine.layers[0].kv_cache)
    wrapper.window_attention(c, x["query"], kv_cache=engine.layers[0].kv_cache, out=dense_out)
    wrapper.window_attention(c, strided, kv_cache=engine.layers[0].kv_cache, out=strided_out)
    kit.sync()
    np.testing.assert_array_equal(kit.bf16_numpy(strided_out), kit.bf16_numpy(dense_out))


def test_out_is_written_in_place(kit, backend):
    c = swa_config()
    engine = Engine(kit, [c], max_requests=1, blocks_per_request=4, seed=7)
    wrapper = make_wrapper(kit, backend, [c])
    meta = engine.step([(0, 0, 5)])
    engine.plan(wrapper, meta)
    x = device_inputs(kit, random_inputs(c, 5, np.random.default_rng(7)))
    out = kit.bf16_empty((5, c.num_heads, c.head_size))
    address = kit.data_ptr(out)
    returned = forward(wrapper, engine, 0, x, out)
    kit.sync()
    assert returned is out and kit.data_ptr(out) == address
    assert np.isfinite(testing.bf16_values(kit.bf16_numpy(out))).all()


def test_plan_reports_the_step(kit, backend):
    c = csa_config()
    engine = Engine(kit, [c], max_requests=3, blocks_per_request=6, seed=8)
    wrapper = make_wrapper(kit, backend, [c])
    assert not wrapper.planned
    engine.plan(wrapper, engine.step(SCHEDULE[0]), num_output_rows=70)
    assert wrapper.planned and wrapper.step_kind == "mixed"
    assert (wrapper.num_tokens, wrapper.num_output_rows) == (64, 70)
    assert wrapper.workspace_bytes > 0 and wrapper.chunks[0][0] == 0
    assert wrapper.chunks[-1][1] == 64
    engine.lengths = [40, 24, 0]
    engine.plan(wrapper, engine.step([(0, 40, 4), (1, 24, 4)]))
    assert wrapper.step_kind == "uniform"


@pytest.mark.parametrize("name", ["kind", "kv_dtype", "summary_dtype"])
def test_config_enums_round_trip(name):
    c = csa_config()
    value = {"kind": "swa", "kv_dtype": "fp8_e4m3", "summary_dtype": "bf16"}[name]
    setattr(c, name, value)
    assert getattr(c, name) == value
    assert "LayerConfig(" in repr(c)
