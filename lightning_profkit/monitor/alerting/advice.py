"""Advice for a data-bound run, from the user's own DataLoader and machine, and what its workers did. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from lightning_profkit.figures import HostFigures
from lightning_profkit.machine import usable_cpus
from lightning_profkit.monitor.timing.loader_busy import LoaderBusy

WAITING = 0.5  # busy less than this share of the time: waiting on something other than the CPU (I/O)
CROWDED = 0.2  # workers ready to run but waiting for a CPU this share of the time: the node's CPUs are taken
# with workers, a training thread on or waiting for a CPU through at least this share of its data wait unpacks the
# batches itself: one that only sleeps until a batch comes still waits for a CPU then, a large share of a short wait
# where other processes hold the CPUs
UNPACKING = 0.8
RESTARTING = 0.2  # workers that start again every epoch, taking this share of its time to give their first batch
# with workers, at least this share of the data wait in fetches that began with a batch made and waiting (not always
# the next one: batches come in order), with the training thread on a CPU through at least TAKING of it: the workers
# are ahead, and the time goes to taking their batches in the training process (receiving every tensor, unpickling)
READY = 0.5
TAKING = 0.25  # asleep while a stalled worker's batch is next: 0.04-0.05 measured; receiving: 0.55-0.82, less if busy


@dataclass(frozen=True)
class LoaderFacts:
    """What the advice looks at; :func:`loader_facts` reads it from a DataLoader."""

    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: Optional[int] = None
    batch_size: Optional[int] = None
    iterable: bool = False
    shards_itself: bool = False  # an iterable dataset that gives each worker and rank its own shard (litdata's)
    cpus: int = 1  # CPUs this process may use
    processes_per_node: int = 1  # training processes sharing those CPUs (DDP ranks on the node)
    on_cuda: bool = False
    worker_pids: tuple[int, ...] = ()  # the worker processes running now

    @property
    def cpus_per_process(self) -> int:
        return max(1, self.cpus // self.processes_per_node)


def loader_facts(loader: Any, on_cuda: bool, processes_per_node: int = 1, worker_pids: Sequence[int] = ()) -> LoaderFacts:
    """Read a torch DataLoader's settings (anything missing keeps its default), with its workers' pids."""
    from torch.utils.data import IterableDataset

    return LoaderFacts(
        num_workers=int(getattr(loader, "num_workers", 0) or 0),
        pin_memory=bool(getattr(loader, "pin_memory", False)),
        persistent_workers=bool(getattr(loader, "persistent_workers", False)),
        prefetch_factor=getattr(loader, "prefetch_factor", None),
        batch_size=getattr(loader, "batch_size", None),
        iterable=isinstance(getattr(loader, "dataset", None), IterableDataset),
        shards_itself=any(c.__module__.startswith("litdata.") for c in type(getattr(loader, "dataset", None)).__mro__),
        cpus=usable_cpus(),
        processes_per_node=max(1, processes_per_node),
        on_cuda=on_cuda,
        worker_pids=tuple(worker_pids),
    )


def data_wait_advice(facts: LoaderFacts, startup_s: Optional[float] = None, train_s: Optional[float] = None,
                     busy: LoaderBusy = LoaderBusy()) -> list[str]:
    """What to try, most likely first, for a loop that waits on its DataLoader: where the batches are made
    (:func:`_batch_maker_advice`), what was measured, then the loader settings that cost time."""
    per_process = facts.cpus_per_process
    suggested = max(1, per_process - 2 if per_process > 2 else per_process - 1)  # leave the main process a CPU
    training = busy.training
    parts = (training, training.ready_line if training is not None else None, busy.workers)
    measured = [f"measured: {part}" for part in parts if part is not None]
    settings = _settings_advice(facts, suggested, startup_s, train_s)
    restart = [line for line in settings if line.startswith("persistent_workers=True")]
    if restart and startup_s is not None and train_s and startup_s / train_s >= RESTARTING:  # the restarts first
        return restart + measured + [line for line in settings if line not in restart]
    return _batch_maker_advice(facts, busy, suggested) + measured + settings


def _batch_maker_advice(facts: LoaderFacts, busy: LoaderBusy, suggested: int) -> list[str]:
    """Where the batches are made rests on how busy the training thread was in its wait, and how many workers on
    how busy they were (``busy``, measured): a training thread that computes in its wait, or waits while batches the
    workers made are ready, unpacks the batches itself; workers that wait on I/O gain from more of them than CPUs,
    workers that compute from cheaper samples."""
    workers, training, n = busy.workers, busy.training, facts.num_workers
    cheaper = "make __getitem__ cheaper (cache decoded data, augment on the GPU)"
    if n == 0:
        waits = training is not None and training.high < WAITING
        why = "loads every batch, waiting on I/O" if waits else "loads every batch itself"
        workers = max(suggested, 2) if waits or facts.cpus_per_process >= 2 else suggested
        return [f"num_workers=0: the training process {why}: try num_workers={workers}, persistent_workers=True"]
    taking = training is not None and (training.ready or 0.0) >= READY and training.low >= TAKING
    if training is not None and (training.low >= UNPACKING or taking):
        return ["the training process unpacks every batch the workers send; more workers do not help: return fewer, "
                "larger tensors"]
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


def _settings_advice(facts: LoaderFacts, suggested: int, startup_s: Optional[float],
                     train_s: Optional[float]) -> list[str]:
    """The loader settings that cost a data-bound loop time: pinned memory, worker restarts, prefetching, small
    batches, an iterable dataset's sharding."""
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
        out.append("IterableDataset with workers: each worker must read its own shard (get_worker_info())")
    elif facts.iterable and n == 0:
        out.append("IterableDataset: its iterator runs in the training process unless num_workers > 0")
    return out


_SYNC_ADVICE = {
    "cudaMemcpyAsync": "blocking copies: pin_memory=True, .to(device, non_blocking=True), fewer .cpu()",
    "cudaMemcpy": "synchronous copies: .cpu(), .numpy() or tensors made from Python data",
    "cudaStreamSynchronize": "the CPU waits for the GPU: .item(), .cpu(), print(tensor), logging a tensor",
    "cudaDeviceSynchronize": "torch.cuda.synchronize() in the step, e.g. timing code",
    "cudaEventSynchronize": "waiting on CUDA events each step, e.g. event.synchronize() in timing code",
}


def gpu_idle_advice(figures: HostFigures) -> list[str]:
    """Advice from a window's figures for a GPU that idles while the loop does not wait for data: the
    blocking calls that cost most per step, with their usual causes."""
    steps = max(figures.steps, 1)
    out = []
    for name, us in sorted(figures.blocking_sync_us_by_call.items(), key=lambda kv: -kv[1]):
        if us and name in _SYNC_ADVICE and us / steps >= 100:  # under 0.1 ms a step is not worth a line
            out.append(f"{name}, {us / steps / 1000:.1f} ms a step: {_SYNC_ADVICE[name]}")
    if not out and figures.gpu_idle_share is not None:
        out.append("no blocking call stands out: try larger batches, torch.compile or CUDA graphs")
    return out


def gpu_idle_notice(figures: HostFigures, trace_dir: str, data_wait_threshold: float) -> Optional[str]:
    """What to say about a window where the GPU mostly idles although the loop hardly waits for data; None
    for any other window."""
    idle, data = figures.gpu_idle_share, figures.data_wait_share or 0.0
    if idle is None or idle <= 0.5 or data >= data_wait_threshold:
        return None
    lines = "".join(f"\n  - {line}" for line in [*gpu_idle_advice(figures), f"trace: {trace_dir}"])
    return f"GPU idle {idle:.0%} of the profiled steps, data wait {data:.0%}: the step's CPU side is the limit{lines}"
