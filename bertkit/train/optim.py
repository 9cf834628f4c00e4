"""AdamW parameter groups and learning-rate schedules for the one training loop.

The schedule is a pure function of *progress* in [0, 1]. Progress is steps / total steps, or, with a
wall-clock budget, the fraction of the budget spent (Cramming, Geiping & Goldstein 2022: the schedule is
fitted to the time a run has, not to a step count guessed in advance), whichever is further along.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
from torch import nn

from bertkit.errors import BertkitError
from bertkit.job_config import ScheduleName


# ULMFiT (Howard & Ruder 2018): the lowest lr is 1/32 of the peak.
SLANTED_TRIANGULAR_RATIO = 32.0


def parse_duration(text: str) -> float:
    """'30m', '2h', '1h30m', '90s', '1d' -> seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([smhd])", text.strip().lower())
    if not parts or re.sub(r"(\d+(?:\.\d+)?)\s*([smhd])", "", text.strip().lower()).strip():
        raise BertkitError(f"time budget {text!r}: write it with units, e.g. 90s, 30m, 2h, 1h30m")
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(float(n) * unit[u] for n, u in parts)


def encoder_layer_of(name: str) -> Optional[int]:
    """Depth of a parameter for layer-wise lr decay: embeddings 0, block i -> i + 1, anything else (pooler,
    heads) None, meaning 'the top'. Works with any prefix ('encoder.blocks.3.' or 'blocks.3.')."""
    match = re.search(r"(?:^|\.)blocks\.(\d+)\.", name)
    if match:
        return int(match.group(1)) + 1
    if re.search(r"(?:^|\.)embeddings\.", name):
        return 0
    return None


def param_groups(model: nn.Module, lr: float, weight_decay: float, layerwise_lr_decay: Optional[float] = None,
                 layer_of: Callable[[str], Optional[int]] = encoder_layer_of, head_lr: Optional[float] = None,
                 is_head: Optional[Callable[[str], bool]] = None) -> list[dict]:
    """AdamW groups: no weight decay on biases and LayerNorm parameters (as in BERT's optimizer), and with
    `layerwise_lr_decay` = d an lr of lr * d ** (top - depth) (Clark et al. 2020, ELECTRA; Sun et al. 2019).
    With `head_lr`, the parameters `is_head(name)` names (a new task head) train at head_lr instead: a freshly
    initialized layer on a pre-trained encoder needs a higher lr than the encoder (Howard & Ruder 2018; the
    measurements behind the fine-tuning default are in bertkit/finetune/recipe.py)."""
    no_decay: set[int] = set()
    for module in model.modules():
        for pname, param in module.named_parameters(recurse=False):
            if isinstance(module, nn.LayerNorm) or pname == "bias" or pname.endswith("_bias"):
                no_decay.add(id(param))
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]   # shared params appear once
    depths = {n: layer_of(n) for n, _ in named} if layerwise_lr_decay is not None else {}
    top = max([d for d in depths.values() if d is not None], default=0) + 1
    groups: dict[tuple[bool, int, bool], dict] = {}
    for name, param in named:
        decay = id(param) not in no_decay
        depth = depths.get(name)
        depth = top if depth is None else depth
        head = head_lr is not None and is_head is not None and is_head(name)
        scale = layerwise_lr_decay ** (top - depth) if layerwise_lr_decay is not None else 1.0
        group_lr = head_lr if head else lr * scale
        key = (decay, depth if layerwise_lr_decay is not None else 0, head)
        group = groups.setdefault(key, {"params": [], "names": [], "weight_decay": weight_decay if decay else 0.0,
                                        "lr": group_lr, "base_lr": group_lr, "head": head})
        group["params"].append(param)
        group["names"].append(name)
    return list(groups.values())


def build_optimizer(model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.999),
                    eps: float = 1e-6, layerwise_lr_decay: Optional[float] = None,
                    layer_of: Callable[[str], Optional[int]] = encoder_layer_of, head_lr: Optional[float] = None,
                    is_head: Optional[Callable[[str], bool]] = None) -> torch.optim.AdamW:
    groups = param_groups(model, lr, weight_decay, layerwise_lr_decay, layer_of, head_lr, is_head)
    if not groups:
        raise BertkitError("the model has no trainable parameters")
    # fused: one vectorized kernel per tensor instead of a dozen elementwise ops (164 -> ~25 ms a MiniLM step on
    # CPU); the same update as the for-loop AdamW. Transformers' Trainer defaults to it too.
    params = [p for group in groups for p in group["params"]]
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)


def lr_factor(progress: float, schedule: ScheduleName, warmup: float) -> float:
    """Multiplier of the peak lr at `progress` in [0, 1], with linear warm-up over the first `warmup` fraction."""
    progress = min(max(progress, 0.0), 1.0)
    if schedule == "slanted_triangular":
        cut = warmup if warmup > 0 else 0.1
        if progress < cut:
            p = progress / cut
        else:
            p = max(0.0, 1 - (progress - cut) / (1 - cut)) if cut < 1 else 1.0
        return (1 + p * (SLANTED_TRIANGULAR_RATIO - 1)) / SLANTED_TRIANGULAR_RATIO
    if warmup > 0 and progress < warmup:
        return progress / warmup
    if schedule == "constant":
        return 1.0
    rest = (progress - warmup) / (1 - warmup) if warmup < 1 else 1.0
    if schedule == "linear":
        return max(0.0, 1.0 - rest)
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * rest))
    raise BertkitError(f"schedule {schedule!r} is not one of linear, cosine, constant, slanted_triangular")


@dataclass
class Schedule:
    """Sets each group's lr from progress; its state (steps, seconds spent, lr scale after NaN roll-backs)
    is saved with checkpoints so a resumed run continues the same curve."""
    name: ScheduleName
    total_steps: Optional[int]
    time_budget_s: Optional[float] = None
    warmup_ratio: float = 0.0
    warmup_steps: Optional[int] = None
    step: int = 0
    elapsed_s: float = 0.0
    lr_scale: float = 1.0
    last_lr: float = field(default=0.0)

    def shares(self) -> tuple[Optional[float], Optional[float]]:
        """(steps done / planned, time spent / budget); None where the run has no such limit."""
        return (self.step / self.total_steps if self.total_steps else None,
                self.elapsed_s / self.time_budget_s if self.time_budget_s else None)

    def progress(self) -> float:
        parts = [share for share in self.shares() if share is not None]
        return max(parts) if parts else 0.0

    def clock_lead(self) -> float:
        """How far the time budget's share of the run is ahead of the steps' share (negative: behind; 0 without
        both): where it is positive, progress() and so the lr follow the clock."""
        steps, clock = self.shares()
        return 0.0 if steps is None or clock is None else clock - steps

    def warmup_fraction(self) -> float:
        if self.warmup_steps is None:
            return self.warmup_ratio
        if self.total_steps:
            return min(1.0, self.warmup_steps / self.total_steps)
        return 0.0   # time budget only: warm-up by steps is applied in factor()

    def factor(self) -> float:
        value = lr_factor(self.progress(), self.name, self.warmup_fraction())
        if self.warmup_steps and not self.total_steps and self.step < self.warmup_steps:
            value *= self.step / self.warmup_steps
        return value * self.lr_scale

    def apply(self, optimizer: torch.optim.Optimizer) -> float:
        """Set the lr of every group for the coming optimizer step; returns the peak lr of the groups that are
        not a task head (the head's own lr, when it has one, is head_lr x the same factor)."""
        factor = self.factor()
        for group in optimizer.param_groups:
            group["lr"] = group.get("base_lr", group["lr"]) * factor
        body = [g["lr"] for g in optimizer.param_groups if not g.get("head")]
        self.last_lr = max(body or [g["lr"] for g in optimizer.param_groups])
        return self.last_lr

    def finished(self) -> bool:
        return self.progress() >= 1.0 and bool(self.total_steps or self.time_budget_s)

    def state_dict(self) -> dict:
        return {"step": self.step, "elapsed_s": self.elapsed_s, "lr_scale": self.lr_scale}

    def load_state_dict(self, state: dict) -> None:
        step, elapsed_s, lr_scale = int(state["step"]), float(state["elapsed_s"]), float(state["lr_scale"])
        if step < 0 or not elapsed_s >= 0 or not lr_scale > 0:
            raise ValueError(f"schedule step {step}, elapsed_s {elapsed_s}, lr_scale {lr_scale}")
        self.step, self.elapsed_s, self.lr_scale = step, elapsed_s, lr_scale
