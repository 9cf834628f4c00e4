"""Device, dtype/autocast, seeding and torch.distributed set-up: decided once, here."""
from __future__ import annotations

import contextlib
import os
import random
from dataclasses import dataclass

import numpy as np
import torch

from bertkit.errors import BertkitError
from bertkit.options import PRECISIONS


def pick_device(name: str | None = None) -> torch.device:
    """`auto` (or None) takes CUDA when present, else CPU."""
    if name in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def autocast(device: torch.device, enabled: bool = True, cpu: bool = False):
    """bf16 autocast on CUDA (no loss scaling needed). On CPU only when asked (`cpu=True`): bf16 matmuls are
    much faster on CPUs with AMX or avx512_bf16 and slower on most others."""
    if enabled and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if enabled and cpu and device.type == "cpu":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


FLOAT_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class PrecisionChoice:
    precision: str              # fp32 | bf16 | int8
    dtype: torch.dtype          # of everything that is not an int8 matmul (embeddings, layer norm, attention)
    note: str                   # one line: what was chosen, and why when it was chosen automatically


def cpu_capabilities() -> dict:
    """torch's view of the CPU's instruction sets (amx_bf16, avx512_bf16, avx512_vnni, ...)."""
    try:
        return dict(torch.cpu.get_capabilities())
    except (AttributeError, RuntimeError):
        return {}


def fast_bf16(device: torch.device) -> str | None:
    """Why bf16 matmuls run fast on `device` (AMX tiles, avx512_bf16, a GPU), or None where they would be
    emulated and slower than fp32."""
    if device.type == "cuda":
        return "a CUDA GPU with bf16 support" if torch.cuda.is_bf16_supported() else None
    if device.type != "cpu":
        return None
    flags = cpu_capabilities()
    if flags.get("amx_bf16"):
        return "AMX bf16 on this CPU"
    if flags.get("avx512_bf16"):
        return "avx512_bf16 on this CPU"
    return None


def choose_precision(requested: str | None, device: torch.device, stored: str = "fp32") -> PrecisionChoice:
    """Resolve a requested precision for a model whose weights are `stored` as fp32 or int8.

    None keeps the stored precision. auto: an int8 folder runs in int8; otherwise bf16 where bf16 matmuls are
    fast (AMX or avx512_bf16 CPUs, GPUs), else fp32. The float parts of an int8 model (embeddings, layer
    norm, attention) run in bf16 or fp32 by the same rule.
    """
    requested = stored if requested is None else requested
    if requested not in PRECISIONS:
        raise BertkitError(f"precision {requested!r} is not one of {', '.join(PRECISIONS)}")
    reason = fast_bf16(device)
    float_name = "bf16" if reason else "fp32"
    if requested == "auto":
        if stored == "int8":
            return PrecisionChoice("int8", FLOAT_DTYPES[float_name],
                                   f"precision auto -> int8 (an int8 folder; {_int8_kernel(reason)})")
        why = reason or "no fast bf16 on " + _name(device)
        return PrecisionChoice(float_name, FLOAT_DTYPES[float_name], f"precision auto -> {float_name} ({why})")
    if requested == "int8":
        if stored != "int8":
            raise BertkitError("precision int8 needs a folder written by `bertkit quantize`, which measures the "
                               "int8 model against this one first: bertkit quantize --model DIR --output DIR_INT8")
        return PrecisionChoice("int8", FLOAT_DTYPES[float_name], f"precision int8 ({_int8_kernel(reason)})")
    return PrecisionChoice(requested, FLOAT_DTYPES[requested], f"precision {requested}")


def _int8_kernel(fast_bf16_reason: str | None) -> str:
    """How an int8 model runs (bertkit.model.precision.apply_precision picks the kernel by the float dtype)."""
    if fast_bf16_reason:
        return f"weights dequantized to bf16 matmuls, faster than int8 ones with {fast_bf16_reason}"
    return "int8 matmuls through torch._int_mm, fp32 elsewhere"


def _name(device: torch.device) -> str:
    return "this CPU (no AMX or avx512_bf16)" if device.type == "cpu" else str(device)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def distributed_env() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment; (0, 1, 0) when run directly."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))


def init_distributed(device: torch.device) -> tuple[int, int]:
    """Join the torchrun process group (NCCL on GPUs, gloo on CPU); returns (rank, world_size)."""
    rank, world, local_rank = distributed_env()
    if world > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(local_rank)
        torch.distributed.init_process_group(backend=backend)
    return rank, world
