"""Where a fit's traces go (their folders' names, a store's staging folder) and the written windows handed back to the
training thread: checked, their figures logged (docs/traces-and-storage.md)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Callable, Optional

from lightning_profkit.companions import remove_local
from lightning_profkit.figures import MB, HostFigures
from lightning_profkit.monitor.alerting.advice import gpu_idle_notice
from lightning_profkit.monitor.alerting.checks import DEFAULT_ALERT_THRESHOLD
from lightning_profkit.monitor.options import Options
from lightning_profkit.monitor.timing.epoch_figures import window_metrics
from lightning_profkit.monitor.writing.writer import TraceWriter, WindowJob, free_mb
from lightning_profkit.opener import size_words
from lightning_profkit.printable import redact
from lightning_profkit.monitor.writing.process import FinalizingProcess
from lightning_profkit.store import STAGING_PREFIX, StoreError, is_url, join


def worker_name(rank: int) -> str:
    """A file-name-safe worker name unique per host and rank."""
    host = re.sub(r"[^A-Za-z0-9_-]+", "_", socket.gethostname()) or "host"
    return f"{host}_rank{rank}"


EPOCH_DIGITS, BATCH_DIGITS = 4, 6  # window folders sort in time order in any listing up to epoch 9999, batch 999999
SUMMARIZED = 50  # the newest training windows of a fit that the end-of-fit line covers


def _batches(first: int, last: int) -> str:
    return f"{first:0{BATCH_DIGITS}d}" if first == last else f"{first:0{BATCH_DIGITS}d}-{last:0{BATCH_DIGITS}d}"


def window_name(epoch: int, first: int, last: int) -> str:
    """``epoch=0001-batch=000011-000013``: batches 11-13 of epoch 1 (docs/choosing-steps.md)."""
    return f"epoch={epoch:0{EPOCH_DIGITS}d}-batch={_batches(first, last)}"


def validation_window_name(epoch: int, after_batch: int, first: int, last: int) -> str:
    """``epoch=0000-batch=000039-val-batch=000002-000004``: batches 2-4 of the validation run after training batch
    39 of epoch 0 (docs/choosing-steps.md)."""
    return f"{window_name(epoch, after_batch, after_batch)}-val-batch={_batches(first, last)}"


# the folders these two name, and earlier builds' (step=000051-…); not Lightning's checkpoints (epoch=3-step=400.ckpt),
# which may share the trace folder
WINDOW_FOLDER = re.compile(r"epoch=\d+-batch=\d|step=\d")


@dataclass(frozen=True)
class WrittenWindow:
    """A window whose trace is in place, with its figures (computed by the finalizing child)."""

    path: str
    first: int  # steps recorded
    last: int
    figures: HostFigures
    json_bytes: int  # the trace's JSON, uncompressed
    steps: int  # steps recorded (a validation window's: batches)
    validation: bool  # validation batches (first and last are then the training step it followed)
    log_step: int  # its last step on the axis the fit's metrics are logged on
    problems: tuple[str, ...]  # what the trace lacks of what the window recorded


HEAVY = ("with_stack", "record_shapes", "profile_memory", "with_modules")  # options that make traces large


def fewer(options: Options, validation: bool = False) -> list[str]:
    """How to keep a window's trace under ``max_trace_mb``: record less, or turn off the options that make it large."""
    less = (f"record fewer batches (validation_batches={options.validation_batches})" if validation
            else f"record fewer steps (active={options.active}, steps=)")
    heavy = [name for name in HEAVY if getattr(options, name)]
    lines = [f"to record whole windows: raise max_trace_mb or {less}"]
    return lines + ([f"or turn off {', '.join(heavy)}"] if heavy else [])


def cut_message(options: Options, first: int, last: int, planned_last: int, estimated_bytes: Optional[float],
                validation: bool = False) -> str:
    """What to say of a window of batches ``first``-``planned_last`` ended early by ``max_trace_mb`` after ``last``."""
    lines = [f"a window ended early: its trace would pass max_trace_mb={options.max_trace_mb:g}",
             f"batches {first}-{planned_last} planned, {first}-{last} recorded, about "
             f"{size_words(estimated_bytes or 0)} of JSON (estimated from the JSON a step of the latest written "
             "window of its kind)"]
    return "\n  - ".join(lines + fewer(options, validation))


def over_message(options: Options, window: WrittenWindow) -> str:
    """What to say of a written ``window`` whose JSON passed ``max_trace_mb``."""
    steps = "batches" if window.validation else "steps"
    each = window.json_bytes / window.steps
    lines = [f"a window's trace passed max_trace_mb={options.max_trace_mb:g}: {window.json_bytes / 1e6:.1f} MB of JSON "
             f"for {window.steps} {steps}", window.path,
             "nothing estimates a fit's first window of each kind (training, validation), and a window keeps one of "
             f"its {steps} at least; the next windows of its kind are estimated at {each / 1e6:.2f} MB a step"
             + (" (over max_trace_mb: one step each)" if each > options.max_trace_mb * MB else "")]
    return "\n  - ".join(lines + fewer(options, window.validation))


PROBE_TIMEOUT_S = 600.0  # the store's write and delete of a probe object at setup


def check_trace_dir(trace_dir: str, storage_options: Optional[dict[str, Any]] = None) -> None:
    """Fail now, before any training step, if traces could not be written to ``trace_dir``: a URL's store is probed
    (by a finalizing process) and the local temporary folder, where its traces are staged, checked."""
    if is_url(trace_dir):
        finalizer = FinalizingProcess(storage_options)
        try:
            finalizer.run({"probe": trace_dir}, timeout=PROBE_TIMEOUT_S)
        except TimeoutError:
            raise StoreError(f"{redact(trace_dir)}: no answer from the store within {PROBE_TIMEOUT_S:.0f} s") from None
        except OSError as err:
            raise StoreError(err.strerror or str(err)) from None
        finally:
            finalizer.close()
        trace_dir = tempfile.gettempdir()
    # a new probe file (mkstemp) in the folder or its nearest existing parent, removed at once: nothing is created
    existing = os.path.abspath(trace_dir)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    try:
        if not os.path.isdir(existing):
            raise NotADirectoryError(20, "Not a directory", existing)
        fd, probe = tempfile.mkstemp(prefix=".profkit-probe-", dir=existing)
        os.close(fd)
        os.remove(probe)
    except OSError as err:
        raise OSError(
            f"PerformanceMonitor cannot write traces to {trace_dir!r} ({err.strerror or err}: {existing!r}); "
            "pass `dirpath=` a writable folder"
        ) from err


def delete_local(folder: str, files: list[str]) -> list[str]:
    """Delete ``files`` (with their companions) and then ``folder`` if that left it empty; returns the files deleted."""
    removed = [f for f in files if remove_local(f)]
    with contextlib.suppress(OSError):
        os.rmdir(folder)  # only when empty: other ranks' files stay
    return removed


def staging_folder() -> str:
    """A new private local folder (``mkdtemp``: mode 0700, a name no one can foresee) for the traces of a run on
    object storage, written there in full before their upload."""
    return tempfile.mkdtemp(prefix=STAGING_PREFIX)


class TraceOutput:
    """One fit's traces on one rank; ``on_error(message, key)`` is told, from the writer thread too, what failed, and
    warns once per kind of problem."""

    def __init__(self, trace_dir: str, rank: int, world_size: int, options: Options,
                 on_error: Callable[[str, str], None]) -> None:
        self.trace_dir, self.worker, self.rank, self.world_size = trace_dir, worker_name(rank), rank, world_size
        self.options, self.remote = options, is_url(trace_dir)
        self._local: Optional[str] = None if self.remote else trace_dir  # where files are written first
        self.summaries: list[dict[str, Any]] = []  # the newest SUMMARIZED windows' summaries
        self.bytes_per_step: dict[bool, float] = {}  # by validation: JSON a step of the latest written window of a kind
        self._kept: OrderedDict[str, list[str]] = OrderedDict()  # keep_last_windows: folder -> our traces, oldest first
        self._on_error = on_error
        self._writer: Optional[TraceWriter] = None  # started with the first window
        self._closed_cpu_s: Optional[float] = None  # what the writer used in all, once closed
        self._need_mb = 0.0  # the disk the latest written window took at its peak (its JSON; 0 before any)
        # appended by the writer thread, taken by the training thread: windows written, and traces retention deleted
        self._written: deque[dict[str, Any]] = deque()
        self._removed: deque[str] = deque()

    @property
    def local_dir(self) -> str:
        """Where files are written first: the trace folder, or a run on object storage's staging folder."""
        if self._local is None:
            self._local = staging_folder()
        return self._local

    def remove_staging(self) -> None:
        """After :meth:`close` and the live-run marker's end: the staging folder of a run on object storage goes,
        unless it keeps traces that could not be uploaded."""
        if self.remote and self._local is not None and not any(files for _, _, files in os.walk(self._local)):
            shutil.rmtree(self._local, ignore_errors=True)

    def submit(self, results: Any, epoch: int, first: int, last: int, offset: int,
               notes: Optional[dict[str, Any]] = None, validation_after: Optional[int] = None,
               after_batch: int = 0) -> str:
        """Queue a window's profiler results (steps ``first``-``last`` of an epoch from step ``offset``, or batches of
        the validation run after training step ``validation_after``); the path its trace will have."""
        if validation_after is None:
            folder = window_name(epoch, first - offset, last - offset)
            steps = {"steps": [first, last], "batch_idx": [first - offset, last - offset]}
        else:
            folder = validation_window_name(epoch, after_batch, first, last)
            steps = {"steps": [validation_after, validation_after], "batch_idx": [first, last], "validation": True}
        name = f"{self.worker}.{time.time_ns()}.pt.trace.json.gz"
        path = join(self.local_dir, folder, name)
        url = join(self.trace_dir, folder, name) if self.remote else None
        meta = {"epoch": epoch, **steps, "worker": self.worker, "rank": self.rank, "world_size": self.world_size,
                **(notes or {})}
        self._writer_started().submit(WindowJob(results, path, meta, url))
        return url or path

    def announce(self, marker: dict[str, Any]) -> None:
        """For a trace folder on object storage: keep ``marker`` there while the fit runs, and bring requests in."""
        self._writer_started().watch(self.trace_dir, self.local_dir, {**marker, "requests_at": self.local_dir})

    def _writer_started(self) -> TraceWriter:
        if self._writer is None:
            self._writer = TraceWriter(on_error=self._on_error, on_written=self._on_written,
                                       storage_options=self.options.storage_options)
        return self._writer

    def _on_written(self, window: dict[str, Any]) -> None:
        """On the writer thread: a window is in place; older ones may go (published first: see :meth:`take`)."""
        keep_last = self.options.keep_last_windows
        if keep_last:  # the traces this process wrote in older window folders go (other ranks delete their own)
            self._kept.setdefault(os.path.dirname(window["path"]), []).append(window["path"])
            while len(self._kept) > keep_last:
                folder, ours = self._kept.popitem(last=False)
                self._removed.extend(self._writer.remove(ours) if self.remote else delete_local(folder, ours))
        self._written.append(window)

    @property
    def helper_cpu_s(self) -> Optional[float]:
        """CPU seconds the fit's trace writing has used off the training thread so far; None before the first window."""
        return self._writer.cpu_s if self._writer is not None else self._closed_cpu_s

    @property
    def has_written(self) -> bool:
        return bool(self._written)

    def take(self) -> tuple[list[WrittenWindow], set[str], list[tuple[int, dict[str, float]]]]:
        """On the training thread: the windows written since the last call, the paths retention deleted (taken after
        the windows: a deletion is published before the window that caused it), and the metrics to log (rank zero)."""
        done, logged = [], []
        threshold = self.options.alert_threshold or DEFAULT_ALERT_THRESHOLD
        while self._written:
            window = self._written.popleft()
            meta = window["meta"]
            (first, last), batches = meta["steps"], meta["batch_idx"]
            validation = bool(meta.get("validation"))
            shown = redact(window["path"])  # a URL's credentials stay out of what users see
            written = WrittenWindow(shown, first, last, HostFigures.from_json(window["figures"]),
                                    window["json_bytes"], batches[1] - batches[0] + 1, validation,
                                    meta.get("log_step", last), tuple(meta.get("problems", ())))
            done.append(written)
            if written.problems:  # on every rank
                self._on_error(f"a trace lacks what its window recorded; profkit summary and report show it:\n  {shown}"
                               + "".join(f"\n  - {problem}" for problem in written.problems), "integrity")
            self._need_mb = written.json_bytes / 1e6  # the room and size estimates from the latest window (of its kind)
            self.bytes_per_step[validation] = written.json_bytes / written.steps
            limit = self.options.max_trace_mb
            if limit is not None and written.json_bytes > limit * MB:
                self._on_error(over_message(self.options, written), "max_trace_mb_over")
            if self.rank == 0:
                notice = None if validation else gpu_idle_notice(written.figures, os.path.dirname(shown), threshold)
                if notice:
                    self._on_error(notice, "gpu_idle")
                metrics = window_metrics(written.figures, validation) if self.options.log_metrics else {}
                if metrics:
                    logged.append((written.log_step, metrics))
            if window.get("unkept"):  # once a fit (the key): the trace is there, `profkit` parses it instead
                self._on_error(f"the summary beside a trace could not be written; profkit parses the trace instead\n"
                               f"  - {shown}\n  - {window['unkept']}", "companions")
            if not validation:  # the end-of-fit line is about training
                self.summaries = self.summaries[-(SUMMARIZED - 1):] + [window["summary"]]
        removed = {redact(self._removed.popleft()) for _ in range(len(self._removed))}
        return done, removed, logged

    def fit_line(self) -> Optional[tuple[int, list[str]]]:
        """The end-of-fit lines over the newest training windows, and their count; None before any."""
        if not self.summaries:
            return None
        from lightning_profkit.trace.headline import fit_line  # the analysis side: once a fit, at its end
        from lightning_profkit.trace.summary import aggregate

        return len(self.summaries), fit_line(aggregate(self.summaries))

    def room(self) -> Optional[str]:
        """Why the next window would not fit where traces are written first, in words, or None: it needs room for its
        JSON, as much as the latest written window's, or, after one did not fit, more than was free then."""
        full = self._writer.full if self._writer is not None else None
        need = self._need_mb
        if full is not None:
            need = max(need, full.needed_mb or 0.0, full.free_mb + 1.0)
        try:
            free = free_mb(self._local or tempfile.gettempdir())  # a store's staging folder is made in the latter
        except OSError:  # the folder cannot be looked at: the window's write will say why
            return None
        if free >= need:
            return None
        return (f"disk full at {self._local or self.trace_dir}: {size_words(free * 1e6)} free, the last window "
                f"needed {size_words(need * 1e6)}; windows are skipped until there is room (checked at each planned "
                "window), training goes on")

    def close(self, timeout: float) -> tuple[list[str], list[str]]:
        """Wait up to ``timeout`` seconds for the windows still being written; the paths of those not written by then,
        and the local copies of the traces that could not be uploaded."""
        writer = self._writer
        if writer is None:
            return [], []
        left = writer.close(timeout)
        self._writer = None  # after the last windows, whose retention may delete through it
        self._closed_cpu_s = writer.cpu_s
        return left, [local for local, _ in writer.unsent]
