"""Capturing a decode step in a torch.cuda.CUDAGraph (needs torch and a GPU).

Uniform decode and verify steps need no host plan inside the forward, so a
whole step can be captured once and replayed. The rules:

1. Keep every array the step reads in static tensors: query_start_loc,
   seq_lens, block_table, slot_mapping, ring_index, the layer inputs, `out`,
   the caches and the wrapper's workspace.
2. plan() once for the captured batch shape with max_context = the longest
   context a replay may reach (so the plan's sizes fit every replay), from
   the static tensors and their host copies.
3. Capture the forwards, then per step copy the new values into the static
   tensors and replay. Do not plan again while the graph is in use: the
   plan's sizes and pointers are baked into it.
4. A replay may carry fewer live requests than captured, padded as vLLM
   pads: the live requests first with the captured query length each, then
   requests with no rows (query_start_loc repeating its last value, seq_lens
   0, slot_mapping -1 for their rows). Their output rows come out zero and
   nothing is written for them (docs/contract.md, "CUDA-graph padding").
   Backend.workspace_bytes(layers, max_tokens=, max_requests=, max_context=)
   sizes one workspace for every captured batch size.
"""

from __future__ import annotations

from typing import Callable

import torch


class CapturedStep:
    """`run` (the step's forwards) captured once; replay() runs it again on
    whatever the static tensors hold. Capturing does not run `run`."""

    def __init__(self, run: Callable[[], None], pool=None):
        self.graph = torch.cuda.CUDAGraph()
        # The wrapper launches on torch's current stream, which inside this
        # block is the capture stream.
        with torch.cuda.graph(self.graph, pool=pool):
            run()

    def replay(self) -> None:
        self.graph.replay()
