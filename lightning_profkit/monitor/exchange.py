"""A few numbers from every rank, over our own gloo group on the host: the rolling checks and the epoch figures never
touch the device (no copy to the GPU and back, no synchronisation). Design notes: docs/how-it-works.md."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Mapping, Optional, Sequence, TypeVar

import torch
import torch.distributed as dist


Buffers = dict[int, tuple[torch.Tensor, list[torch.Tensor]]]  # by how many values: this rank's, every rank's
_buffers: dict[int, Buffers] = {}  # id(group): its gathers' tensors
_kept: list[Buffers] = []  # those of closed groups, until the next group is made
T = TypeVar("T")


def exchange_group(world_size: int) -> Any:
    """A gloo process group of every rank for the exchanges (a collective: every rank calls it); None in one
    process. End it with :func:`close_group`."""
    _kept.clear()  # the groups they were gathered in are gone
    if world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.new_group(backend="gloo")


def close_group(group: Any) -> None:
    """Destroy a group from :func:`exchange_group` (a local call; None is left alone)."""
    if group is not None:
        _kept.append(_buffers.pop(id(group), {}))
        if dist.is_initialized():
            dist.destroy_process_group(group)


def _gather(group: Any, values: list[float]) -> list[list[float]]:
    """Every rank's ``values`` in rank order (a CPU all_gather)."""
    buffers = _buffers.setdefault(id(group), {})
    if len(values) not in buffers:
        mine = torch.zeros(len(values), dtype=torch.float64)
        buffers[len(values)] = mine, [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
    mine, rows = buffers[len(values)]
    mine.copy_(torch.tensor(values, dtype=torch.float64))
    dist.all_gather(rows, mine, group=group)
    return [row.tolist() for row in rows]


def exchange_named(group: Any, figures: Mapping[str, float], names: Sequence[str]) -> list[dict[str, float]]:
    """Every rank's ``figures`` in rank order, by name: each of ``names`` that the rank has (every rank sends a
    value for each, NaN where it has none); just ours in a single process."""
    mine = [figures.get(name, math.nan) for name in names]
    rows = [mine] if group is None else _gather(group, mine)
    return [{name: value for name, value in zip(names, row) if not math.isnan(value)} for row in rows]


@functools.lru_cache(maxsize=None)
def _fields(cls: type) -> tuple[tuple[str, bool, bool], ...]:
    """A dataclass's fields, each with whether it must be given and whether it is typed ``int`` (its annotation as
    written: no evaluation, which would compile the annotations' text)."""
    return tuple((f.name, f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                  f.type in (int, "int")) for f in dataclasses.fields(cls))


def names_of(cls: type, prefix: str = "") -> list[str]:
    """The names :func:`figures_of` gives the fields of ``cls``."""
    return [prefix + name for name, _, _ in _fields(cls)]


def figures_of(obj: Any, prefix: str = "") -> dict[str, float]:
    """The numbers of a dataclass by field name (``prefix`` before each); None is left out."""
    values = {name: getattr(obj, name) for name, _, _ in _fields(type(obj))} if obj is not None else {}
    return {prefix + name: float(value) for name, value in values.items() if value is not None}


def made_from(cls: type[T], figures: Mapping[str, float], prefix: str = "", **given: Any) -> Optional[T]:
    """``cls`` from the figures named for its fields (those typed ``int`` made ints again) and ``given``; None
    where a field it needs is not among them."""
    values: dict[str, Any] = {}
    for name, needed, whole in _fields(cls):
        if name in given:
            continue
        if prefix + name in figures:
            value = figures[prefix + name]
            values[name] = int(value) if whole else value
        elif needed:
            return None
    return cls(**values, **given)
