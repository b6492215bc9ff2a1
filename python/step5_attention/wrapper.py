"""The plan/run wrapper: plan() once per step, forward_csa/forward_swa per layer."""

from __future__ import annotations

import sys
from typing import Any, Optional, Sequence, Tuple

from . import _ext

Array = Any  # any DLPack producer: numpy.ndarray, torch.Tensor, cupy.ndarray, jax.Array
Rows = Optional[Tuple[int, int]]


def _current_stream(array: Array) -> int:
    """The caller's current CUDA stream for `array`'s framework, as a handle.

    Frameworks are looked up in sys.modules only, so nothing is imported
    here: an array can only be a torch tensor if torch is already loaded.
    For torch, the raw-stream query Triton and Inductor use (0.26 us on the
    H200 host) rather than torch.cuda.current_stream() (6 us) when it exists.
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(array, torch.Tensor):
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        device = array.get_device()
        if raw is not None and device >= 0:
            return raw(device)
        return torch.cuda.current_stream(array.device).cuda_stream
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(array, cupy.ndarray):
        return cupy.cuda.get_current_stream().ptr
    return 0


def _exported(*arrays: Array) -> list:
    """The per-layer calls' arrays, torch tensors as DLPack capsules.

    nanobind imports a torch tensor by calling its __dlpack__, Python code
    that cost 5.2 us a tensor on the H200 host (torch 2.11; a CSA forward
    passes eleven), against 0.6 us for torch's C exporter to_dlpack. The
    stream handshake __dlpack__ would do is not needed: the launch goes on
    the caller's current stream, where the tensors were produced.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return list(arrays)
    to_dlpack, tensor = torch.utils.dlpack.to_dlpack, torch.Tensor
    return [to_dlpack(a) if isinstance(a, tensor) else a for a in arrays]


def _flags(skip_kv_write: bool, skip_summary_update: bool, skip_padding_zero: bool) -> int:
    """step5::ForwardFlags bits of a forward's keywords."""
    return ((_ext.FORWARD_SKIP_KV_WRITE if skip_kv_write else 0)
            | (_ext.FORWARD_SKIP_SUMMARY_UPDATE if skip_summary_update else 0)
            | (_ext.FORWARD_SKIP_PADDING_ZERO if skip_padding_zero else 0))


def cuda_unavailable_reason() -> Optional[str]:
    """None when the cuda backend can run here, else what is missing."""
    try:
        _ext.Backend("cuda")
    except (NotImplementedError, RuntimeError) as error:
        return str(error)
    return None


class AttentionWrapper:
    """One step of an engine, planned once and run for every layer.

    backend: a Backend. layers: every LayerConfig the step will run (CSA and
    SWA); a forward's `layer` must match one of them. workspace: a 1-D byte
    array on the backend's device of at least `workspace_bytes` after
    256-byte alignment (required on cuda; the cpu backend allocates its own
    when None). Reusable across steps: plan() replaces the previous step.

    stream (every method): a CUDA stream handle; None takes the current
    stream of the array's framework (torch, CuPy) on cuda, 0 elsewhere.
    """

    def __init__(self, backend: _ext.Backend, layers: Sequence[_ext.LayerConfig],
                 workspace: Optional[Array] = None):
        self.backend = backend
        self.workspace = workspace
        self._layers = tuple(layers)
        self._step = _ext.AttentionStep(backend, list(self._layers))
        self._on_cuda = backend.kind == "cuda"

    def _stream(self, stream: Optional[int], array: Array) -> int:
        if stream is not None:
            return int(stream)
        return _current_stream(array) if self._on_cuda else 0

    # ---- once per step ---------------------------------------------------

    def plan(self, query_start_loc: Array, seq_lens: Array, block_table: Array,
             slot_mapping: Array, ring_index: Optional[Array] = None, *,
             query_start_loc_cpu: Optional[Array] = None, seq_lens_cpu: Optional[Array] = None,
             block_table_cpu: Optional[Array] = None, slot_mapping_cpu: Optional[Array] = None,
             ring_index_cpu: Optional[Array] = None, num_output_rows: int = 0,
             max_context: int = 0, max_score_bytes: Optional[int] = None,
             seq_lens_upper_bound: bool = False, tile_attention: str = "auto",
             stream: Optional[int] = None) -> None:
        """Plans the step on the host; no device synchronization.

        query_start_loc i32 [R+1], seq_lens i32 [R] (lengths after this step),
        block_table i32 [R, max_blocks], slot_mapping i64 [n], ring_index i32
        [R] (each request's CSA ring entry; may be None without CSA layers):
        arrays on the backend's device. The *_cpu arguments are host copies
        (numpy or CPU tensors) the planner reads instead: query_start_loc_cpu
        and seq_lens_cpu are required on cuda; block_table_cpu,
        slot_mapping_cpu and ring_index_cpu, when given, let the planner check
        block ids and ring entries. num_output_rows: rows of `out` (CUDA-graph
        padding, zeroed); 0 = n. max_context: plan for contexts up to this
        many tokens (one plan for every replay of a captured decode step).

        Requests with no rows after the last request with rows (vLLM's
        CUDA-graph padding: query_start_loc repeating n, seq_lens 0, any
        ring_index) keep a decode/verify step uniform; their rows produce
        zeros and write nothing.

        seq_lens_upper_bound: the host copy (seq_lens_cpu, or on the cpu
        backend seq_lens itself when no copy is given) holds upper bounds of
        the lengths (asynchronous scheduling with speculative decoding); the
        forwards read the exact lengths from `seq_lens` when they run, with
        query_len <= seq_lens[r] <= seq_lens_cpu[r]. query_start_loc stays
        exact.

        tile_attention: "auto" lets the cuda backend run prefill rows (requests
        of >= 8 query rows) through its tile kernel where that pays; "always"
        or "never" force the choice (A/B measurements). Results differ only
        in rounding; the cpu backend ignores it.
        """
        self._step.plan(query_start_loc, seq_lens, block_table, slot_mapping, ring_index,
                        query_start_loc_cpu=query_start_loc_cpu, seq_lens_cpu=seq_lens_cpu,
                        block_table_cpu=block_table_cpu, slot_mapping_cpu=slot_mapping_cpu,
                        ring_index_cpu=ring_index_cpu, num_output_rows=num_output_rows,
                        max_context=max_context, max_score_bytes=max_score_bytes,
                        seq_lens_upper_bound=seq_lens_upper_bound,
                        tile_attention=tile_attention, workspace=self.workspace,
                        stream=self._stream(stream, query_start_loc))

    @property
    def planned(self) -> bool:
        return self._step.planned

    @property
    def layers(self) -> tuple:
        """The LayerConfigs given at construction, in order."""
        return self._layers

    @property
    def workspace_bytes(self) -> int:
        """Workspace the current plan uses (after plan())."""
        return self._step.workspace_bytes

    @property
    def step_kind(self) -> str:
        """'empty', 'uniform' (decode/verify) or 'mixed'."""
        return self._step.step_kind

    @property
    def num_tokens(self) -> int:
        return self._step.num_tokens

    @property
    def num_output_rows(self) -> int:
        return self._step.num_output_rows

    @property
    def max_closed(self) -> int:
        return self._step.max_closed

    @property
    def score_stride(self) -> int:
        """Minimum last dim of an indexer_scores `scores` array."""
        return self._step.score_stride

    @property
    def chunks(self) -> list:
        """Row ranges [begin, end) the CSA scoring works in."""
        return self._step.chunks

    # ---- once per layer --------------------------------------------------

    def bind_cache(self, layer: _ext.LayerConfig, kv_cache: Array,
                   ring: Optional[Array] = None) -> _ext.BoundCache:
        """A layer's kv_cache (and CSA ring) converted once, for the forwards.

        Pass the result as a forward's kv_cache (with ring=None): the forward
        then skips converting and checking those arrays again, which is a
        good part of a per-layer call's Python cost. The binding holds the
        arrays; they must keep their storage while it is used (an engine's
        caches are allocated once). Valid across steps and plans.
        """
        return self._step.bind_cache(layer, *_exported(kv_cache, ring))

    def forward_csa(self, layer: _ext.LayerConfig, query: Array, key: Optional[Array],
                    value: Optional[Array], index_query: Array, index_weight: Array,
                    index_key: Optional[Array], index_z: Optional[Array], *, kv_cache: Array,
                    ring: Optional[Array], out: Array, gate: Optional[Array] = None,
                    selected: Optional[Array] = None, skip_kv_write: bool = False,
                    skip_summary_update: bool = False, skip_padding_zero: bool = False,
                    stream: Optional[int] = None) -> Array:
        """A whole CSA layer: KV write, summaries, scores, top-k, attention, gate.

        query bf16 [n, H, D], key/value bf16 [n, G, D], index_query bf16
        [n, G, I, Di], index_weight f32 [n, G, I], index_key bf16 [n, Di],
        index_z f32 [n], gate bf16 [n, H] or None (bf16 arrays may be uint16
        holding bf16 bits). kv_cache [num_blocks, >= cache_bytes_per_block]
        bytes (any dtype; the block stride is free, so a layer's slice of a
        multi-layer cache works); ring [entries, >= ring_entry_bytes] bytes.
        kv_cache may instead be a BoundCache (bind_cache) holding both; ring
        is then None.
        out bf16 [num_output_rows, H, D]; selected i32 [n, G, K] or None.
        Returns out.

        What the engine does itself (the seed's fusions and split):
        skip_kv_write: it wrote K/V before (e.g. Backend.write_kv from its
        slot_mapping); key and value may be None. skip_summary_update: it ran
        update_summaries for this step; index_key, index_z and ring may be
        None. skip_padding_zero: rows past n (and rows of padding requests)
        are left as they are.
        """
        flags = _flags(skip_kv_write, skip_summary_update, skip_padding_zero)
        if type(kv_cache) is _ext.BoundCache:
            if ring is not None:
                raise ValueError("forward_csa: ring expected None with a bound cache "
                                 "(bind_cache holds the ring), got an array")
            q, k, v, iq, iw, ik, iz, o, g, sel = _exported(
                query, key, value, index_query, index_weight, index_key, index_z, out, gate,
                selected)
            self._step.forward_csa_bound(layer, q, k, v, iq, iw, ik, iz, kv_cache, o, g, sel,
                                         flags, self._stream(stream, out))
            return out
        self._step.forward_csa(layer, *_exported(query, key, value, index_query, index_weight,
                                                 index_key, index_z, kv_cache, ring, out, gate,
                                                 selected),
                               flags, self._stream(stream, out))
        return out

    def forward_swa(self, layer: _ext.LayerConfig, query: Array, key: Optional[Array],
                    value: Optional[Array], *, kv_cache: Array, out: Array,
                    gate: Optional[Array] = None, skip_kv_write: bool = False,
                    skip_padding_zero: bool = False, stream: Optional[int] = None) -> Array:
        """A whole SWA layer: KV write, window attention, gate. Returns out.

        skip_kv_write and skip_padding_zero as for forward_csa."""
        flags = _flags(skip_kv_write, False, skip_padding_zero)
        if type(kv_cache) is _ext.BoundCache:
            q, k, v, o, g = _exported(query, key, value, out, gate)
            self._step.forward_swa_bound(layer, q, k, v, kv_cache, o, g, flags,
                                         self._stream(stream, out))
            return out
        self._step.forward_swa(layer, *_exported(query, key, value, kv_cache, out, gate), flags,
                               self._stream(stream, out))
        return out

    # ---- single operations (the stages of a forward) ---------------------

    def write_kv(self, layer, key, value, *, kv_cache, stream=None) -> None:
        """Stores the step's key/value rows at slot_mapping."""
        self._step.write_kv(layer, *_exported(key, value, kv_cache), self._stream(stream, key))

    def update_summaries(self, layer, index_key, index_z, *, kv_cache, ring,
                         stream=None) -> None:
        """Writes index rows to the rings and summarizes every region they close."""
        self._step.update_summaries(layer, index_key, index_z, kv_cache, ring,
                                    self._stream(stream, index_key))

    def indexer_scores(self, layer, index_query, index_weight, *, kv_cache, scores,
                       rows: Rows = None, stream=None) -> None:
        """scores f32 [rows, G, >= score_stride]: score of each closed region, -inf past."""
        self._step.indexer_scores(layer, index_query, index_weight, kv_cache, scores, rows,
                                  self._stream(stream, scores))

    def select_regions(self, layer, scores, *, selected, rows: Rows = None,
                       stream=None) -> None:
        """selected i32 [rows, G, K]: the top-k closed regions, ascending, -1 padded."""
        self._step.select_regions(layer, scores, selected, rows, self._stream(stream, selected))

    def sparse_attention(self, layer, query, selected, *, kv_cache, out, gate=None,
                         rows: Rows = None, stream=None) -> None:
        """Attention over the selected regions plus each row's own region."""
        self._step.sparse_attention(layer, query, selected, kv_cache, out, gate, rows,
                                    self._stream(stream, out))

    def window_attention(self, layer, query, *, kv_cache, out, gate=None, stream=None) -> None:
        """Sliding-window attention of every row."""
        self._step.window_attention(layer, query, kv_cache, out, gate, self._stream(stream, out))
