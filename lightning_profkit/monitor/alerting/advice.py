"""Advice for a data-bound run, from the user's own DataLoader and machine and how busy the worst rank's workers and
training thread were (read in a running fit by :class:`LoaderAdvice`), and for a GPU that idles (docs/alerts.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from itertools import islice
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np
import torch

from lightning_profkit.figures import HostFigures
from lightning_profkit.idle_causes import SYNC_ADVICE, WHAT, advice, largest
from lightning_profkit.machine import usable_cpus
from lightning_profkit.monitor.exchange import exchange_named, figures_of, made_from, names_of
from lightning_profkit.monitor.timing.fetch_timer import FetchStats
from lightning_profkit.monitor.timing.loader_busy import LoaderBusy, LoaderWatch, WaitBusy, WorkersBusy

WAITING = 0.5  # busy less than this share of the time: waiting on something other than the CPU (I/O)
CROWDED = 0.2  # workers ready to run but waiting for a CPU this share of the time: the node's CPUs are taken
UNPACKING = 0.8  # with workers, a training thread on or waiting for a CPU this share of its data wait unpacks batches
RESTARTING = 0.2  # workers that start again every epoch, taking this share of its time to give their first batch
# with workers, the training process is too slow to take the batches: thread busy TAKING_SHARE of its wait, taking a
# batch costs TAKING_CPU of making it, MANY_TENSORS a batch (docs/alerts.md; measured: docs/performance.md#advice)
TAKING_SHARE = 0.25
TAKING_CPU = 0.5
MANY_TENSORS = 8
UNSHARDED = "IterableDataset without get_worker_info() read by"


@dataclass(frozen=True)
class LoaderFacts:
    """What the advice looks at, read from a DataLoader by :func:`loader_facts`."""

    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: Optional[int] = None
    batch_size: Optional[int] = None
    iterable: bool = False
    shards_itself: bool = False  # an iterable dataset that gives each worker its own shard (see shards)
    cpus: int = 1  # CPUs this process may use
    processes_per_node: int = 1  # training processes sharing those CPUs (DDP ranks on the node)
    on_cuda: bool = False
    tensors_per_batch: Optional[int] = None  # tensors and numpy arrays in a batch of the fit, where counted

    @property
    def cpus_per_process(self) -> int:
        return max(1, self.cpus // self.processes_per_node)


def loader_facts(loader: Any, on_cuda: bool, processes_per_node: int = 1) -> LoaderFacts:
    """Read a torch DataLoader's settings (anything missing keeps its default)."""
    return LoaderFacts(
        num_workers=int(getattr(loader, "num_workers", 0) or 0),
        pin_memory=bool(getattr(loader, "pin_memory", False)),
        persistent_workers=bool(getattr(loader, "persistent_workers", False)),
        prefetch_factor=getattr(loader, "prefetch_factor", None),
        batch_size=getattr(loader, "batch_size", None),
        iterable=isinstance(getattr(loader, "dataset", None), torch.utils.data.IterableDataset),
        shards_itself=shards(getattr(loader, "dataset", None)),
        cpus=usable_cpus(),
        processes_per_node=max(1, processes_per_node),
        on_cuda=on_cuda,
    )


def tensors_in(batch: Any, most: int = 100_000) -> Optional[int]:
    """The tensors and numpy arrays in a batch of nested mappings, lists, tuples and dataclasses (at most ``most``
    items looked at); None for a batch of another kind."""
    def inside(item: Any) -> Optional[Iterable[Any]]:
        if isinstance(item, Mapping):
            return item.values()
        if isinstance(item, (list, tuple)):
            return item
        if is_dataclass(item) and not isinstance(item, type):
            return (getattr(item, f.name) for f in fields(item))
        return None

    if not isinstance(batch, (torch.Tensor, np.ndarray)) and inside(batch) is None:
        return None
    count, todo, seen, looked = 0, [batch], set(), 1
    while todo:
        item = todo.pop()
        if isinstance(item, (torch.Tensor, np.ndarray)):
            count += 1
            continue
        items = inside(item)
        if items is not None and id(item) not in seen:
            seen.add(id(item))
            before = len(todo)
            todo.extend(islice(items, most - looked))
            looked += len(todo) - before
    return count


SHARDING = ("litdata.", "webdataset.", "datasets.", "torchdata.")  # libraries whose iterable datasets shard by worker


def shards(dataset: Any) -> bool:
    """Whether an iterable dataset shows that it gives each DataLoader worker its own samples: a class of a library
    that does (:data:`SHARDING`), or an ``__iter__`` that asks ``get_worker_info()``."""
    kind = type(dataset)
    if any(getattr(c, "__module__", "").startswith(SHARDING) for c in kind.__mro__):
        return True
    code = getattr(getattr(kind, "__iter__", None), "__code__", None)
    return code is not None and "get_worker_info" in code.co_names


def data_wait_advice(facts: LoaderFacts, startup_s: Optional[float] = None, train_s: Optional[float] = None,
                     busy: LoaderBusy = LoaderBusy()) -> list[str]:
    """What to try, most likely first, for a loop that waits on its DataLoader."""
    suggested = max(1, facts.cpus_per_process - 2)  # leave the main process a CPU or two
    training = busy.training
    parts = (training, training.taking_line if training is not None else None, busy.workers)
    measured = [f"measured: {part}" for part in parts if part is not None]
    settings = _settings_advice(facts, suggested, startup_s, train_s)
    first = [line for line in settings if line.startswith(UNSHARDED)]  # duplicates: before any other change
    if not first and startup_s is not None and train_s and startup_s / train_s >= RESTARTING:  # the restarts first
        first = [line for line in settings if line.startswith("persistent_workers=True")]
    if first:
        return first + measured + [line for line in settings if line not in first]
    return _batch_maker_advice(facts, busy, suggested) + measured + settings


def _batch_maker_advice(facts: LoaderFacts, busy: LoaderBusy, suggested: int) -> list[str]:
    """Where the batches are made and how many workers, from how busy the training thread and the workers were."""
    workers, training, n = busy.workers, busy.training, facts.num_workers
    cheaper = "make __getitem__ cheaper (cache decoded data, augment on the GPU)"
    if n == 0:  # its CPU in its fetches over their wait less its wait for a CPU, where read: the load moves it least
        waits = training is not None and (training.high if training.taking is None else training.taking) < WAITING
        why = "loads every batch, waiting on I/O" if waits else "loads every batch itself"
        workers = max(suggested, 2) if waits or facts.cpus_per_process >= 2 else suggested
        return [f"num_workers=0: the training process {why}: try num_workers={workers}, persistent_workers=True"]
    merge = facts.tensors_per_batch is None or facts.tensors_per_batch >= MANY_TENSORS
    if training is not None and (training.low >= UNPACKING or merge and _taking_is_the_limit(training, workers)):
        each = f" ({facts.tensors_per_batch} tensors each)" if facts.tensors_per_batch else ""
        return [f"the training process unpacks every batch the workers send{each}; more workers do not help: return "
                "fewer, larger tensors"]
    if workers is not None and workers.computing < WAITING:
        return [f"the workers wait on storage, the network or a lock, not the CPU: try num_workers={2 * n}"]
    if workers is not None and (workers.queued or 0.0) >= CROWDED:
        return [f"the workers compute on CPUs that are all taken: {cheaper}"]
    if n < suggested:
        machine = f"{facts.cpus} CPUs" if facts.processes_per_node == 1 else f"{facts.cpus_per_process} CPUs per rank"
        return [f"num_workers={n} with {machine}: try num_workers={suggested}"]
    if workers is not None:
        return [f"the workers compute on every CPU there is: {cheaper}"]
    return [f"if the workers compute: {cheaper}",
            f"if they wait on storage or the network: try num_workers={2 * n} (their CPU could not be read)"]


def _taking_is_the_limit(training: WaitBusy, workers: Optional[WorkersBusy]) -> bool:
    """Whether taking the batches is what the training thread's wait goes to (see :data:`TAKING_CPU`)."""
    took, made = training.cpu_ms_per_batch, workers.cpu_ms_per_batch if workers is not None else None
    return (took is not None and made is not None and took >= TAKING_CPU * made
            and (training.taking or 0.0) >= TAKING_SHARE)


def _settings_advice(facts: LoaderFacts, suggested: int, startup_s: Optional[float],
                     train_s: Optional[float]) -> list[str]:
    """The loader settings that cost a data-bound loop time."""
    out, n = [], facts.num_workers
    if facts.on_cuda and not facts.pin_memory:
        out.append("pin_memory=True: batches copy to the GPU faster and can overlap compute; the copy is in the step")
    if n > 0 and not facts.persistent_workers:
        spent = f", {startup_s:.1f} s this epoch" if startup_s is not None else ""
        share = startup_s is not None and train_s and startup_s / train_s > 0.01
        if share or startup_s is None:
            out.append(f"persistent_workers=True: workers start again every epoch{spent}")
    if n > 0 and n >= suggested and (facts.prefetch_factor or 2) <= 2:
        out.append(f"prefetch_factor={2 * (facts.prefetch_factor or 2)}: more batches in flight when fetch times vary")
    if facts.batch_size is not None and facts.batch_size < 8:
        out.append(f"batch_size={facts.batch_size}: per-batch costs (collate, copies, hooks) dominate; a larger batch "
                   "spreads them")
    if facts.iterable and n > 0 and not facts.shards_itself:
        out.append(f"{UNSHARDED} {n} workers, each yields every sample ({n} copies an epoch): shard it first, each "
                   "worker its own part (torch.utils.data.get_worker_info())")
    elif facts.iterable and n == 0:
        out.append("IterableDataset: its iterator runs in the training process unless num_workers > 0")
    return out


def gpu_idle_advice(figures: HostFigures) -> list[str]:
    """Advice from a window's figures for a GPU that idles while the loop does not wait for data."""
    cause = largest(figures.gpu_idle_by_cause)
    out = [] if cause is None else [f"mostly {WHAT[cause]} ({figures.gpu_idle_by_cause[cause]:.0%} of the steps): "
                                    f"{advice(cause, figures.blocking_sync_us_by_call)}"]
    steps = max(figures.steps, 1)
    for name, us in sorted(figures.blocking_sync_us_by_call.items(), key=lambda kv: -kv[1]):
        if us and name in SYNC_ADVICE and us / steps >= 100:  # under 0.1 ms a step is not worth a line
            out.append(f"{name}, {us / steps / 1000:.1f} ms a step: {': '.join(SYNC_ADVICE[name])}")
    return out


def gpu_idle_notice(figures: HostFigures, trace_dir: str, data_wait_threshold: float) -> Optional[str]:
    """What to say about a window where the GPU mostly idles although the loop hardly waits for data, else None."""
    idle, data = figures.gpu_idle_share, figures.data_wait_share or 0.0
    if idle is None or idle <= 0.5 or data >= data_wait_threshold:
        return None
    lines = "".join(f"\n  - {line}" for line in [*gpu_idle_advice(figures), f"trace: {trace_dir}"])
    return f"GPU idle {idle:.0%} of the profiled steps, data wait {data:.0%}: the step's CPU side is the limit{lines}"


class LoaderAdvice:
    """``loader()`` reads the training DataLoader's settings, ``workers()`` its workers' pids; ``report(message,
    key)`` is told when either fails. Not ``watching`` (no alerts in this fit), marks read nothing."""

    def __init__(self, report: Callable[..., None], watching: bool = True) -> None:
        self.report, self.watching = report, watching
        self.loader: Callable[[], LoaderFacts] = LoaderFacts
        self.workers: Callable[[], Sequence[int]] = tuple
        self.tensors: Optional[int] = None  # in a batch of the fit, counted once (see :meth:`see`)
        self._seen = False
        self.watch = LoaderWatch()
        self.busy = LoaderBusy()  # since the mark before the latest check, once read
        # the fit's finished epochs: their data wait, fetches and the training thread's CPU in them
        self.waited_s, self.fetched, self.fetch_cpu_s = 0.0, 0, 0.0
        self._unread: Optional[tuple[float, float, int, float]] = None  # the latest check's figures, CPU not read yet

    def epoch_done(self, stats: FetchStats) -> None:
        """An epoch's fetches are counted (the timer starts new counters)."""
        self.waited_s += stats.train_s
        self.fetched += stats.train_count
        self.fetch_cpu_s += stats.cpu_s

    def see(self, batch: Any) -> None:
        """Count the tensors of a batch, once a fit (a loader keeps its batches' shape); no batch is kept."""
        if not self.watching or self._seen or batch is None:
            return
        self._seen = True
        try:
            self.tensors = tensors_in(batch)
        except Exception:  # a user's batch object: its count is unknown, the advice goes on without it
            self.tensors = None

    def mark(self, now: float, stats: FetchStats) -> None:
        """A rolling check (or an epoch's start or end) at ``now``; the CPU is read where the watch is due, else only
        if an alert asks for advice."""
        if not self.watching:
            return
        self._unread = (now, self.waited_s + stats.train_s, self.fetched + stats.train_count,
                        self.fetch_cpu_s + stats.cpu_s)
        if self.watch.due(now):
            self._read()

    def _read(self) -> None:
        """How busy the loading was from the watch's mark to the latest check."""
        at, self._unread = self._unread, None
        if at is None:
            return
        try:
            self.busy = self.watch.busy(self.workers(), *at)
        except Exception as err:
            self.report(f"reading the DataLoader's CPU failed:\n  {err!r}", "advice")

    def advice(self, group: Any, worst_rank: Optional[int], startup_s: Optional[float], train_s: float) -> list[str]:
        """What to try, from how busy the worst rank's loading was (an exchange in ``group``: every rank calls it)."""
        self._read()
        rank = None if group is None else worst_rank or 0  # named in the advice where several ranks train
        mine = {**figures_of(self.busy.workers, "workers."), **figures_of(self.busy.training, "training.")}
        rows = exchange_named(group, mine, names_of(WorkersBusy, "workers.") + names_of(WaitBusy, "training."))
        busy = LoaderBusy(made_from(WorkersBusy, rows[rank or 0], "workers.", rank=rank),
                          made_from(WaitBusy, rows[rank or 0], "training.", rank=rank))
        try:
            facts = replace(self.loader(), tensors_per_batch=self.tensors)  # the loader's settings count none
            return data_wait_advice(facts, startup_s, train_s, busy)
        except Exception as err:
            self.report(f"advice failed:\n  {err!r}", "advice")
            return []
