"""Raw profiler dumps made final traces (in the fit's finalizing process, or the writer thread for a small local
window) and the store's work, one job at a time from a pipe. Design notes: docs/how-it-works.md."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Iterable, Iterator, Optional

from isal import isal_zlib

from lightning_profkit.atomic_files import atomic_writer, write_atomic
from lightning_profkit.capture_request import MARKER, MAX_BYTES, REQUEST, marker_of
from lightning_profkit.companions import remove_local, with_companions
from lightning_profkit.opener import FileRefused
from lightning_profkit.store import (StoreError, join, read, remove, upload_with_companions, use_options, write,
                                     write_probe)
from lightning_profkit.trace.file import json_blocks, read_json
from lightning_profkit.trace.integrity import problems
from lightning_profkit.trace.load import Appender, LoadedTrace, PieceError, decode_piece, framed_piece, pieces
from lightning_profkit.trace.rewrite import Text, edit, joined
from lightning_profkit.trace.sidecar import keep
from lightning_profkit.trace.summary import summarize_trace


# bytes of JSON edited, decoded and compressed at a time: what the rewrite holds beyond the rows (256 kB pieces cost
# 1% more instructions than 1 MB ones and hold a quarter: benchmarks/finalizer.py)
FINALIZE_PIECE = 256_000


def finalize_trace(raw_path: str, final_path: str, meta: dict[str, Any], url: Optional[str] = None) -> dict[str, Any]:
    """Rewrite ``raw_path`` into ``final_path`` (gzip JSON), atomically; the window's figures, for the trace at ``url``
    where it goes to object storage."""
    last = meta["steps"][1] if "steps" in meta and not meta.get("validation") else None
    try:
        trace, size = _rewrite_streaming(raw_path, final_path, meta, last)
    except PieceError:  # text not laid out as a profiler writes it: kept as written, with our keys
        trace, size = _rewrite_streaming(raw_path, final_path, meta, last, as_written=True)
    os.remove(raw_path)
    summary = summarize_trace(final_path, trace, beside=False)  # one thread, the least memory: the trace is out
    unkept = companions(final_path, summary)
    shown = summary["path"] = url or final_path
    return {"path": shown, "meta": trace.meta, "figures": summary["host"], "summary": summary, "json_bytes": size,
            "unkept": unkept}


def _rewrite_streaming(raw_path: str, final_path: str, meta: dict[str, Any], last: Optional[int],
                       as_written: bool = False) -> tuple[LoadedTrace, int]:
    """The rewrite a piece at a time (:mod:`~lightning_profkit.trace.rewrite`), each piece edited, decoded into rows
    and compressed as it is read; ``as_written``: the whole text as one piece, unedited."""
    appender, found, size = Appender(), {}, 0

    def edited() -> Iterator[tuple[Text, bool, bool]]:
        nonlocal size
        if as_written:
            whole = read_json(raw_path)
            parts: Iterable[tuple[Any, int, int, bool, bool]] = [(whole, 0, len(whole), True, True)]
        else:
            parts = pieces((block for block, _ in json_blocks(raw_path, FINALIZE_PIECE)), FINALIZE_PIECE)
        for buf, start, end, first, last_piece in parts:
            text = buf if as_written else edit(buf, last, start, end)
            rows, info, _ = decode_piece(framed_piece(text, 0, len(text), first, last_piece))
            appender.add(rows, info)
            size += len(text)
            yield text, first, last_piece

    def keys() -> dict[str, Any]:
        found["rows"] = appender.rows()
        lacks = problems(found["rows"], meta)  # what the trace lacks of what its window recorded
        found["meta"] = {**meta, "problems": lacks} if lacks else meta
        added = {"profkit": found["meta"]}
        if appender.info is None:  # kineto writes it only under torch.distributed; HTA reads the rank from it
            added["distributedInfo"] = {"rank": meta.get("rank"), "world_size": meta.get("world_size")}
        return added

    with atomic_writer(final_path) as out:
        # gzip at ISA-L's level 2: about 1 ms of CPU a MB of JSON, against 12 for zlib's level 6, for a file a sixth
        # larger (benchmarks/finalizer.py)
        deflate = isal_zlib.compressobj(2, isal_zlib.DEFLATED, 31)
        for text in joined(edited(), keys):
            out.write(deflate.compress(text))
        out.write(deflate.flush())
    return LoadedTrace(found["rows"], appender.info, found["meta"]), size


def companions(final_path: str, summary: dict[str, Any]) -> Optional[str]:
    """Write the trace's sidecar beside it; why it could not be written, in words, or None."""
    try:
        keep(final_path, summary)
    except Exception as err:  # noqa: BLE001 - whatever it is, it must not cost the trace
        return f"{type(err).__name__}: {err}"
    return None


def store_work(uploads: list[list[str]], removals: list[str]) -> dict[str, list]:
    """Upload each ``[local, url]`` with its companions until one fails, and delete each of ``removals``; what failed:
    ``unsent`` (``[local, url, why]``: that upload and those after it) and ``failed`` (why a deletion failed)."""
    unsent, failed = [], []
    for local, url in uploads:
        if unsent:
            unsent.append([local, url, "not tried: the store failed just before"])
            continue
        try:
            upload_with_companions(local, url)
        except (StoreError, FileRefused) as err:
            unsent.append([local, url, str(err)])
            continue
        remove_local(local)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(local))  # the window's staging folder, once empty
    for url in removals:
        try:
            for at in with_companions(url):
                remove(at)
        except StoreError as err:
            failed.append(str(err))
    return {"unsent": unsent, "failed": failed}


class RequestMirror:
    """For rank zero of a run on object storage: its live-run ``marker`` on the store while the fit runs, and every
    ``interval`` seconds a capture request left there moved into the ``local`` folder, where the callback looks."""

    def __init__(self, url: str, local: str, marker: dict[str, Any], interval: float = 2.0) -> None:
        self.url, self.local, self.marker, self.interval = url, local, marker, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="profkit-requests", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        marked = False
        while True:
            with contextlib.suppress(StoreError, OSError):  # reported by the uploads; tried again at the next poll
                if not marked:
                    write(join(self.url, MARKER), json.dumps(self.marker).encode())
                    marked = True
                asked = read(join(self.url, REQUEST), MAX_BYTES)
                if asked is not None:  # as it is: the callback reads it as it reads a local one, up to a bound
                    remove(join(self.url, REQUEST))
                    write_atomic(os.path.join(self.local, REQUEST), asked)
            if self._stop.wait(self.interval):
                return

    def end(self) -> None:
        self._stop.set()
        self._thread.join(30)
        with contextlib.suppress(StoreError):  # ours only: another fit into the same folder may have put its own since
            there = marker_of(read(join(self.url, MARKER), MAX_BYTES) or b"")
            if there is not None and there.get("fit") == self.marker.get("fit"):
                remove(join(self.url, MARKER))


NICE = 10  # the finalizing process's default nice increment; PROFKIT_FINALIZER_NICE sets another, or "idle"


def lower_priority() -> None:
    """Run below training: ``NICE`` steps of nice above the parent, or ``PROFKIT_FINALIZER_NICE``'s (a number, or
    ``idle`` for ``SCHED_IDLE``); why: docs/traces-and-storage.md, measured by ``benchmarks/streaming.py``."""
    setting = os.environ.get("PROFKIT_FINALIZER_NICE") or str(NICE)
    with contextlib.suppress(OSError, ValueError):
        if setting == "idle":
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        else:
            os.nice(min(19, max(0, int(setting))))


def serve(jobs: Connection, replies: Connection) -> None:
    """One reply to each job until the parent closes its end, then one with ``cpu_s`` alone. A job may have a store to
    ``probe``, a window to finalize (``raw``), store work (``uploads``, ``removals``) and a RequestMirror to start
    (``watch``); a reply has ``done`` (the window's figures and summary) or ``error``, and ``cpu_s`` so far."""
    mirror = None
    while True:
        try:
            job = jobs.recv()
        except EOFError:
            break
        reply: dict[str, Any] = {}
        try:
            if "storage_options" in job:
                use_options(job["storage_options"])
            if "probe" in job:
                write_probe(job["probe"])
            if job.get("watch") and mirror is None:
                mirror = RequestMirror(**job["watch"])
            if "raw" in job:
                reply["done"] = finalize_trace(job["raw"], job["final"], job["meta"], job.get("url"))
            if job.get("uploads") or job.get("removals"):
                reply.update(store_work(job.get("uploads", []), job.get("removals", [])))
        except Exception as err:  # reported to the parent, which warns once
            reply = {"error": str(err) if isinstance(err, StoreError) else f"{type(err).__name__}: {err}"}
            if isinstance(err, OSError) and err.errno is not None:
                reply["errno"] = err.errno  # disk full (ENOSPC) among them
        reply["cpu_s"] = time.process_time()
        replies.send(reply)
    if mirror is not None:
        mirror.end()
    with contextlib.suppress(OSError):  # the parent stopped listening
        replies.send({"cpu_s": time.process_time()})


def main() -> None:
    """The child of :mod:`~lightning_profkit.monitor.writing.process`: its two pipe ends are its arguments."""
    lower_priority()
    jobs, replies = Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False)
    gc.freeze()  # the modules' objects: never scanned again; collections see a window's objects only
    serve(jobs, replies)
    with contextlib.suppress(OSError):
        replies.close()
    # no interpreter teardown: nothing is left to free or flush, and unloading pyarrow costs a tenth of a second of
    # CPU that no reply would count
    os._exit(0)


if __name__ == "__main__":
    main()
