"""Turn raw profiler dumps into final trace files; runs in one child process per fit, off the training loop.

``python -m lightning_profkit.monitor.finalize`` (started by :mod:`~lightning_profkit.monitor.finalizer`)
takes one job per line: for each, it reads the raw JSON that torch saved,
applies the TensorBoard fix, adds our labels under the ``"profkit"`` key (and ``distributedInfo`` with the
rank and world size where torch wrote none), writes gzip under a
temporary name that no viewer picks up, renames it to ``FINAL`` and removes ``RAW``. It prints the
window's figures and summary (:mod:`~lightning_profkit.trace.summary`) as one JSON line on stdout.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import sys
import time
from typing import Any, TextIO

from lightning_profkit.trace.tensorboard_compat import relabel_dataloader_events
from lightning_profkit.trace.events import from_dicts
from lightning_profkit.monitor.writer import temporary_name
from lightning_profkit.trace.summary import rank_of, summarize_events


def finalize_trace(raw_path: str, final_path: str, meta: dict[str, Any]) -> dict[str, Any]:
    """Rewrite ``raw_path`` into ``final_path`` (gzip JSON), atomically; return the window's figures."""
    with open(raw_path, encoding="utf-8") as f:
        trace = json.load(f)
    events = trace.get("traceEvents") or []
    relabel_dataloader_events(events)
    trace["profkit"] = meta
    # Kineto writes distributedInfo only under torch.distributed; HTA and others read the rank from it
    if "distributedInfo" not in trace:
        trace["distributedInfo"] = {"rank": meta["rank"], "world_size": meta["world_size"]}
    # json.dumps, not json.dump: only the one-shot call uses the C encoder (8x faster on a large trace).
    # Default separators: HTA finds the rank with the pattern '"rank":\s+(\d+)'.
    text = json.dumps(trace).encode("utf-8")
    data = gzip.compress(text, compresslevel=6)
    tmp = temporary_name(final_path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, final_path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.remove(raw_path)
    summary = summarize_events(from_dicts(events))
    summary.update(path=final_path, window=os.path.basename(os.path.dirname(final_path)), worker=meta.get("worker"),
                   rank=rank_of(trace.get("distributedInfo"), meta.get("worker") or ""))
    return {"path": final_path, "meta": meta, "figures": summary["host"], "summary": summary, "json_bytes": len(text)}


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
    """One JSON job per line in (``raw``, ``final``, ``meta``), one reply per line out (``done``: the
    window's figures, or ``error``; ``cpu_s``: this process's CPU seconds so far), until the input ends."""
    for line in jobs:
        try:
            job = json.loads(line)
            reply: dict[str, Any] = {"done": finalize_trace(job["raw"], job["final"], job["meta"])}
        except Exception as err:  # reported to the parent, which warns once
            reply = {"error": f"{type(err).__name__}: {err}"}
        reply["cpu_s"] = time.process_time()
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def main() -> int:
    lower_priority()
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # anything else printed goes to stderr, not into the replies
    gc.freeze()  # the modules' objects: never scanned again; collections see a window's objects only
    serve(sys.stdin, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
