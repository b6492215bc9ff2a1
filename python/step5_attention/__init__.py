"""step5-attention from Python: CSA and SWA attention on DLPack arrays.

    import step5_attention as s5
    csa = s5.LayerConfig(kind="csa", num_heads=16, num_kv_heads=2, ...)
    wrapper = s5.AttentionWrapper(s5.Backend("cpu"), [csa])
    wrapper.plan(query_start_loc, seq_lens, block_table, slot_mapping, ring_index)
    wrapper.forward_csa(csa, query, key, value, ..., kv_cache=cache, ring=ring, out=out)

Arrays go to the library without copies (numpy for the cpu backend; torch,
CuPy, JAX or any DLPack producer on cuda). Errors raise ValueError,
IndexError, NotImplementedError or RuntimeError with the library's message.
torch.library ops live in step5_attention.torch_ops (imported on demand);
the dense oracle for tests in step5_attention.testing.
"""

from ._ext import (
    Backend,
    LayerConfig,
    __version__,
    built_with_cuda,
    cache_bytes_per_block,
    interleaved_blocks,
    kv_bytes_per_block,
    ring_entry_bytes,
    ring_row_bytes,
    summary_bytes_per_block,
)
from .wrapper import AttentionWrapper, cuda_unavailable_reason

__all__ = [
    "AttentionWrapper",
    "Backend",
    "LayerConfig",
    "__version__",
    "built_with_cuda",
    "cache_bytes_per_block",
    "cuda_unavailable_reason",
    "interleaved_blocks",
    "kv_bytes_per_block",
    "ring_entry_bytes",
    "ring_row_bytes",
    "summary_bytes_per_block",
]
