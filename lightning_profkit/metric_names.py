"""Every metric PerformanceMonitor logs, with its unit and meaning: the one place their names are written
(docs/metrics.md holds :func:`markdown_table`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "profkit/"


@dataclass(frozen=True)
class Metric:
    """One logged metric (``<...>`` in a name: filled in at run time); ``ranks``: how several ranks' values become
    one ("mean", "max", or "": rank zero's or the worst)."""

    name: str
    unit: str
    when: str
    meaning: str
    ranks: str = "mean"

    def matches(self, name: str) -> bool:
        """Whether a logged name (without the prefix) is this metric, ``<...>`` standing for any text."""
        pattern = "".join(".+" if part.startswith("<") else re.escape(part) for part in re.split(r"(<[^>]+>)", self.name))
        return re.fullmatch(pattern, name) is not None


EPOCH, ROLLING, WINDOW = "every epoch", "every rolling check", "every window"

METRICS: tuple[Metric, ...] = (
    # every epoch, exchanged between the ranks in this order
    Metric("data_wait_ratio", "fraction", EPOCH,
           "time in Lightning's fetch of each training batch (the DataLoader's `next()` and Lightning's "
           "`CombinedLoader` around it, nothing of ours) / training time of the epoch (validation runs inside the "
           "epoch left out)"),
    Metric("data_wait_s", "s", EPOCH, "the time in those fetches"),
    Metric("train_s", "s", EPOCH, "the epoch's training time: its wall time less the validation runs inside it"),
    Metric("step_time_ms_mean", "ms", EPOCH,
           "from the start of a step's first fetch to the start of the next step's (the epoch's end for the last), "
           "validation runs left out: everything the loop does for a step"),
    Metric("step_time_ms_p90", "ms", EPOCH, "the 90th percentile of those step times"),
    Metric("dataloader_startup_s", "s", EPOCH,
           "epoch start to the first fetch: worker start-up, every epoch when `persistent_workers=False`; epoch 0 "
           "also Lightning's making of the loader and its first iterator (`setup_data`: `train_dataloader()`, the "
           "workers' start), before training starts"),
    Metric("samples_per_s", "1/s", EPOCH, "batches x `batch_size` / training time, where the loader has a `batch_size`"),
    Metric("val_data_wait_ratio", "fraction", EPOCH, "the data-wait ratio of the validation runs inside the epoch"),
    Metric("peak_memory_mb", "MB", EPOCH, "peak CUDA memory allocated in the epoch (CUDA only)", "max"),
    Metric("gpu_idle_ratio", "fraction", EPOCH,
           "1 - mean NVML utilization over the epoch's training time (CUDA with the `nvml` extra)"),
    Metric("overhead/profiled_step_ratio", "ratio", EPOCH,
           "mean time of the epoch's steps inside a profiler session (warm-up, recording, the save at the window's "
           "end) / mean of its other steps; epochs with a window", "max"),
    Metric("overhead/after_window_ratio", "ratio", EPOCH,
           "median time of the unprofiled steps after the epoch's first window / median of the unprofiled steps "
           "before the fit's first window (from the epoch's 6th step on), each less the share of its time the "
           "training thread waited for a CPU (Linux); warned about above 1.1 on CUDA, 1.5 on CPU, two epochs "
           "running (on CPU, epochs whose training thread waited for a CPU over 25% of its time after the window are "
           "not counted)", "max"),
    Metric("overhead/window_ms", "ms", EPOCH,
           "the training thread's time in each window's own calls (the profiler's start, its step boundaries, its "
           "stop and the hand-over to the writer), mean over the epoch's windows, training and validation; on CUDA the stop "
           "waits for the GPU to finish the work queued ahead of it", "max"),
    Metric("overhead/helper_cpu_s", "s", EPOCH,
           "CPU used in the epoch off the training thread (the trace writer's thread and the finalizing process), "
           "read from the OS at the epoch's end; epochs that used some (what the fit used after its last epoch is in "
           "the end-of-fit lines)", "max"),
    # every epoch, after the exchange
    Metric("data_wait_ratio_max", "fraction", EPOCH, "with several ranks: the worst rank's data-wait ratio", ""),
    Metric("data_wait_worst_rank", "rank", EPOCH, "with several ranks: the rank with that ratio", ""),
    Metric("data_wait_alert", "0 or 1", EPOCH,
           "1 when the epoch was in a data-wait episode; with alerts on. TensorBoard smooths every scalar (0.6 by "
           "default), which shows this flag as the share of recent epochs in an episode: set smoothing to 0 to read "
           "the flag", ""),
    Metric("data_wait_alerts", "count", EPOCH,
           "data-wait alerts so far in the fit (resumed from a checkpoint); with alerts on. It reads right smoothed: "
           "it lags, but rises at every alert and never shows more than there were", ""),
    # every rolling check (`alert_window` steps), at the step of its last batch
    Metric("rolling/data_wait_ratio", "fraction", ROLLING, "the data-wait ratio of the check's block of steps"),
    Metric("rolling/step_time_ms", "ms", ROLLING, "the block's training time per step"),
    Metric("rolling/data_wait_ratio_max", "fraction", ROLLING,
           "with several ranks: the worst rank's block, the figure the alert rule reads", ""),
    # every window, from rank zero's trace, at the step of the window's last batch (`val_window/`: validation windows)
    Metric("window/host_step_ms", "ms", WINDOW, "mean duration of the window's `ProfilerStep` spans on the host", ""),
    Metric("window/data_wait_share", "fraction", WINDOW, "DataLoader time inside the steps / step time", ""),
    Metric("window/blocking_sync_ms_per_step", "ms", WINDOW,
           "blocking CUDA synchronisation on the training thread inside the steps, per step (GPU only)", ""),
    Metric("window/sync_ms_per_step/<call>", "ms", WINDOW, "the same, per call that blocked (GPU only)", ""),
    Metric("window/gpu_idle_share", "fraction", WINDOW,
           "1 - share of the window's steps, as the GPU ran them, with kernels, memcpy or memset on the GPU, "
           "averaged over its GPUs (GPU only)", ""),
    Metric("window/gpu_idle_<cause>_share", "fraction", WINDOW,
           "the part of `gpu_idle_share` during which the training process was, first match wins: `data_wait` in a "
           "DataLoader fetch, `blocking_sync` in a blocking CUDA call, `cpu_ops` running any other recorded CPU "
           "operator, annotation or Python function (on any of its threads), `other` none of these; the four sum to "
           "`gpu_idle_share` (GPU only)", ""),
    Metric("window/peak_memory_mb/<device>", "MB", WINDOW, "peak memory allocated, with `profile_memory=True`", ""),
    Metric("val_window/<figure>", "as window/", WINDOW,
           "the window figures of a validation window (`validation_batches`), at the training step it followed", ""),
)

EXCHANGED = tuple(m.name for m in METRICS if m.when == EPOCH and m.ranks)  # every rank sends these, in this order
LARGEST = frozenset(m.name for m in METRICS if m.ranks == "max")


def find(name: str) -> Metric:
    """The metric a logged name (with or without the prefix) is; KeyError for a name not listed here."""
    bare = name.removeprefix(PREFIX)
    for metric in METRICS:
        if metric.matches(bare):
            return metric
    raise KeyError(name)


def markdown_table() -> str:
    """The table of every metric, in docs/metrics.md."""
    rows = ["| metric | unit | logged | meaning |", "|---|---|---|---|"]
    for m in METRICS:
        ranks = {"mean": "; several ranks: the mean", "max": "; several ranks: the largest"}.get(m.ranks, "")
        rows.append(f"| `{m.name}` | {m.unit} | {m.when} | {m.meaning}{ranks} |")
    return "\n".join(rows)
