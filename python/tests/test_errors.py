"""Bad input raises the exception of its error code with the library's
message (what, expected, got), and nothing is written: outputs, caches and
rings keep every byte."""

import numpy as np
import pytest

import step5_attention as s5
from engine import (Engine, csa_config, device_inputs, forward, make_wrapper, random_inputs,
                    swa_config)

N = 6


@pytest.fixture
def setup(kit, backend):
    """A planned CSA + SWA step of one request (6 new tokens after 10)."""
    configs = [csa_config(), swa_config()]
    engine = Engine(kit, configs, max_requests=2, blocks_per_request=4, seed=11)
    wrapper = make_wrapper(kit, backend, configs)
    rng = np.random.default_rng(11)
    for schedule in ([(0, 0, 10)], [(0, 10, N)]):
        meta = engine.step(schedule)
        engine.plan(wrapper, meta)
        inputs = [random_inputs(c, meta.num_tokens, rng) for c in configs]
        if schedule[0][1] == 0:
            for layer in range(2):
                x = device_inputs(kit, inputs[layer])
                out = kit.bf16_empty((10, 4, 64))
                forward(wrapper, engine, layer, x, out)
                engine.commit(layer, meta, inputs[layer])
    kit.sync()
    return kit, engine, wrapper, meta, [device_inputs(kit, i) for i in inputs]


def snapshot(kit, engine, out):
    state = [kit.bf16_numpy(out)]
    for layer in engine.layers:
        state.append(kit.numpy(layer.kv_cache))
        if layer.ring is not None:
            state.append(kit.numpy(layer.ring))
    return state


def expect_nothing_written(kit, engine, out, before):
    kit.sync()
    for a, b in zip(before, snapshot(kit, engine, out)):
        np.testing.assert_array_equal(a, b)


def raises_untouched(setup, error, match, layer, change):
    """Runs layer `layer`'s forward with `change` applied to its arguments;
    expects `error` matching `match` and no byte written anywhere."""
    kit, engine, wrapper, meta, inputs = setup
    c = engine.configs[layer]
    x = dict(inputs[layer])
    out = kit.bf16_empty((N, c.num_heads, c.head_size), 0x1234)
    args = {"wrapper": wrapper, "engine": engine, "layer": layer, "inputs": x, "out": out}
    change(args)
    before = snapshot(kit, engine, out)
    with pytest.raises(error, match=match):
        forward(**args)
    expect_nothing_written(kit, engine, out, before)


def test_wrong_dtype_is_a_value_error(setup):
    kit = setup[0]

    def float_query(args):
        args["inputs"]["query"] = kit.float32((N, 4, 64))

    raises_untouched(setup, ValueError, r"query: expected dtype bfloat16 .* got float32", 0,
                     float_query)


def test_wrong_shape_is_a_value_error(setup):
    kit = setup[0]

    def three_heads(args):
        args["inputs"]["query"] = kit.bf16_empty((N, 3, 64), 0)

    raises_untouched(setup, ValueError, r"query", 0, three_heads)
    raises_untouched(setup, ValueError, r"query", 1, three_heads)


def test_missing_output_rows_is_a_value_error(setup):
    kit = setup[0]

    def short_out(args):
        args["out"] = kit.bf16_empty((N - 1, 4, 64), 0x1234)

    raises_untouched(setup, ValueError, r"output", 0, short_out)


def test_block_id_past_the_cache_is_an_index_error(setup, backend):
    kit, engine, wrapper, meta, inputs = setup
    meta.block_table[0, 0] = engine.num_blocks  # one past the last block
    positions = meta.positions()
    first_block = positions < engine.block_size
    meta.slot_mapping[first_block] = engine.num_blocks * engine.block_size + positions[first_block]
    engine.plan(wrapper, meta)
    raises_untouched(setup, IndexError, r"block", 1, lambda args: None)


def test_ring_entry_past_the_ring_is_an_index_error(setup):
    kit, engine, wrapper, meta, inputs = setup
    meta.ring_index[0] = engine.max_requests
    engine.plan(wrapper, meta)
    raises_untouched(setup, IndexError, r"ring", 0, lambda args: None)


def test_sequence_longer_than_its_block_table_is_an_index_error(setup):
    kit, engine, wrapper, meta, inputs = setup
    meta.seq_lens[0] = engine.blocks_per_request * engine.block_size + 1
    meta.query_start_loc[-1] = N
    with pytest.raises(IndexError, match=r"seq_lens\[0\].*longer than its block table"):
        engine.plan(wrapper, meta)


def test_bad_query_start_loc_is_a_value_error(setup):
    kit, engine, wrapper, meta, inputs = setup
    meta.query_start_loc[0] = 1
    with pytest.raises(ValueError, match=r"query_start_loc\[0\]: expected 0, got 1"):
        engine.plan(wrapper, meta)


def test_host_copy_of_the_wrong_length_is_a_value_error(setup):
    kit, engine, wrapper, meta, inputs = setup
    with pytest.raises(ValueError, match=r"seq_lens_cpu: expected 1 elements .* got 2"):
        wrapper.plan(kit.array(meta.query_start_loc), kit.array(meta.seq_lens),
                     kit.array(meta.block_table), kit.array(meta.slot_mapping),
                     seq_lens_cpu=np.array([16, 3], np.int32))


def test_a_failed_plan_keeps_the_previous_one(setup):
    """The step planned before a failing plan() still runs, unchanged."""
    kit, engine, wrapper, meta, inputs = setup
    out = kit.bf16_empty((N, 4, 64))
    forward(wrapper, engine, 1, inputs[1], out)
    kit.sync()
    first = kit.bf16_numpy(out)
    bad = engine.step([(0, 10, N)])
    bad.query_start_loc[0] = 3
    with pytest.raises(ValueError):
        engine.plan(wrapper, bad)
    assert wrapper.num_tokens == N
    again = kit.bf16_empty((N, 4, 64))
    forward(wrapper, engine, 1, inputs[1], again)
    kit.sync()
    np.testing.assert_array_equal(kit.bf16_numpy(again), first)


def test_too_small_workspace_is_a_value_error(setup, backend):
    kit, engine, wrapper, meta, inputs = setup
    small = s5.AttentionWrapper(backend, engine.configs, workspace=kit.bytes((64,)))
    with pytest.raises(ValueError, match=r"workspace: expected >= \d+ bytes .* got \d+"):
        engine.plan(small, meta)
    assert not small.planned


def test_forward_before_plan_is_a_value_error(setup, backend):
    kit, engine, wrapper, meta, inputs = setup
    fresh = make_wrapper(kit, backend, engine.configs)
    out = kit.bf16_empty((N, 4, 64), 0x1234)
    before = snapshot(kit, engine, out)
    with pytest.raises(ValueError, match=r"plan\(\.\.\.\)"):
        forward(fresh, engine, 0, inputs[0], out)
    expect_nothing_written(kit, engine, out, before)


def test_layer_the_plan_was_not_built_for_is_a_value_error(setup):
    kit, engine, wrapper, meta, inputs = setup
    other = csa_config(num_heads=8)
    state = engine.layers[0]
    out = kit.bf16_empty((N, 8, 64), 0x1234)
    x = inputs[0]
    with pytest.raises(ValueError, match=r"expected one of the shapes the plan was built for"):
        wrapper.forward_csa(other, kit.bf16_empty((N, 8, 64), 0), x["key"], x["value"],
                            x["index_query"], x["index_weight"], x["index_key"], x["index_z"],
                            kv_cache=state.kv_cache, ring=state.ring, out=out)


def test_cache_with_too_few_bytes_per_block_is_a_value_error(setup):
    kit, engine, wrapper, meta, inputs = setup
    need = s5.cache_bytes_per_block(engine.configs[1])

    def short_cache(args):
        args["engine"] = Engine(kit, engine.configs, max_requests=2, blocks_per_request=4)
        args["engine"].layers[1].kv_cache = kit.bytes((engine.num_blocks, need - 16))

    raises_untouched(setup, ValueError, rf"kv_cache: expected >= {need} bytes per block", 1,
                     short_cache)


def test_array_on_another_device_is_a_value_error(setup):
    kit, engine, wrapper, meta, inputs = setup
    if kit.backend_kind != "cuda":
        pytest.skip("needs the cuda backend: a host array handed to it")

    def host_query(args):
        args["inputs"]["query"] = np.zeros((N, 4, 64), np.uint16)

    raises_untouched(setup, ValueError, r"query: expected an array on cuda:0", 1, host_query)


def test_bad_configs_are_value_errors():
    with pytest.raises(ValueError, match=r"config.kind: expected 'csa' or 'swa', got 'mla'"):
        s5.LayerConfig(kind="mla")
    with pytest.raises(ValueError, match=r"config.num_heads: expected a multiple of num_kv_heads"):
        s5.LayerConfig(num_heads=5)
    with pytest.raises(ValueError, match=r"config.kv_dtype: expected 'bf16' or 'fp8_e4m3'"):
        s5.LayerConfig(kv_dtype="fp16")


def test_unknown_backend_is_a_value_error():
    with pytest.raises(ValueError, match=r"backend: expected cpu or cuda, got 'tpu'"):
        s5.Backend("tpu")


def test_unknown_cuda_kernels_is_a_value_error():
    with pytest.raises(ValueError, match=r"cuda kernels: expected auto or portable, got 'fast'"):
        s5.Backend("cpu", cuda_kernels="fast")
    assert s5.Backend("cpu", cuda_kernels="portable").kind == "cpu"  # cpu has one path


def test_cuda_backend_that_cannot_run_here_is_not_implemented():
    if s5.cuda_unavailable_reason() is None:
        pytest.skip("the cuda backend runs here")
    with pytest.raises(NotImplementedError, match=r"cuda"):
        s5.Backend("cuda")
