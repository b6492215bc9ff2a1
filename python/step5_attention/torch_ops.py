"""torch.library ops over AttentionWrapper, so torch.compile(fullgraph=True)
traces through a model's attention layers. Importing this module needs
torch; the rest of the package never imports it.

    from step5_attention import torch_ops
    handle = torch_ops.register(wrapper)       # once, at model build
    torch.ops.step5.forward_csa(handle, layer_index, q, k, v, ..., kv_cache, ring, out)

The op names a wrapper by `handle` and a layer by its index in the
wrapper's layers: plain ints, so a compiled graph stays valid across steps
while plan() is called each step outside it (as engines build attention
metadata outside the model's graph). Ops write `out` and the caches in
place and return nothing; their fake implementations do nothing, which is
all tracing needs.
"""

from __future__ import annotations

import itertools
from typing import Dict, Optional

import torch

from .wrapper import AttentionWrapper

_wrappers: Dict[int, AttentionWrapper] = {}
_handles = itertools.count(1)


def register(wrapper: AttentionWrapper) -> int:
    """Makes `wrapper` reachable from the ops; returns its handle."""
    handle = next(_handles)
    _wrappers[handle] = wrapper
    return handle


def unregister(handle: int) -> None:
    _wrappers.pop(handle, None)


def _wrapper(handle: int) -> AttentionWrapper:
    try:
        return _wrappers[handle]
    except KeyError:
        raise ValueError(f"step5 op: expected a handle from torch_ops.register(), got {handle}")


@torch.library.custom_op("step5::forward_csa", mutates_args=("kv_cache", "ring", "out"))
def forward_csa(handle: int, layer: int, query: torch.Tensor, key: torch.Tensor,
                value: torch.Tensor, index_query: torch.Tensor, index_weight: torch.Tensor,
                index_key: torch.Tensor, index_z: torch.Tensor, kv_cache: torch.Tensor,
                ring: torch.Tensor, out: torch.Tensor,
                gate: Optional[torch.Tensor] = None) -> None:
    w = _wrapper(handle)
    w.forward_csa(w.layers[layer], query, key, value, index_query, index_weight, index_key,
                  index_z, kv_cache=kv_cache, ring=ring, out=out, gate=gate)


@forward_csa.register_fake
def _forward_csa_fake(handle, layer, query, key, value, index_query, index_weight, index_key,
                      index_z, kv_cache, ring, out, gate=None) -> None:
    return None


@torch.library.custom_op("step5::forward_swa", mutates_args=("kv_cache", "out"))
def forward_swa(handle: int, layer: int, query: torch.Tensor, key: torch.Tensor,
                value: torch.Tensor, kv_cache: torch.Tensor, out: torch.Tensor,
                gate: Optional[torch.Tensor] = None) -> None:
    w = _wrapper(handle)
    w.forward_swa(w.layers[layer], query, key, value, kv_cache=kv_cache, out=out, gate=gate)


@forward_swa.register_fake
def _forward_swa_fake(handle, layer, query, key, value, kv_cache, out, gate=None) -> None:
    return None
