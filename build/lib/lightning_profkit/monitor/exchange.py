"""A few numbers from every rank, over a gloo group on the host: the rolling checks and the epoch figures never
touch the device (no copy to the GPU and back, no synchronisation)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def exchange_group(world_size: int) -> Any:
    """A gloo process group for the exchanges (the world's when it is gloo already); None in one process."""
    if world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.group.WORLD if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")


def exchange(group: Any, values: list[float]) -> list[list[float]]:
    """Every rank's ``values`` in rank order (a CPU all_gather); just ours in a single process."""
    if group is None:
        return [values]
    mine = torch.tensor(values, dtype=torch.float64)
    rows = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(rows, mine, group=group)
    return [row.tolist() for row in rows]
