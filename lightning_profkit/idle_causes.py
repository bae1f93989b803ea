"""Why the GPU idled in the profiled steps, by what the training process was doing then, and what to do about the
largest cause (docs/reading-a-run.md)."""

from __future__ import annotations

from typing import Any, Optional

WHAT = {  # what the training process was doing while the GPU idled
    "data_wait": "waiting for the DataLoader",
    "blocking_sync": "in a blocking CUDA call",
    "cpu_ops": "running CPU operators",
    "other": "between recorded operators",
}
CAUSES = tuple(WHAT)  # the order every table and figure lists them in
ADVICE = {
    "data_wait": "the input pipeline is too slow: more workers, persistent_workers=True, pin_memory=True",
    "blocking_sync": "the CPU waits for the GPU inside the step: a .item(), .cpu() or print of a tensor",
    "cpu_ops": "the GPU outruns Python: larger batches, torch.compile, CUDA graphs",
    "other": "Python between operators (logging, metrics, hooks): do it less often, or off the step",
}
# each blocking call (BLOCKING_SYNC_CALLS in trace/vocabulary.py): what it is, and what in a step usually makes it
SYNC_ADVICE = {
    "cudaMemcpyAsync": ("blocking copies", "pin_memory=True, .to(device, non_blocking=True), fewer .cpu()"),
    "cudaMemcpy": ("synchronous copies", ".cpu(), .numpy() or tensors made from Python data"),
    "cudaStreamSynchronize": ("the CPU waits for the GPU", ".item(), .cpu(), print(tensor), logging a tensor"),
    "cudaDeviceSynchronize": ("torch.cuda.synchronize() in the step", "timing code, for one"),
    "cudaEventSynchronize": ("waiting on CUDA events each step", "event.synchronize() in timing code, for one"),
}


def share_name(cause: str) -> str:
    """The figure of a cause: ``gpu_idle_<cause>_share`` (logged as ``profkit/window/gpu_idle_<cause>_share``)."""
    return f"gpu_idle_{cause}_share"


def largest(shares: dict[str, Optional[float]]) -> Optional[str]:
    """The cause with the largest share of the idle time; None without a GPU (no share known)."""
    known = {cause: share for cause in CAUSES if (share := shares.get(cause)) is not None}
    return max(known, key=known.get) if known else None


def advice(cause: str, blocking_by_call: Optional[dict[str, float]] = None) -> str:
    """What to do about ``cause``; for a blocking call, about the call that blocked longest (``blocking_by_call``)."""
    if cause == "blocking_sync" and blocking_by_call:
        call = max(blocking_by_call, key=blocking_by_call.get)
        if call in SYNC_ADVICE:
            return f"{call} blocks: {SYNC_ADVICE[call][1]}"
    return ADVICE[cause]


def blocking_by_call(figures: dict[str, Any]) -> dict[str, float]:
    """The blocking CUDA calls of a trace's (or traces') figures, ms per step by call, those above zero."""
    return {k.split("/", 1)[1]: v for k, v in figures.items() if k.startswith("sync_ms_per_step/") and v}


def verdict(idle: Optional[float], shares: dict[str, Optional[float]],
            blocking_by_call: Optional[dict[str, float]] = None) -> list[str]:
    """How much the GPU idled, what the training process mostly did meanwhile, and what to do; none without a GPU."""
    cause = largest(shares)
    if idle is None or cause is None:
        return []
    if idle < 0.005:
        return [f"the GPU idled {idle:.1%} of the profiled steps"]
    return [f"the GPU idled {idle:.1%} of the profiled steps, {(shares[cause] or 0.0) / idle:.0%} of it {WHAT[cause]}",
            f"what to do: {advice(cause, blocking_by_call)}"]
