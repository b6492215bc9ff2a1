"""Per-call overhead of forward_csa from Python on the cpu backend.

Two steps of a tiny CSA layer: a one-request, one-token decode at 24 tokens
and an empty step (no request, no row: the forward validates and returns,
so no kernel runs). Each is timed three ways:

  wrapper   AttentionWrapper.forward_csa (the Python API)
  direct    the extension method the wrapper calls (no Python layer)
  c++       the same forward from C++ alone (no binding)

The same forward runs in every variant, so wrapper - c++ is what Python
adds per call (DLPack import of 11 arrays, views, stream, the call), and
the empty step's wrapper time is a whole call excluding the kernels.
Times are the minimum over rounds of the mean of many calls (noise only
adds), rounds interleaving the variants.
Usage: python python/bench/overhead.py [--iterations N] [--rounds N]
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


def timed(call):
    def run(iterations):
        start = time.perf_counter()
        for _ in range(iterations):
            call()
        return (time.perf_counter() - start) / iterations
    return run


def variants(c, empty):
    wrapper = s5.AttentionWrapper(s5.Backend("cpu", num_threads=1), [c])
    step, inputs, (kv, ring, out) = step_arrays(c, empty)
    wrapper.plan(**step)
    native = wrapper._step
    label = "empty" if empty else "decode"
    return {
        f"{label} wrapper": timed(lambda: wrapper.forward_csa(c, *inputs, kv_cache=kv, ring=ring,
                                                              out=out)),
        f"{label} direct": timed(lambda: native.forward_csa(c, *inputs, kv, ring, out)),
        f"{label} c++": lambda iterations: testing.cpp_decode_forward_seconds(
            c, CONTEXT, iterations, 1, empty),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (the minimum is shown)")
    options = parser.parse_args()
    c = tiny_config()
    runs = {**variants(c, empty=False), **variants(c, empty=True)}
    for run in runs.values():
        run(10)
    best = {name: float("inf") for name in runs}
    for _ in range(options.rounds):
        for name, run in runs.items():
            best[name] = min(best[name], run(options.iterations))
    print(f"forward_csa per call from Python, cpu backend, 1 thread "
          f"({options.iterations} calls x {options.rounds} rounds, minimum):")
    for name, seconds in best.items():
        print(f"  {name:<15} {seconds * 1e6:8.2f} us")
    for label in ("decode", "empty"):
        added = best[f"{label} wrapper"] - best[f"{label} c++"]
        layer = best[f"{label} wrapper"] - best[f"{label} direct"]
        print(f"  {label}: Python adds {added * 1e6:.2f} us per call "
              f"({layer * 1e6:.2f} us of it in the Python wrapper layer)")


if __name__ == "__main__":
    main()
