"""Turn raw profiler dumps into final trace files; runs in one child process per fit, off the training loop.

``python -m lightning_profkit.monitor.writing.child`` (started by :mod:`~lightning_profkit.monitor.writing.process`)
takes one job per line: for each, it reads the raw JSON that torch saved,
applies the TensorBoard fix, adds our labels under the ``"profkit"`` key (with ``problems`` where the trace lacks
what its window recorded: :mod:`~lightning_profkit.trace.integrity`; and ``distributedInfo`` with the rank and
world size where torch wrote none), writes gzip under a
temporary name that no viewer picks up, renames it to ``FINAL`` and removes ``RAW``. Beside it go its summary
(:mod:`~lightning_profkit.trace.sidecar`) and, where pyarrow is installed, its events as Parquet
(:mod:`~lightning_profkit.trace.event_table`). It prints the
window's figures and summary (:mod:`~lightning_profkit.trace.summary`) as one JSON line on stdout. For a run
that writes to object storage it then uploads the trace (:mod:`~lightning_profkit.store`), retries the uploads
that failed before and deletes what retention gave up; the local copy goes once its upload is done.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import json
import os
import sys
import threading
import time
from typing import Any, Optional, TextIO

from lightning_profkit.atomic_files import write_atomic
from lightning_profkit.capture_request import MARKER, REQUEST, marker_of
from lightning_profkit.companions import EVENTS, remove_local, with_companions
from lightning_profkit.monitor.writing import SUMMARIZED
from lightning_profkit.store import StoreError, join, read, remove, upload_with_companions, use_options, write
from lightning_profkit.trace import event_table
from lightning_profkit.trace.columns import from_rows
from lightning_profkit.trace.headline import fit_line
from lightning_profkit.trace.integrity import problems
from lightning_profkit.trace.load import load
from lightning_profkit.trace.sidecar import dumps, sidecar_of
from lightning_profkit.trace.summary import aggregate, summarize_trace
from lightning_profkit.trace.tensorboard_compat import relabel_dataloader_events
from lightning_profkit.trace.vocabulary import is_step, step_number


def finalize_trace(raw_path: str, final_path: str, meta: dict[str, Any], url: Optional[str] = None) -> dict[str, Any]:
    """Rewrite ``raw_path`` into ``final_path`` (gzip JSON), atomically; return the window's figures, for the
    trace at ``url`` where it goes to object storage."""
    with open(raw_path, encoding="utf-8") as f:
        trace = json.load(f)
    events = trace.get("traceEvents") or []
    relabel_dataloader_events(events)
    if "steps" in meta and not meta.get("validation"):
        events[:] = steps_through(events, meta["steps"][1])
    lacks = problems(events, meta)
    if lacks:  # marked in the trace, for `profkit summary` and `report`; the callback warns
        meta = {**meta, "problems": lacks}
    trace["profkit"] = meta
    # Kineto writes distributedInfo only under torch.distributed; HTA and others read the rank from it
    if "distributedInfo" not in trace:
        trace["distributedInfo"] = {"rank": meta["rank"], "world_size": meta["world_size"]}
    # json.dumps, not json.dump: only the one-shot call uses the C encoder (8x faster on a large trace).
    # Default separators: HTA finds the rank with the pattern '"rank":\s+(\d+)'.
    text = json.dumps(trace).encode("utf-8")
    data = gzip.compress(text, compresslevel=6)
    write_atomic(final_path, data)
    os.remove(raw_path)
    del trace, events
    # the figures from the text just written, by the reader of `profkit summary`
    trace = load(final_path, text=text)
    summary = summarize_trace(final_path, trace)
    unkept = companions(final_path, url, summary, trace)
    del trace
    shown = summary["path"] = url or final_path
    return {"path": shown, "meta": meta, "figures": summary["host"], "summary": summary, "json_bytes": len(text),
            "unkept": unkept}


def companions(final_path: str, url: Optional[str], summary: dict[str, Any], trace: Any) -> Optional[str]:
    """Write the trace's sidecar and (where pyarrow is installed) its events table beside it; why one could not be
    written, in words, or None. The trace is whole without them: `profkit` parses it instead."""
    status = os.stat(final_path)
    try:
        write_atomic(sidecar_of(final_path), dumps(summary, status))
        if event_table.available():
            table = event_table.table_of(url or final_path, summary, from_rows(trace.rows))
            write_atomic(final_path + EVENTS, event_table.to_parquet(table, status.st_size))
    except Exception as err:  # noqa: BLE001 - whatever it is, it must not cost the trace
        return f"{type(err).__name__}: {err}"
    return None


def steps_through(events: list[dict[str, Any]], last: int) -> list[dict[str, Any]]:
    """The events less the step markers past ``last``: a window ended as validation began was already in the
    next step, which never ran inside it (its marker spans the moment before validation)."""
    def past(event: dict[str, Any]) -> bool:
        name = event.get("name")
        number = step_number(name) if isinstance(name, str) and is_step(name) else None
        return number is not None and number > last

    return [e for e in events if not past(e)]


def store_work(uploads: list[list[str]], removals: list[str]) -> dict[str, list]:
    """Upload each ``[local, url]`` in turn with its companions (the local copies deleted once they are up) until
    one fails, and delete each URL with its companions; returns what failed: ``unsent`` (``[local, url, why]``: the
    failed upload, then those not tried after it: a store that failed is not asked again at once) and ``failed``
    (why a deletion failed)."""
    unsent, failed = [], []
    for local, url in uploads:
        if unsent:
            unsent.append([local, url, "not tried: the store failed just before"])
            continue
        try:
            upload_with_companions(local, url)
        except StoreError as err:
            unsent.append([local, url, str(err)])
            continue
        remove_local(local)
        try:
            os.rmdir(os.path.dirname(local))  # the window's staging folder, once empty
        except OSError:
            pass
    for url in removals:
        try:
            for at in with_companions(url):
                remove(at)
        except StoreError as err:
            failed.append(str(err))
    return {"unsent": unsent, "failed": failed}


class RequestMirror:
    """For rank zero of a run on object storage: its live-run marker on the store (``marker``) while the fit runs,
    and every ``interval`` seconds a capture request left on the store moved into the local folder where the
    callback looks for one. A store that fails is tried again at the next poll."""

    def __init__(self, url: str, local: str, marker: dict[str, Any], interval: float = 2.0) -> None:
        self.url, self.local, self.marker, self.interval = url, local, marker, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="profkit-requests", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        marked = False
        while True:
            try:
                if not marked:
                    write(join(self.url, MARKER), json.dumps(self.marker).encode())
                    marked = True
                asked = read(join(self.url, REQUEST))
                if asked is not None:  # as it is: the callback reads it as it reads a local one
                    remove(join(self.url, REQUEST))
                    write_atomic(os.path.join(self.local, REQUEST), asked)
            except (StoreError, OSError):
                pass  # the store is reported by the uploads; requests wait for the next poll
            if self._stop.wait(self.interval):
                return

    def end(self) -> None:
        self._stop.set()
        self._thread.join(30)
        try:  # ours only: another fit into the same folder may have put its own since
            there = marker_of(read(join(self.url, MARKER)) or b"")
            if there is not None and there.get("fit") == self.marker.get("fit"):
                remove(join(self.url, MARKER))
        except StoreError:
            pass


def lower_priority() -> None:
    """Run at idle priority: ``SCHED_IDLE`` where the OS has it (Linux), else the lowest nice."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        try:
            os.nice(19 - os.nice(0))
        except OSError:
            pass


def serve(jobs: TextIO, replies: TextIO) -> None:
    """One JSON job per line in, one reply per line out, until the input ends. A job has a window to finalize
    (``raw``, ``final``, ``meta``, ``url``), store work (``uploads``, ``removals``, see :func:`store_work`) and/or
    a :class:`RequestMirror` to start (``watch``: its arguments; it ends with the input);
    its reply has ``done`` (the window's figures and, for a training window, the end-of-fit line over the
    newest ``SUMMARIZED`` of them: the training process need not load the analysis side for it) or ``error``,
    what the store work left, and ``cpu_s`` (this process's CPU seconds so far). At the end of the input a last
    line gives ``cpu_s`` alone."""
    mirror, recent = None, []
    for line in jobs:
        reply: dict[str, Any] = {}
        try:
            job = json.loads(line)
            if "storage_options" in job:
                use_options(job["storage_options"])
            if "watch" in job and mirror is None:
                mirror = RequestMirror(**job["watch"])
            if "raw" in job:
                reply["done"] = done = finalize_trace(job["raw"], job["final"], job["meta"], job.get("url"))
                if not job["meta"].get("validation"):  # the end-of-fit line, over the newest training windows
                    recent = recent[-(SUMMARIZED - 1):] + [done["summary"]]
                    done["fit_line"] = [len(recent), fit_line(aggregate(recent))]
            if job.get("uploads") or job.get("removals"):
                reply.update(store_work(job.get("uploads", []), job.get("removals", [])))
        except Exception as err:  # reported to the parent, which warns once
            reply = {"error": f"{type(err).__name__}: {err}"}
            if isinstance(err, OSError) and err.errno is not None:
                reply["errno"] = err.errno  # disk full (ENOSPC) among them
        reply["cpu_s"] = time.process_time()
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    if mirror is not None:
        mirror.end()
    try:
        replies.write(json.dumps({"cpu_s": time.process_time()}) + "\n")
        replies.flush()
    except OSError:  # the parent stopped listening
        pass


def main() -> None:
    lower_priority()
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # anything else printed goes to stderr, not into the replies
    gc.freeze()  # the modules' objects: never scanned again; collections see a window's objects only
    serve(sys.stdin, replies)
    with contextlib.suppress(OSError):  # the parent stopped listening
        replies.close()
        sys.stderr.flush()
    # no interpreter teardown: nothing is left to free or flush, and unloading pyarrow costs a tenth of a second of
    # CPU that no reply would count
    os._exit(0)


if __name__ == "__main__":
    main()
