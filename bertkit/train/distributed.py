"""Small torch.distributed helpers used by the loop and by jobs' loss functions; all are no-ops in a
single process."""
from __future__ import annotations

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def global_sum(value: torch.Tensor) -> torch.Tensor:
    """Sum of a tensor over ranks (not differentiable; use it for counts such as masked tokens)."""
    if not is_distributed():
        return value
    value = value.detach().clone()
    dist.all_reduce(value)
    return value


def mean_over_ranks(values: list[float], device: torch.device) -> list[float]:
    if not is_distributed() or not values:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return (tensor / dist.get_world_size()).tolist()


def broadcast_object(obj):
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(obj) -> list:
    if not is_distributed():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_float(value: float, device: torch.device) -> float:
    """Rank 0's value everywhere: decisions such as 'time is up' must agree, or some ranks would wait forever."""
    if not is_distributed():
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.broadcast(tensor, src=0)
    return float(tensor.item())


def barrier() -> None:
    """Every rank waits here until all have arrived (rank 0 writing the run folder, say)."""
    if is_distributed():
        dist.barrier()
