"""A few numbers from every rank, over a gloo group on the host: the rolling checks and the epoch figures never
touch the device (no copy to the GPU and back, no synchronisation).

The group is our own, made at setup and destroyed at teardown, even when the world's group is gloo already:
gloo's worker threads keep a gather's tensors after it returns, and a process that ends with them still held
(as a rank does right after the end-of-fit exchange) aborts in interpreter shutdown in about one exit of 15
("terminate called without an active exception"); destroying the group ends those threads first."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def exchange_group(world_size: int) -> Any:
    """A gloo process group of every rank for the exchanges (a collective: every rank calls it); None in one
    process. End it with :func:`close_group`."""
    if world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.new_group(backend="gloo")


def close_group(group: Any) -> None:
    """Destroy a group from :func:`exchange_group` (a local call; None is left alone)."""
    if group is not None and dist.is_initialized():
        dist.destroy_process_group(group)


def exchange(group: Any, values: list[float]) -> list[list[float]]:
    """Every rank's ``values`` in rank order (a CPU all_gather); just ours in a single process."""
    if group is None:
        return [values]
    mine = torch.tensor(values, dtype=torch.float64)
    rows = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(rows, mine, group=group)
    return [row.tolist() for row in rows]
