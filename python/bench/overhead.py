"""Per-call overhead of forward_csa from Python (cpu backend, or cuda with torch).

Two steps of a tiny CSA layer: a one-request, one-token decode at 24 tokens
and an empty step (no request, no row: the forward validates and returns,
so no kernel runs). Each is timed three ways:

  wrapper   AttentionWrapper.forward_csa (the Python API)
  bound     the same with the layer's cache bound once (bind_cache)
  direct    the extension method the wrapper calls (no Python layer)
  c++       the same forward from C++ alone (no binding)

The same forward runs in every variant, so wrapper - c++ is what Python
adds per call (DLPack import of 11 arrays, views, stream, the call), and
the empty step's wrapper time is a whole call excluding the kernels.
Times are the minimum over rounds of the mean of many calls (noise only
adds), rounds interleaving the variants.

--device cuda (torch on a GPU): the same calls on torch CUDA tensors, no
synchronization inside a round (one after it, untimed); the direct call
then imports each tensor through its __dlpack__, the wrapper exports them
with torch's C exporter first (wrapper.py says why). The empty step is
then a whole call excluding the kernels; the decode step also enqueues the
layer's kernels, and rounds are short (--iterations 200) so the launch
queue never fills and makes the host wait for the GPU. The C++ variant is
cpu-only; `step5attn bench` reports the C++ host time of a cuda forward.
Usage: python python/bench/overhead.py [--device cpu|cuda] [--iterations N] [--rounds N]
"""

import argparse
import time

import numpy as np

import step5_attention as s5
from step5_attention import testing

CONTEXT = 24  # tokens after the decode step: 3 closed regions, under top-k


def tiny_config():
    return s5.LayerConfig(kind="csa", num_heads=1, num_kv_heads=1, head_size=64, block_size=16,
                          index_heads=1, index_dim=32, topk=4)


def step_arrays(c, empty):
    """Step metadata, layer inputs and caches as numpy arrays."""
    blocks = -(-CONTEXT // c.block_size)
    R, n = (0, 0) if empty else (1, 1)
    table = np.arange(blocks, dtype=np.int32).reshape(1, blocks)[:R]
    last = CONTEXT - 1
    slot = np.array([blocks and last // c.block_size * c.block_size + last % c.block_size],
                    np.int64)[:n]
    step = dict(query_start_loc=np.array([0, 1], np.int32)[: R + 1],
                seq_lens=np.array([CONTEXT], np.int32)[:R], block_table=table,
                slot_mapping=slot, ring_index=np.zeros(R, np.int32))
    H, G, D, I, Di = c.num_heads, c.num_kv_heads, c.head_size, c.index_heads, c.index_dim
    inputs = (np.zeros((n, H, D), np.uint16), np.zeros((n, G, D), np.uint16),
              np.zeros((n, G, D), np.uint16), np.zeros((n, G, I, Di), np.uint16),
              np.zeros((n, G, I), np.float32), np.zeros((n, Di), np.uint16),
              np.zeros(n, np.float32))
    caches = (np.zeros((blocks, s5.cache_bytes_per_block(c)), np.uint8),
              np.zeros((1, s5.ring_entry_bytes(c)), np.uint8), np.zeros((n, H, D), np.uint16))
    return step, inputs, caches


def to_cuda(a):
    """A torch CUDA tensor of numpy array `a` (uint16 arrays hold bf16)."""
    import torch
    if a.dtype == np.uint16:
        return torch.zeros(a.shape, dtype=torch.bfloat16, device="cuda")
    return torch.from_numpy(a).cuda()


def timed(call, sync=None):
    def run(iterations):
        start = time.perf_counter()
        for _ in range(iterations):
            call()
        seconds = (time.perf_counter() - start) / iterations
        if sync is not None:
            sync()
        return seconds
    return run


def variants(c, empty, device):
    label = "empty" if empty else "decode"
    step, inputs, (kv, ring, out) = step_arrays(c, empty)
    if device == "cuda":
        import torch
        workspace = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        wrapper = s5.AttentionWrapper(s5.Backend("cuda"), [c], workspace=workspace)
        host = dict(query_start_loc_cpu=step["query_start_loc"], seq_lens_cpu=step["seq_lens"])
        step = {name: to_cuda(a) for name, a in step.items()}
        inputs = tuple(to_cuda(a) for a in inputs)
        kv, ring, out = to_cuda(kv), to_cuda(ring), to_cuda(out)
        wrapper.plan(**step, **host)
        sync = torch.cuda.synchronize
    else:
        wrapper = s5.AttentionWrapper(s5.Backend("cpu", num_threads=1), [c])
        wrapper.plan(**step)
        sync = None
    native = wrapper._step
    bound = wrapper.bind_cache(c, kv, ring)
    runs = {
        f"{label} wrapper": timed(lambda: wrapper.forward_csa(c, *inputs, kv_cache=kv, ring=ring,
                                                              out=out), sync),
        f"{label} bound": timed(lambda: wrapper.forward_csa(c, *inputs, kv_cache=bound, ring=None,
                                                            out=out), sync),
        f"{label} direct": timed(lambda: native.forward_csa(c, *inputs, kv, ring, out), sync),
    }
    if device == "cpu":
        runs[f"{label} c++"] = lambda iterations: testing.cpp_decode_forward_seconds(
            c, CONTEXT, iterations, 1, empty)
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--iterations", type=int, default=None,
                        help="calls per round (default 10000 on cpu, 200 on cuda)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (the minimum is shown)")
    options = parser.parse_args()
    if options.iterations is None:
        options.iterations = 10000 if options.device == "cpu" else 200
    c = tiny_config()
    runs = {**variants(c, False, options.device), **variants(c, True, options.device)}
    for run in runs.values():
        run(10)
    best = {name: float("inf") for name in runs}
    for _ in range(options.rounds):
        for name, run in runs.items():
            best[name] = min(best[name], run(options.iterations))
    backend = "cpu backend, 1 thread" if options.device == "cpu" else "cuda backend, torch tensors"
    print(f"forward_csa per call from Python, {backend} "
          f"({options.iterations} calls x {options.rounds} rounds, minimum):")
    for name, seconds in best.items():
        print(f"  {name:<15} {seconds * 1e6:8.2f} us")
    if options.device == "cuda":
        # The wrapper exports torch tensors with torch's C exporter; the
        # direct call hands them to nanobind, which calls __dlpack__.
        for label in ("decode", "empty"):
            print(f"  {label}: {best[f'{label} wrapper'] * 1e6:.2f} us per call from the wrapper "
                  f"({best[f'{label} bound'] * 1e6:.2f} us with a bound cache), "
                  f"{best[f'{label} direct'] * 1e6:.2f} us with tensors imported by __dlpack__")
        return
    for label in ("decode", "empty"):
        added = best[f"{label} wrapper"] - best[f"{label} c++"]
        layer = best[f"{label} wrapper"] - best[f"{label} direct"]
        print(f"  {label}: Python adds {added * 1e6:.2f} us per call "
              f"({layer * 1e6:.2f} us of it in the Python wrapper layer)")


if __name__ == "__main__":
    main()
