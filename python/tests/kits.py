"""Array kits: the same tests on numpy (cpu backend), torch CPU tensors (cpu
backend) and torch CUDA tensors (cuda backend). A kit turns the tests' numpy
data into its framework's arrays and back; bf16 data travels as uint16 bits
in numpy and as torch.bfloat16 in torch."""

from __future__ import annotations

import numpy as np

import step5_attention as s5


class NumpyKit:
    name = "numpy-cpu"
    backend_kind = "cpu"

    def array(self, a: np.ndarray):
        return np.ascontiguousarray(a).copy()

    def bf16(self, bits: np.ndarray):
        return self.array(bits.astype(np.uint16))

    def host(self, a: np.ndarray):
        return np.ascontiguousarray(a).copy()

    def bytes(self, shape, fill: int = 0):
        return np.full(shape, fill, dtype=np.uint8)

    def int32(self, shape, fill: int = 0):
        return np.full(shape, fill, dtype=np.int32)

    def float32(self, shape, fill: float = 0.0):
        return np.full(shape, fill, dtype=np.float32)

    def bf16_empty(self, shape, fill_bits: int = 0xFFFF):
        return np.full(shape, fill_bits, dtype=np.uint16)

    def numpy(self, x) -> np.ndarray:
        return np.array(x, copy=True)

    def bf16_numpy(self, x) -> np.ndarray:
        return np.array(x, dtype=np.uint16, copy=True)

    def sync(self):
        pass

    def data_ptr(self, x) -> int:
        return x.ctypes.data


class TorchKit:
    def __init__(self, torch, device: str):
        self.torch = torch
        self.device = device
        self.name = f"torch-{device}"
        self.backend_kind = "cuda" if device == "cuda" else "cpu"

    def array(self, a: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(a).copy()).to(self.device)

    def bf16(self, bits: np.ndarray):
        raw = self.torch.from_numpy(np.ascontiguousarray(bits.astype(np.uint16)).view(np.int16))
        return raw.view(self.torch.bfloat16).to(self.device).clone()

    def host(self, a: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(a).copy())

    def bytes(self, shape, fill: int = 0):
        return self.torch.full(shape, fill, dtype=self.torch.uint8, device=self.device)

    def int32(self, shape, fill: int = 0):
        return self.torch.full(shape, fill, dtype=self.torch.int32, device=self.device)

    def float32(self, shape, fill: float = 0.0):
        return self.torch.full(shape, fill, dtype=self.torch.float32, device=self.device)

    def bf16_empty(self, shape, fill_bits: int = 0xFFFF):
        signed = fill_bits - 0x10000 if fill_bits >= 0x8000 else fill_bits
        raw = self.torch.full(shape, signed, dtype=self.torch.int16, device=self.device)
        return raw.view(self.torch.bfloat16)

    def numpy(self, x) -> np.ndarray:
        return x.detach().cpu().numpy().copy()

    def bf16_numpy(self, x) -> np.ndarray:
        return x.detach().view(self.torch.int16).cpu().numpy().view(np.uint16).copy()

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def data_ptr(self, x) -> int:
        return x.data_ptr()


def available_kits():
    """(id, kit or None, skip reason) for every flavor; None kits are skipped."""
    kits = [("numpy-cpu", NumpyKit(), None)]
    try:
        import torch
    except ImportError:
        reason = "torch is not installed"
        return kits + [("torch-cpu", None, reason), ("torch-cuda", None, reason)]
    kits.append(("torch-cpu", TorchKit(torch, "cpu"), None))
    why = s5.cuda_unavailable_reason()
    if why is None and torch.cuda.is_available():
        kits.append(("torch-cuda", TorchKit(torch, "cuda"), None))
    else:
        kits.append(("torch-cuda", None, f"cuda backend cannot run here: {why}"))
    return kits
