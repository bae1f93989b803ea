"""Advice for a data-bound run, from the user's own DataLoader and machine, and what its workers did. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from lightning_profkit.figures import HostFigures
from lightning_profkit.machine import usable_cpus
from lightning_profkit.monitor.timing.loader_busy import LoaderBusy

WAITING = 0.5  # busy less than this share of the time: waiting on something other than the CPU (I/O)
CROWDED = 0.2  # workers ready to run but waiting for a CPU this share of the time: the node's CPUs are taken


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
    """What to try, most likely first, for a loop that waits on its DataLoader. Where the batches are made rests on
    how busy the training thread was in its wait, and how many workers on how busy they were (``busy``, measured):
    a training thread that computes in its wait unpacks or makes the batches itself; workers that wait on I/O gain
    from more of them than CPUs, workers that compute from cheaper samples."""
    out: list[str] = []
    per_process = max(1, facts.cpus // facts.processes_per_node)
    suggested = max(1, per_process - 2 if per_process > 2 else per_process - 1)  # leave the main process a CPU
    machine = f"{facts.cpus} CPUs" + (f" shared by {facts.processes_per_node} ranks" if facts.processes_per_node > 1 else "")
    workers, training = busy.workers, busy.training
    if facts.num_workers == 0:
        waits = training is not None and training.high < WAITING
        out.append(
            f"num_workers=0 loads every batch in the training process, on a machine with {machine}"
            + (f" ({training})" if training is not None else "")
            + (": it mostly waits on storage or the network, which workers overlap, even more of them than CPUs"
               if waits else "")
            + f": try num_workers={max(suggested, 2) if waits else suggested}, persistent_workers=True"
        )
    elif training is not None and training.low >= WAITING:
        out.append(f"{training}: with num_workers={facts.num_workers} it unpacks every batch the workers send, and more "
                   "workers do not shorten that; return fewer, larger tensors from the Dataset or collate_fn (not "
                   "Python objects or many small tensors), and keep sampler and collate work out of the training "
                   "process")
    elif workers is not None and workers.computing < WAITING:
        out.append(f"{workers}: they wait on something other than the CPU (storage, the network, a lock), and more "
                   f"workers than CPUs overlap those waits: try num_workers={2 * facts.num_workers}")
    elif workers is not None and (workers.queued or 0.0) >= CROWDED:
        out.append(f"{workers}: they compute, and the {machine} are taken (by them and other processes), so more "
                   "workers would wait for a CPU too; make __getitem__ cheaper (cache decoded or preprocessed data, move "
                   "augmentation to the GPU) or free CPUs on the node")
    elif facts.num_workers < suggested:
        measured = f" ({workers})" if workers is not None else ""
        out.append(f"num_workers={facts.num_workers} with {machine}{measured}: try num_workers={suggested}")
    elif workers is not None:
        out.append(f"{workers}, and num_workers={facts.num_workers} already uses the {machine}: the per-sample work is "
                   "the limit; make __getitem__ cheaper (cache decoded or preprocessed data, move augmentation to "
                   "the GPU)")
    else:
        out.append(f"num_workers={facts.num_workers} already uses the {machine}; the workers' CPU could not be read, so "
                   "whether they compute or wait is not known: if they compute, make __getitem__ cheaper (cache "
                   "decoded or preprocessed data, move augmentation to the GPU); if they wait on storage or the "
                   f"network, try more workers than CPUs (num_workers={2 * facts.num_workers})")
    if facts.on_cuda and not facts.pin_memory:
        out.append("pin_memory=True: page-locked batches copy to the GPU faster and can overlap with compute (the loader "
                   "has it off; the copy runs in the step, not in the data wait: a window's trace shows its time as "
                   "cudaMemcpyAsync)")
    if facts.num_workers > 0 and not facts.persistent_workers:
        spent = f" (start-up took {startup_s:.1f}s this epoch)" if startup_s is not None else ""
        share = startup_s is not None and train_s and startup_s / train_s > 0.01
        if share or startup_s is None:
            out.append(f"persistent_workers=True: workers are started again at every epoch{spent}")
    if facts.num_workers > 0 and facts.num_workers >= suggested and (facts.prefetch_factor or 2) <= 2:
        out.append(f"prefetch_factor={2 * (facts.prefetch_factor or 2)}: keep more batches in flight when fetch times vary")
    if facts.batch_size is not None and facts.batch_size < 8:
        out.append(f"batch_size={facts.batch_size}: fixed per-batch costs (collate, transfer, hooks) dominate; a larger batch amortises them")
    if facts.iterable and facts.num_workers > 0:
        if not facts.shards_itself:
            out.append("IterableDataset with workers: each worker must read its own shard "
                       "(torch.utils.data.get_worker_info()), and one slow shard stalls the loop")
    elif facts.iterable:
        out.append("IterableDataset: its iterator runs in the training process unless num_workers > 0")
    return out


_SYNC_ADVICE = {
    "cudaMemcpyAsync": "host-device copies that block: copies from pageable memory and device-to-host reads "
    "(`.cpu()`, `.tolist()`, `.numpy()`) wait; use pin_memory=True with `.to(device, non_blocking=True)` and keep "
    "results on the GPU",
    "cudaMemcpy": "synchronous copies: `.cpu()`, `.numpy()` or a tensor built from Python data in the step",
    "cudaStreamSynchronize": "the CPU waits for the GPU: `.item()`, `.cpu()`, printing a tensor, or `self.log(..., "
    "on_step=True)` of a tensor every step; log less often or on_epoch",
    "cudaDeviceSynchronize": "`torch.cuda.synchronize()` (or code that calls it, e.g. timing) in the step",
    "cudaEventSynchronize": "waiting on CUDA events every step (timing code, `event.synchronize()`)",
}


def gpu_idle_advice(figures: HostFigures) -> list[str]:
    """Advice from a window's figures for a GPU that idles while the loop does not wait for data: the
    blocking calls that cost most per step, with their usual causes."""
    steps = max(figures.steps, 1)
    out = []
    for name, us in sorted(figures.blocking_sync_us_by_call.items(), key=lambda kv: -kv[1]):
        if us and name in _SYNC_ADVICE and us / steps >= 100:  # under 0.1 ms a step is not worth a line
            out.append(f"{name} blocked the CPU {us / steps / 1000:.1f} ms per step: {_SYNC_ADVICE[name]}")
    if not out and figures.gpu_idle_share is not None:
        out.append(
            "no blocking call stands out: the CPU side of the step (Python, kernel launches) is the limit; "
            "try larger batches, torch.compile or CUDA graphs"
        )
    return out


def gpu_idle_notice(figures: HostFigures, trace_dir: str, data_wait_threshold: float) -> Optional[str]:
    """What to say about a window where the GPU mostly idles although the loop hardly waits for data; None
    for any other window."""
    idle, data = figures.gpu_idle_share, figures.data_wait_share or 0.0
    if idle is None or idle <= 0.5 or data >= data_wait_threshold:
        return None
    lines = "\n".join(f"  - {line}" for line in gpu_idle_advice(figures))
    return (f"the GPU was idle {idle:.0%} of the steps in {trace_dir} while the DataLoader took {data:.0%}: "
            f"the CPU side of the step is the limit.\n{lines}")
