"""Device, dtype/autocast, seeding and torch.distributed set-up: decided once, here."""
from __future__ import annotations

import contextlib
import os
import random

import numpy as np
import torch


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


def cpu_has_fast_bf16() -> bool:
    """True on CPUs with AMX tiles or avx512_bf16, where a bf16 matmul beats fp32 (AMX: ~5x); elsewhere bf16
    is emulated and slower, so "auto" precision stays fp32 there."""
    cpu = getattr(torch, "cpu", None)
    checks = [getattr(cpu, name, None) for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported")]
    return any(check() for check in checks if check is not None)


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
