"""What an engine needs beyond plan + forward, from Python: lengths known
only on the device (host upper bounds), padding requests, the forward
flags, write_kv from a slot mapping alone, the static workspace bound and
the BLNHC (layer-in-block) cache. Every kit: numpy on the cpu backend in CI,
torch on cuda where a usable GPU is present. Outputs start as NaN."""

import numpy as np
import pytest

import step5_attention as s5
from engine import (SCHEDULE, POISON_BF16, Engine, compare, csa_config, device_inputs,
                    make_wrapper, random_inputs, storage_ulp, swa_config)
from step5_attention import testing

PADDING_ROWS = 2


def run_layer(kit, wrapper, engine, layer, meta, x, n, binding=None, **flags):
    """One layer's forward with the kit's arrays; inputs the flags skip are
    passed as None, as an engine that ran those ops itself would. With a
    binding (bind_cache), the forward gets it in place of the cache arrays."""
    state = engine.layers[layer]
    c = state.config
    out = kit.bf16_empty((n + PADDING_ROWS, c.num_heads, c.head_size), POISON_BF16)
    skip_kv = flags.get("skip_kv_write", False)
    skip_sum = flags.get("skip_summary_update", False)
    key = None if skip_kv else x["key"]
    value = None if skip_kv else x["value"]
    kv_cache = state.kv_cache if binding is None else binding
    if c.kind == "csa":
        ring = None if skip_sum or binding is not None else state.ring
        wrapper.forward_csa(c, x["query"], key, value, x["index_query"], x["index_weight"],
                            None if skip_sum else x["index_key"],
                            None if skip_sum else x["index_z"], kv_cache=kv_cache, ring=ring,
                            out=out, gate=x.get("gate"), **flags)
    else:
        flags.pop("skip_summary_update", None)
        wrapper.forward_swa(c, x["query"], key, value, kv_cache=kv_cache, out=out,
                            gate=x.get("gate"), **flags)
    kit.sync()
    return kit.bf16_numpy(out)


def run_schedule(kit, backend, configs, slack=0, padding_requests=0, seed=5, bound=False,
                 **flags):
    """SCHEDULE through every layer under an engine behaviour, each step
    against the oracle; returns the step kinds. bound: each layer's cache
    bound once (bind_cache) before the first step and used by every forward."""
    engine = Engine(kit, configs, max_requests=3, blocks_per_request=6, seed=seed)
    wrapper = make_wrapper(kit, backend, configs)
    bindings = [wrapper.bind_cache(state.config, state.kv_cache,
                                   state.ring if state.config.kind == "csa" else None)
                if bound else None for state in engine.layers]
    rng = np.random.default_rng(seed)
    kinds = []
    capacity = engine.blocks_per_request * engine.block_size
    for step, schedule in enumerate(SCHEDULE):
        meta = engine.step(schedule)
        n = meta.num_tokens
        qsl, lens, table, rings = (meta.query_start_loc, meta.seq_lens, meta.block_table,
                                   meta.ring_index)
        for _ in range(padding_requests):  # vLLM's padding: no rows, length 0, any entry
            qsl = np.append(qsl, qsl[-1]).astype(np.int32)
            lens = np.append(lens, 0).astype(np.int32)
            table = np.vstack([table, np.zeros_like(table[:1])])
            rings = np.append(rings, 0).astype(np.int32)
        bounds = np.minimum(lens + slack, capacity).astype(np.int32)
        wrapper.plan(kit.array(qsl), kit.array(lens), kit.array(table),
                     kit.array(meta.slot_mapping), kit.array(rings),
                     query_start_loc_cpu=kit.host(qsl), seq_lens_cpu=kit.host(bounds),
                     num_output_rows=n + PADDING_ROWS, seq_lens_upper_bound=slack > 0)
        kinds.append(wrapper.step_kind)
        for layer, c in enumerate(configs):
            inputs = random_inputs(c, n, rng)
            x = device_inputs(kit, inputs)
            state = engine.layers[layer]
            if flags.get("skip_kv_write"):  # the engine's own cache write, before attention
                backend.write_kv(c, kit.array(meta.slot_mapping), x["key"], x["value"],
                                 kv_cache=state.kv_cache)
            if c.kind == "csa" and flags.get("skip_summary_update"):
                wrapper.update_summaries(c, x["index_key"], x["index_z"],
                                         kv_cache=state.kv_cache, ring=state.ring)
            out = run_layer(kit, wrapper, engine, layer, meta, x, n, bindings[layer],
                            **dict(flags))
            engine.commit(layer, meta, inputs)
            want_padding = POISON_BF16 if flags.get("skip_padding_zero") else 0
            assert (out[n:] == want_padding).all(), f"step {step}: padding rows"
            reference, _, _ = engine.oracle(layer, meta, inputs)
            compare(out[:n], reference)
    return kinds


@pytest.mark.parametrize("slack", [0, 3])
def test_upper_bound_seq_lens(kit, backend, slack):
    """Planned from seq_lens + slack on the host, run on the exact lengths."""
    kinds = run_schedule(kit, backend, [csa_config(), swa_config()], slack=slack)
    assert "uniform" in kinds and "mixed" in kinds


def test_padding_requests_keep_steps_uniform(kit, backend):
    kinds = run_schedule(kit, backend, [csa_config(), swa_config()], padding_requests=2)
    assert kinds[2:] == ["uniform"] * 3, kinds


@pytest.mark.parametrize("flags", [dict(skip_kv_write=True), dict(skip_summary_update=True),
                                   dict(skip_padding_zero=True),
                                   dict(skip_kv_write=True, skip_summary_update=True,
                                        skip_padding_zero=True)],
                         ids=["kv", "summary", "padding", "all"])
def test_forward_flags(kit, backend, flags):
    run_schedule(kit, backend, [csa_config(), swa_config()], **flags)


@pytest.mark.parametrize("flags", [dict(), dict(skip_summary_update=True)],
                         ids=["plain", "summary"])
def test_bound_caches(kit, backend, flags):
    """Caches bound once before the first step serve every step's forwards."""
    kinds = run_schedule(kit, backend, [csa_config(), swa_config()], bound=True, **flags)
    assert "uniform" in kinds and "mixed" in kinds


def test_bound_cache_rejects_bad_use(kit, backend):
    c = csa_config()
    engine = Engine(kit, [c], max_requests=3, blocks_per_request=6, seed=3)
    wrapper = make_wrapper(kit, backend, [c])
    state = engine.layers[0]
    small = kit.array(np.zeros((4, s5.cache_bytes_per_block(c) - 16), np.uint8))
    with pytest.raises(ValueError, match="cache_bytes_per_block"):
        wrapper.bind_cache(c, small, state.ring)
    binding = wrapper.bind_cache(c, state.kv_cache, state.ring)
    meta = engine.step(SCHEDULE[0])
    wrapper.plan(kit.array(meta.query_start_loc), kit.array(meta.seq_lens),
                 kit.array(meta.block_table), kit.array(meta.slot_mapping),
                 kit.array(meta.ring_index), query_start_loc_cpu=kit.host(meta.query_start_loc),
                 seq_lens_cpu=kit.host(meta.seq_lens), num_output_rows=meta.num_tokens)
    x = device_inputs(kit, random_inputs(c, meta.num_tokens, np.random.default_rng(1)))
    out = kit.bf16_empty((meta.num_tokens, c.num_heads, c.head_size), POISON_BF16)
    with pytest.raises(ValueError, match="ring expected None with a bound cache"):
        wrapper.forward_csa(c, x["query"], x["key"], x["value"], x["index_query"],
                            x["index_weight"], x["index_key"], x["index_z"], kv_cache=binding,
                            ring=state.ring, out=out)


@pytest.mark.parametrize("tiles", ["always", "never"])
def test_tile_attention_choice(kit, backend, tiles, monkeypatch):
    """plan(tile_attention=...) forced either way gives the oracle's results."""
    plan = s5.AttentionWrapper.plan
    monkeypatch.setattr(s5.AttentionWrapper, "plan",
                        lambda self, *a, **k: plan(self, *a, tile_attention=tiles, **k))
    run_schedule(kit, backend, [csa_config(), swa_config()])


def test_tile_attention_rejects_unknown(kit, backend):
    c = csa_config()
    engine = Engine(kit, [c], max_requests=3, blocks_per_request=6, seed=3)
    wrapper = make_wrapper(kit, backend, [c])
    meta = engine.step(SCHEDULE[0])
    with pytest.raises(ValueError, match="tile_attention: expected"):
        wrapper.plan(kit.array(meta.query_start_loc), kit.array(meta.seq_lens),
                     kit.array(meta.block_table), kit.array(meta.slot_mapping),
                     kit.array(meta.ring_index), query_start_loc_cpu=kit.host(meta.query_start_loc),
                     seq_lens_cpu=kit.host(meta.seq_lens), tile_attention="sometimes")


def test_write_kv_from_slots_matches_planned_write(kit, backend):
    c = csa_config()
    engine = Engine(kit, [c], max_requests=3, blocks_per_request=6, seed=2)
    other = Engine(kit, [c], max_requests=3, blocks_per_request=6, seed=2)
    meta = engine.step([(0, 0, 30), (1, 0, 7)])
    wrapper = make_wrapper(kit, backend, [c])
    engine.plan(wrapper, meta)
    x = device_inputs(kit, random_inputs(c, meta.num_tokens, np.random.default_rng(3)))
    wrapper.write_kv(c, x["key"], x["value"], kv_cache=engine.layers[0].kv_cache)
    slots = meta.slot_mapping.copy()
    backend.write_kv(c, kit.array(slots), x["key"], x["value"], kv_cache=other.layers[0].kv_cache)
    kit.sync()
    assert (kit.numpy(engine.layers[0].kv_cache) == kit.numpy(other.layers[0].kv_cache)).all()
    # Slots of -1 are padding: nothing lands for them.
    before = kit.numpy(other.layers[0].kv_cache)
    backend.write_kv(c, kit.array(np.full(meta.num_tokens, -1, np.int64)), x["key"], x["value"],
                     kv_cache=other.layers[0].kv_cache)
    kit.sync()
    assert (kit.numpy(other.layers[0].kv_cache) == before).all()


def test_write_kv_from_slots_rejects_bad_input(kit, backend):
    if kit.backend_kind != "cpu":
        pytest.skip("slots past the cache are checked on the cpu backend (cuda skips them)")
    c = csa_config()
    cache = kit.bytes((4, s5.cache_bytes_per_block(c)))
    x = device_inputs(kit, random_inputs(c, 3, np.random.default_rng(1)))
    with pytest.raises(IndexError, match=r"slot_mapping\[2\]"):
        backend.write_kv(c, kit.array(np.array([0, 1, 64], np.int64)), x["key"], x["value"],
                         kv_cache=cache)
    with pytest.raises(ValueError, match="key"):
        backend.write_kv(c, kit.array(np.zeros(4, np.int64)), x["key"], x["value"],
                         kv_cache=cache)


def test_workspace_bound_covers_every_plan(kit, backend):
    configs = [csa_config(), swa_config()]
    limits = dict(max_tokens=64, max_requests=3, max_context=96)
    bound = backend.workspace_bytes(configs, **limits, plan_max_context=96)
    engine = Engine(kit, configs, max_requests=3, blocks_per_request=6, seed=4)
    # The wrapper gets a workspace of exactly the bound and plans every step
    # of the run (plan() raises when a plan needs more).
    workspace = kit.bytes((bound + 256,))
    wrapper = s5.AttentionWrapper(backend, configs, workspace=workspace)
    for schedule in SCHEDULE:
        meta = engine.step(schedule)
        for max_context in (0, 96):
            engine.plan(wrapper, meta, max_context=max_context)
            assert wrapper.workspace_bytes <= bound
        for request, end in zip(meta.requests, meta.seq_lens):
            engine.lengths[request] = int(end)
    with pytest.raises(ValueError, match="max_context"):
        backend.workspace_bytes(configs, **limits, plan_max_context=200)


def test_interleaved_blocks_layout(kit, backend):
    """interleaved_blocks gives the BLNHC offsets; two layers stepping in one
    such buffer match the oracle (engine.py builds the same layout)."""
    configs = [csa_config(), swa_config(num_heads=2, num_kv_heads=1, head_size=128)]
    stride, offsets = s5.interleaved_blocks(configs)
    assert offsets == [0, s5.cache_bytes_per_block(configs[0])]
    assert stride == sum(s5.cache_bytes_per_block(c) for c in configs)
    engine = Engine(kit, configs, max_requests=3, blocks_per_request=6, seed=6)
    storage = kit.bytes((engine.num_blocks, stride), 0x5A)
    for state, c, offset in zip(engine.layers, configs, offsets):
        state.kv_cache = storage[:, offset:offset + s5.cache_bytes_per_block(c)]
    wrapper = make_wrapper(kit, backend, configs)
    rng = np.random.default_rng(6)
    for schedule in SCHEDULE:
        meta = engine.step(schedule)
        n = meta.num_tokens
        engine.plan(wrapper, meta, num_output_rows=n + PADDING_ROWS)
        for layer, c in enumerate(configs):
            inputs = random_inputs(c, n, rng)
            out = run_layer(kit, wrapper, engine, layer, meta, device_inputs(kit, inputs), n)
            engine.commit(layer, meta, inputs)
            reference, _, _ = engine.oracle(layer, meta, inputs)
            compare(out[:n], reference)


def test_ring_entry_moves_with_its_request(kit, backend):
    """A request moved to another persistent-batch slot (vLLM condenses its
    batch) keeps its open region when the engine copies the ring entry's
    bytes along; without the copy the region's summary comes out wrong."""
    c = csa_config(spec_tokens=0)
    exact = kit.backend_kind == "cpu"
    for copy in (True, False):
        engine = Engine(kit, [c], max_requests=4, blocks_per_request=6, seed=8)
        wrapper = make_wrapper(kit, backend, [c])
        rng = np.random.default_rng(8)
        state = engine.layers[0]
        for step, schedule in enumerate([[(0, 0, 21)], [(0, 21, 4)]]):
            meta = engine.step(schedule)
            if step == 1:  # request 0 now lives in slot 3
                if copy:
                    ring = kit.numpy(state.ring)
                    ring[3] = ring[0]
                    state.ring = kit.array(ring)
                meta.ring_index[:] = 3
            engine.plan(wrapper, meta, num_output_rows=meta.num_tokens + PADDING_ROWS)
            inputs = random_inputs(c, meta.num_tokens, rng)
            run_layer(kit, wrapper, engine, 0, meta, device_inputs(kit, inputs), meta.num_tokens)
            engine.commit(0, meta, inputs)
        h = state.histories[0]
        want = testing.oracle_summaries(c, h.index_key, h.index_z)
        got = engine.summaries(0, 0)
        ulp = 0 if exact else storage_ulp(want, c.summary_dtype)
        matches = bool((np.abs(got - want) <= ulp).all())
        # Region 2 (positions 16..23) closed in the second step from rows
        # 16..20 of the ring: right only when the entry moved along.
        assert matches == copy, f"copy={copy}: summaries match the oracle: {matches}"
