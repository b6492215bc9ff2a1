"""torch integration: torch.library ops (eager, opcheck, torch.compile with
fullgraph=True), the current CUDA stream, and a decode step captured in a
CUDA graph and replayed. Skipped where torch is not installed; the cuda
cases also where the cuda backend cannot run."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import step5_attention as s5  # noqa: E402
from engine import (POISON_BF16, Engine, compare, csa_config, device_inputs,  # noqa: E402
                    make_wrapper, random_inputs, swa_config)
from kits import TorchKit, available_kits  # noqa: E402
from step5_attention import torch_ops  # noqa: E402

TORCH_KITS = [pytest.param(kit, id=name, marks=[] if kit else pytest.mark.skip(reason))
              for name, kit, reason in available_kits() if name.startswith("torch")]


def cuda_kit():
    for name, kit, reason in available_kits():
        if name == "torch-cuda":
            if kit is None:
                pytest.skip(reason)
            return kit


def make_backend(kit):
    return s5.Backend("cpu", num_threads=2) if kit.backend_kind == "cpu" else s5.Backend("cuda")


def call_ops(handle, x, csa_state, swa_state, out_csa, out_swa):
    torch.ops.step5.forward_csa(handle, 0, x["query"], x["key"], x["value"], x["index_query"],
                                x["index_weight"], x["index_key"], x["index_z"],
                                csa_state.kv_cache, csa_state.ring, out_csa, x["gate"])
    torch.ops.step5.forward_swa(handle, 1, x["query"], x["key"], x["value"], swa_state.kv_cache,
                                out_swa, x["gate"])


STEPS = [[(0, 0, 20), (1, 0, 9)], [(0, 20, 1), (1, 9, 1)], [(0, 21, 3), (1, 10, 2)]]


@pytest.mark.parametrize("kit", TORCH_KITS)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compile-fullgraph"])
def test_ops_match_the_wrapper(kit, compiled):
    """The ops (called eagerly, or from a function compiled with
    fullgraph=True) give what the wrapper gives on a twin cache."""
    configs = [csa_config(), swa_config()]
    backend = make_backend(kit)
    via_ops, direct = (Engine(kit, configs, max_requests=2, blocks_per_request=4, seed=21)
                       for _ in range(2))
    w_ops, w_direct = (make_wrapper(kit, backend, configs) for _ in range(2))
    handle = torch_ops.register(w_ops)
    torch._dynamo.reset()
    run = torch.compile(call_ops, fullgraph=True) if compiled else call_ops
    rng = np.random.default_rng(21)
    try:
        for schedule in STEPS:
            meta = via_ops.step(schedule)
            n = meta.num_tokens
            via_ops.plan(w_ops, meta)
            direct.plan(w_direct, meta)
            host = random_inputs(configs[0], n, rng)
            x = device_inputs(kit, host)
            outs = [kit.bf16_empty((n, 4, 64)) for _ in range(4)]
            run(handle, x, via_ops.layers[0], via_ops.layers[1], outs[0], outs[1])
            w_direct.forward_csa(configs[0], x["query"], x["key"], x["value"], x["index_query"],
                                 x["index_weight"], x["index_key"], x["index_z"],
                                 kv_cache=direct.layers[0].kv_cache, ring=direct.layers[0].ring,
                                 out=outs[2], gate=x["gate"])
            w_direct.forward_swa(configs[1], x["query"], x["key"], x["value"],
                                 kv_cache=direct.layers[1].kv_cache, out=outs[3], gate=x["gate"])
            kit.sync()
            np.testing.assert_array_equal(kit.bf16_numpy(outs[0]), kit.bf16_numpy(outs[2]))
            np.testing.assert_array_equal(kit.bf16_numpy(outs[1]), kit.bf16_numpy(outs[3]))
            assert np.isfinite(kit.bf16_numpy(outs[0]).astype(np.float32)).all()
            for layer in range(2):
                via_ops.commit(layer, meta, host)
                direct.commit(layer, meta, host)
    finally:
        torch_ops.unregister(handle)
        torch._dynamo.reset()


def test_opcheck_swa():
    """torch.library.opcheck: schema, declared mutations and fake
    implementation agree with what the op does."""
    kit = TorchKit(torch, "cpu")
    c = swa_config()
    engine = Engine(kit, [c], max_requests=1, blocks_per_request=2, seed=22)
    wrapper = s5.AttentionWrapper(s5.Backend("cpu", num_threads=2), [c])
    handle = torch_ops.register(wrapper)
    try:
        meta = engine.step([(0, 0, 5)])
        engine.plan(wrapper, meta)
        x = device_inputs(kit, random_inputs(c, 5, np.random.default_rng(22)))
        out = kit.bf16_empty((5, 4, 64), 0)
        torch.library.opcheck(torch.ops.step5.forward_swa.default,
                              (handle, 0, x["query"], x["key"], x["value"],
                               engine.layers[0].kv_cache, out, x["gate"]),
                              test_utils=("test_schema", "test_faketensor"))
    finally:
        torch_ops.unregister(handle)


def test_unknown_handle_is_a_value_error():
    z = torch.zeros(1)
    with pytest.raises(ValueError, match="expected a handle from torch_ops.register"):
        torch.ops.step5.forward_swa(10**9, 0, z, z, z, z, z)


def test_forward_runs_on_the_current_stream():
    kit = cuda_kit()
    c = swa_config()
    engine = Engine(kit, [c], max_requests=1, blocks_per_request=2, seed=23)
    wrapper = s5.AttentionWrapper(s5.Backend("cuda"), [c], workspace=kit.bytes((1 << 20,)))
    meta = engine.step([(0, 0, 7)])
    host = random_inputs(c, 7, np.random.default_rng(23))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        engine.plan(wrapper, meta)
        x = device_inputs(kit, host)
        out = kit.bf16_empty((7, 4, 64), POISON_BF16)
        wrapper.forward_swa(c, x["query"], x["key"], x["value"],
                            kv_cache=engine.layers[0].kv_cache, out=out, gate=x["gate"])
    side.synchronize()
    engine.commit(0, meta, host)
    ref, _, _ = engine.oracle(0, meta, host)
    compare(kit.bf16_numpy(out), ref)


def test_decode_step_captured_in_a_cuda_graph_replays():
    """A uniform decode step of a CSA and an SWA layer, captured once and
    replayed on new tokens written into the same static tensors; every
    replay is checked against the oracle."""
    kit = cuda_kit()
    from step5_attention.cuda_graph import CapturedStep

    configs = [csa_config(spec_tokens=0), swa_config(spec_tokens=0)]
    engine = Engine(kit, configs, max_requests=2, blocks_per_request=4, seed=24)
    wrapper = s5.AttentionWrapper(s5.Backend("cuda"), configs, workspace=kit.bytes((16 << 20,)))
    rng = np.random.default_rng(24)
    capacity = engine.blocks_per_request * engine.block_size

    # Prompts, eagerly.
    meta = engine.step([(0, 0, 30), (1, 0, 17)])
    engine.plan(wrapper, meta)
    for layer, c in enumerate(configs):
        host = random_inputs(c, meta.num_tokens, rng)
        x = device_inputs(kit, host)
        out = kit.bf16_empty((meta.num_tokens, 4, 64))
        state = engine.layers[layer]
        if c.kind == "csa":
            wrapper.forward_csa(c, x["query"], x["key"], x["value"], x["index_query"],
                                x["index_weight"], x["index_key"], x["index_z"],
                                kv_cache=state.kv_cache, ring=state.ring, out=out,
                                gate=x["gate"])
        else:
            wrapper.forward_swa(c, x["query"], x["key"], x["value"], kv_cache=state.kv_cache,
                                out=out, gate=x["gate"])
        engine.commit(layer, meta, host)
    torch.cuda.synchronize()

    # Static tensors of the decode batch (2 requests, 1 token each).
    first = engine.step([(0, 30, 1), (1, 17, 1)])
    static = {name: kit.array(getattr(first, name)) for name in
              ("query_start_loc", "seq_lens", "block_table", "slot_mapping", "ring_index")}
    layer_inputs = [device_inputs(kit, random_inputs(c, 2, rng)) for c in configs]
    outs = [kit.bf16_empty((2, 4, 64), POISON_BF16) for _ in configs]
    selected = kit.int32((2, configs[0].num_kv_heads, configs[0].topk))
    wrapper.plan(static["query_start_loc"], static["seq_lens"], static["block_table"],
                 static["slot_mapping"], static["ring_index"],
                 query_start_loc_cpu=first.query_start_loc, seq_lens_cpu=first.seq_lens,
                 max_context=capacity)
    assert wrapper.step_kind == "uniform"

    def step():
        csa, swa = configs
        a, b = layer_inputs
        s0, s1 = engine.layers
        wrapper.forward_csa(csa, a["query"], a["key"], a["value"], a["index_query"],
                            a["index_weight"], a["index_key"], a["index_z"], kv_cache=s0.kv_cache,
                            ring=s0.ring, out=outs[0], gate=a["gate"], selected=selected)
        wrapper.forward_swa(swa, b["query"], b["key"], b["value"], kv_cache=s1.kv_cache,
                            out=outs[1], gate=b["gate"])

    graph = CapturedStep(step)
    lengths = [30, 17]
    for replay in range(4):
        meta = engine.step([(0, lengths[0], 1), (1, lengths[1], 1)])
        for name, tensor in static.items():
            tensor.copy_(torch.from_numpy(getattr(meta, name)))
        hosts = [random_inputs(c, 2, rng) for c in configs]
        for layer, host in enumerate(hosts):
            for name, value in device_inputs(kit, host).items():
                layer_inputs[layer][name].copy_(value)
        graph.replay()
        torch.cuda.synchronize()
        for layer, host in enumerate(hosts):
            engine.commit(layer, meta, host)
        ref, _, ok = engine.oracle(0, meta, hosts[0], selected=kit.numpy(selected))
        assert ok.all(), f"replay {replay}: selection not among the top-k"
        compare(kit.bf16_numpy(outs[0]), ref)
        ref, _, _ = engine.oracle(1, meta, hosts[1])
        compare(kit.bf16_numpy(outs[1]), ref)
        lengths = [n + 1 for n in lengths]
