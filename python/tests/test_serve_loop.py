"""examples/serve_loop.py, the engine loop written as documentation, runs and
passes its own per-step checks: on the cpu backend with torch CPU tensors,
and on cuda (graphs) where the cuda backend can run. Skipped without torch
(the example is written on torch tensors)."""

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import step5_attention as s5  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "serve_loop.py"


@pytest.fixture
def serve_loop(monkeypatch):
    spec = importlib.util.spec_from_file_location("serve_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules while the file runs.
    monkeypatch.setitem(sys.modules, "serve_loop", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8_e4m3"])
def test_serve_loop_on_the_cpu_backend(serve_loop, capsys, kv_dtype):
    # 16 steps: prefill chunks, mixed steps with verify rows (one planned
    # from length bounds after rejected drafts), replayed verify and decode
    # steps, CSA past its dense range.
    assert serve_loop.main(["--device", "cpu", "--kv-dtype", kv_dtype, "--steps", "16"]) == 0
    printed = capsys.readouterr().out
    for what in ("prefill", "mixed", "verify", "decode", "replayed", "eager+bound", "sdpa",
                 "oracle", "every step matched"):
        assert what in printed, what


def test_serve_loop_fails_on_a_wrong_reference(serve_loop, capsys, monkeypatch):
    """The checks discriminate: taking dense SDPA as the reference past the
    SWA window and past CSA's dense range must fail, and exit 1."""
    monkeypatch.setattr(serve_loop, "dense_limit", lambda c: 1 << 30)
    assert serve_loop.main(["--device", "cpu", "--steps", "6"]) == 1
    assert "FAIL(rel_l2)" in capsys.readouterr().out


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8_e4m3"])
def test_serve_loop_on_cuda_with_graphs(serve_loop, capsys, kv_dtype):
    why = s5.cuda_unavailable_reason()
    if why is not None or not torch.cuda.is_available():
        pytest.skip(f"cuda backend cannot run here: {why or 'torch sees no GPU'}")
    assert serve_loop.main(["--device", "cuda", "--kv-dtype", kv_dtype, "--steps", "40"]) == 0
    printed = capsys.readouterr().out
    assert "graph+1pad" in printed and "graph+2pad" in printed
