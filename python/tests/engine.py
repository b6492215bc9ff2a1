"""A serving engine in miniature for the tests: paged caches of one or more
layers (blocks handed out in shuffled order), block tables, slot mappings,
per-request ring entries, and every request's tokens per layer kept on the
host for the oracle."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import step5_attention as s5
from step5_attention import testing

# Cache bytes start as large finite garbage (bf16 0x5a5a ~ 1.5e16, fp8 0x5a =
# 20) so a backend that reads a slot it never wrote fails the comparison.
GARBAGE = 0x5A
# Outputs start as bf16 NaN bits so a row the backend never wrote fails.
POISON_BF16 = 0xFFFF


@dataclass
class StepMeta:
    """One step's metadata as numpy arrays, in the names engines use."""

    requests: list  # request ids, one per scheduled request
    starts: list  # first position written per request
    query_start_loc: np.ndarray  # i32 [R+1]
    seq_lens: np.ndarray  # i32 [R]
    block_table: np.ndarray  # i32 [R, max_blocks]
    slot_mapping: np.ndarray  # i64 [n]
    ring_index: np.ndarray  # i32 [R]

    @property
    def num_tokens(self) -> int:
        return int(self.query_start_loc[-1])

    def positions(self) -> np.ndarray:
        rows = [np.arange(s, s + c) for s, c in zip(self.starts, np.diff(self.query_start_loc))]
        return np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64)


@dataclass
class History:
    key: np.ndarray
    value: np.ndarray
    index_key: np.ndarray
    index_z: np.ndarray

    @classmethod
    def empty(cls, c: s5.LayerConfig) -> "History":
        return cls(np.zeros((0, c.num_kv_heads, c.head_size), np.float32),
                   np.zeros((0, c.num_kv_heads, c.head_size), np.float32),
                   np.zeros((0, c.index_dim), np.float32), np.zeros(0, np.float32))


@dataclass
class LayerState:
    config: s5.LayerConfig
    kv_cache: object  # [num_blocks, >= cache_bytes_per_block] bytes
    ring: object  # [max_requests, ring_entry_bytes] bytes (CSA) or None
    histories: list = field(default_factory=list)


def random_inputs(c: s5.LayerConfig, n: int, rng: np.random.Generator, gate: bool = True) -> dict:
    """Random bf16-exact inputs of one layer for n rows (bf16 as uint16 bits)."""
    H, G, D, I, Di = c.num_heads, c.num_kv_heads, c.head_size, c.index_heads, c.index_dim

    def bits(*shape, scale=1.0):
        return testing.bf16_bits(rng.standard_normal(shape).astype(np.float32) * scale)

    inputs = {"query": bits(n, H, D), "key": bits(n, G, D), "value": bits(n, G, D)}
    if gate:
        inputs["gate"] = bits(n, H, scale=2.0)
    if c.kind == "csa":
        inputs["index_query"] = bits(n, G, I, Di)
        inputs["index_weight"] = rng.random((n, G, I), dtype=np.float32)
        inputs["index_key"] = bits(n, Di)
        inputs["index_z"] = rng.standard_normal(n).astype(np.float32)
    return inputs


class Engine:
    """Layers sharing one block table: one cache (and ring) per layer.

    interleaved=True puts every layer's bytes of a block inside one block of
    a single [num_blocks, layers, bytes] array (the seed's BLNHC layout), so
    each layer sees its cache through a block stride larger than its bytes.
    """

    def __init__(self, kit, configs, max_requests=4, blocks_per_request=8, seed=0,
                 interleaved=False):
        self.kit = kit
        self.configs = list(configs)
        self.block_size = self.configs[0].block_size
        self.max_requests = max_requests
        self.blocks_per_request = blocks_per_request
        self.num_blocks = max_requests * blocks_per_request + 3
        rng = np.random.default_rng(seed)
        ids = rng.permutation(self.num_blocks)[: max_requests * blocks_per_request]
        self.block_ids = ids.reshape(max_requests, blocks_per_request).astype(np.int32)
        self.lengths = [0] * max_requests
        per_layer = [s5.cache_bytes_per_block(c) for c in self.configs]
        if interleaved:
            width = max(per_layer)
            self.storage = kit.bytes((self.num_blocks, len(self.configs), width), GARBAGE)
            caches = [self.storage[:, i] for i in range(len(self.configs))]
        else:
            caches = [kit.bytes((self.num_blocks, b), GARBAGE) for b in per_layer]
        self.layers = []
        for c, cache in zip(self.configs, caches):
            ring = (kit.bytes((max_requests, s5.ring_entry_bytes(c)), GARBAGE)
                    if c.kind == "csa" else None)
            state = LayerState(c, cache, ring)
            state.histories = [History.empty(c) for _ in range(max_requests)]
            self.layers.append(state)

    def step(self, schedule) -> StepMeta:
        """schedule: (request, start, count) per request; start may be below
        the request's length (rejected drafts are rewritten)."""
        B = self.block_size
        qsl, lens, slots, table, rings, requests, starts = [0], [], [], [], [], [], []
        for request, start, count in schedule:
            assert start <= self.lengths[request], "a step starts at most at the request's length"
            row = self.block_ids[request]
            qsl.append(qsl[-1] + count)
            lens.append(start + count)
            for p in range(start, start + count):
                slots.append(int(row[p // B]) * B + p % B)
            table.append(row)
            rings.append(request)
            requests.append(request)
            starts.append(start)
        R = len(schedule)
        return StepMeta(requests, starts, np.array(qsl, np.int32), np.array(lens, np.int32),
                        np.array(table, np.int32).reshape(R, self.blocks_per_request),
                        np.array(slots, np.int64), np.array(rings, np.int32))

    def plan(self, wrapper, meta: StepMeta, **kwargs):
        """Plans `meta` the way an engine would: arrays on the device plus
        host copies for the planner."""
        k = self.kit
        wrapper.plan(k.array(meta.query_start_loc), k.array(meta.seq_lens),
                     k.array(meta.block_table), k.array(meta.slot_mapping),
                     k.array(meta.ring_index), query_start_loc_cpu=k.host(meta.query_start_loc),
                     seq_lens_cpu=k.host(meta.seq_lens), block_table_cpu=k.host(meta.block_table),
                     slot_mapping_cpu=k.host(meta.slot_mapping),
                     ring_index_cpu=k.host(meta.ring_index), **kwargs)

    def commit(self, layer: int, meta: StepMeta, inputs: dict):
        """Records the step's tokens of `layer` (after it ran)."""
        state = self.layers[layer]
        c = state.config
        for i, (request, start) in enumerate(zip(meta.requests, meta.starts)):
            rows = slice(int(meta.query_start_loc[i]), int(meta.query_start_loc[i + 1]))
            h = state.histories[request]
            key = testing.bf16_values(inputs["key"][rows])
            value = testing.bf16_values(inputs["value"][rows])
            h.key = np.concatenate([h.key[:start], key])
            h.value = np.concatenate([h.value[:start], value])
            if c.kind == "csa":
                ik = testing.bf16_values(inputs["index_key"][rows])
                h.index_key = np.concatenate([h.index_key[:start], ik])
                h.index_z = np.concatenate([h.index_z[:start], inputs["index_z"][rows]])
        for request, end in zip(meta.requests, meta.seq_lens):
            self.lengths[request] = int(end)

    def oracle(self, layer: int, meta: StepMeta, inputs: dict, selected=None, dense=False):
        """Oracle outputs of the step's rows [n, H, D] (float64) and, for
        CSA, selections [n, G, K]; `selected` forces a backend's selection."""
        state = self.layers[layer]
        c = state.config
        n = meta.num_tokens
        out = np.zeros((n, c.num_heads, c.head_size))
        sel = np.full((n, c.num_kv_heads, c.topk), -1, np.int32)
        acceptable = np.ones((n, c.num_kv_heads), bool)
        positions = meta.positions()
        for i, request in enumerate(meta.requests):
            rows = slice(int(meta.query_start_loc[i]), int(meta.query_start_loc[i + 1]))
            h = state.histories[request]
            args = dict(gate=_widen(inputs.get("gate"), rows), dense=dense)
            if c.kind == "csa" and not dense:
                args.update(index_key=h.index_key, index_z=h.index_z,
                            index_query=testing.bf16_values(inputs["index_query"][rows]),
                            index_weight=inputs["index_weight"][rows])
                if selected is not None:
                    args["forced_selection"] = np.ascontiguousarray(selected[rows])
            r = testing.oracle_attention(c, h.key, h.value, positions[rows],
                                         testing.bf16_values(inputs["query"][rows]), **args)
            out[rows] = r["output"]
            if "selected" in r:
                sel[rows] = r["selected"]
            if "selection_acceptable" in r:
                acceptable[rows] = r["selection_acceptable"].astype(bool)
        return out, sel, acceptable

    def summaries(self, layer: int, request: int) -> np.ndarray:
        """The stored summaries of a request's closed regions, read back from
        the cache bytes: float32 [length // 8, Di]."""
        state = self.layers[layer]
        c = state.config
        cache = self.kit.numpy(state.kv_cache)
        offset = s5.kv_bytes_per_block(c)
        per_block = c.block_size // 8
        elem = 1 if c.summary_dtype == "fp8_e4m3" else 2
        closed = self.lengths[request] // 8
        out = np.zeros((closed, c.index_dim), np.float32)
        for j in range(closed):
            block = self.block_ids[request][j // per_block]
            start = offset + (j % per_block) * c.index_dim * elem
            raw = cache[block].reshape(-1)[start:start + c.index_dim * elem]
            if elem == 1:
                out[j] = testing.fp8_e4m3_values(raw)
            else:
                out[j] = testing.bf16_values(raw.view(np.uint16))
        return out


def _widen(bits, rows):
    return None if bits is None else testing.bf16_values(bits[rows])


def storage_ulp(values: np.ndarray, dtype: str) -> np.ndarray:
    """The spacing of the storage dtype (fp8_e4m3 or bf16) at each value."""
    low, mantissa_bits = (-6, 3) if dtype == "fp8_e4m3" else (-126, 7)
    magnitude = np.abs(values.astype(np.float64))
    _, e = np.frexp(magnitude)
    exponent = np.where(magnitude == 0, low, np.maximum(e - 1, low))
    return np.exp2(exponent - mantissa_bits)


def compare(out_bits: np.ndarray, reference: np.ndarray, rel_l2=8e-3, max_abs=3e-2):
    """Relative L2 and max error of a bf16 output against the reference;
    NaN never passes."""
    got = testing.bf16_values(out_bits).astype(np.float64)
    assert got.shape == reference.shape, (got.shape, reference.shape)
    assert np.isfinite(got).all(), "output has NaN or inf"
    err = np.linalg.norm(got - reference) / max(np.linalg.norm(reference), 1e-30)
    worst = float(np.max(np.abs(got - reference))) if got.size else 0.0
    assert err <= rel_l2 and worst <= max_abs, f"rel_l2 {err:.2e}, max_abs {worst:.2e}"
    return err, worst


def device_inputs(kit, inputs: dict) -> dict:
    """A layer's numpy inputs as the kit's arrays (uint16 bits -> bf16)."""
    return {name: kit.bf16(a) if a.dtype == np.uint16 else kit.array(a)
            for name, a in inputs.items()}


def csa_config(**overrides):
    """A CSA layer small enough for the fp64 oracle, with top-k below the
    closed regions of a few dozen tokens so selection really selects."""
    args = dict(kind="csa", num_heads=4, num_kv_heads=2, head_size=64, block_size=16,
                index_heads=2, index_dim=32, topk=4, spec_tokens=3)
    args.update(overrides)
    return s5.LayerConfig(**args)


def swa_config(**overrides):
    args = dict(kind="swa", num_heads=4, num_kv_heads=2, head_size=64, block_size=16,
                window=24, spec_tokens=3)
    args.update(overrides)
    return s5.LayerConfig(**args)


def forward(wrapper, engine: Engine, layer: int, inputs: dict, out, selected=None):
    """Runs one layer's whole forward on its cache with the kit's arrays."""
    state = engine.layers[layer]
    c = state.config
    if c.kind == "csa":
        return wrapper.forward_csa(c, inputs["query"], inputs["key"], inputs["value"],
                                   inputs["index_query"], inputs["index_weight"],
                                   inputs["index_key"], inputs["index_z"],
                                   kv_cache=state.kv_cache, ring=state.ring, out=out,
                                   gate=inputs.get("gate"), selected=selected)
    return wrapper.forward_swa(c, inputs["query"], inputs["key"], inputs["value"],
                               kv_cache=state.kv_cache, out=out, gate=inputs.get("gate"))


# A serving run of three requests through one cache: chunked prefill, a mixed
# step (decode beside prefill), MTP verify (k = 3), a verify that rewrites
# rejected drafts, then plain decode. (request, start, count) per request.
SCHEDULE = [
    [(0, 0, 40), (1, 0, 24)],
    [(0, 40, 1), (1, 24, 40), (2, 0, 20)],
    [(0, 41, 4), (1, 64, 4), (2, 20, 4)],
    [(0, 43, 4), (1, 65, 4), (2, 24, 4)],
    [(0, 47, 1), (1, 69, 1), (2, 28, 1)],
]


def make_wrapper(kit, backend, configs):
    """A wrapper with a workspace where the backend needs one from the
    caller (cuda); the cpu backend allocates its own."""
    workspace = kit.bytes((32 << 20,)) if kit.backend_kind == "cuda" else None
    return s5.AttentionWrapper(backend, configs, workspace=workspace)
