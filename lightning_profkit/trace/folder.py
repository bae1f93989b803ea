"""The traces under a folder, each one's summary (from its fresh sidecar, else parsed and its sidecar kept) and
events table: what ``profkit``'s commands and its report read, as values, printing nothing."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, NamedTuple, Optional, Protocol

from lightning_profkit.atomic_files import write_atomic
from lightning_profkit.companions import EVENTS, SIDECAR
from lightning_profkit.trace import sidecar
from lightning_profkit.opener import FileRefused
from lightning_profkit.trace.file import TraceError, find_traces, natural


class Progress(Protocol):
    def reading(self, path: str) -> Callable[[int, int], None]: ...

    def done(self) -> None: ...


class FolderRead(NamedTuple):
    summaries: list[dict[str, Any]]
    left_out: list[str]  # a line for each trace that could not be read: its path and why
    kept: list[str]  # the sidecars written
    tables: list[str]  # the events tables written
    unkept: Optional[str]  # why a sidecar could not be written (the first such), or None


def read_folder(path: str, jobs: int, known: Optional[dict[str, dict[str, Any]]] = None, tables: bool = False,
                progress: Optional[Progress] = None) -> FolderRead:
    """The summary of every trace under the local ``path`` and of those ``known`` (summaries by path, of traces not
    there): from its fresh sidecar, else read and its sidecar written beside it; with ``tables``, also read where its
    events table is missing or stale, and the table written. No trace under ``path``: a :class:`TraceError`."""
    known = known or {}
    if known:
        with contextlib.suppress(TraceError):  # none there: all known
            known = {**dict.fromkeys(find_traces(path)), **known}
    paths = sorted(known, key=natural) if known else find_traces(path)
    done = FolderRead([], [], [], [], None)
    for p in paths:
        summary = known.get(p) or sidecar.read(p)
        if summary is not None and (not tables or has_table(p)):
            done.summaries.append(sidecar.with_place(p, summary))
            continue
        try:
            _read(p, jobs, summary, tables, progress, done)
        except FileRefused as err:  # its text starts with the path
            done.left_out.append(str(err))
            continue
        except MemoryError:
            raise
        except Exception as err:  # a trace with unexpected content: one line, never a traceback
            if os.environ.get("PROFKIT_DEBUG"):
                raise
            done.left_out.append(f"{p}: could not be read ({type(err).__name__}: {err}; PROFKIT_DEBUG=1 shows where)")
            continue
        finally:
            if progress:
                progress.done()
        if summary is None:
            try:
                if sidecar.keep(p, done.summaries[-1]):
                    done.kept.append(p + SIDECAR)
            except OSError as err:
                done = done._replace(unkept=done.unkept or f"{p + SIDECAR}: {err.strerror or err}")
    name_windows(done.summaries)
    return done


def _read(path: str, jobs: int, summary: Optional[dict[str, Any]], tables: bool, progress: Optional[Progress],
          done: FolderRead) -> None:
    """Read the trace at ``path`` into ``done``: its summary (``summary`` where it is known) and, with ``tables``,
    its events table written beside it."""
    from lightning_profkit.trace.load import load
    from lightning_profkit.trace.summary import summarize_trace

    trace = load(path, jobs, progress=progress.reading(path) if progress else None)
    done.summaries.append(sidecar.with_place(path, summary) if summary is not None else summarize_trace(path, trace))
    if tables:
        try:
            write_table(path, done.summaries[-1], trace)
            done.tables.append(path + EVENTS)
        except OSError as err:
            done.left_out.append(f"{path + EVENTS}: cannot write the events table ({err.strerror or err})")


def has_table(trace: str) -> bool:
    """Whether the local ``trace`` has a fresh events table beside it."""
    from lightning_profkit.trace.event_table import fresh

    return fresh(trace + EVENTS, os.path.getsize(trace))


def write_table(trace: str, summary: dict[str, Any], loaded: Any, name: Optional[str] = None) -> None:
    """Write the events table of the local ``trace`` (read as ``loaded``; on a store at ``name``) beside it."""
    from lightning_profkit.trace import event_table

    table = event_table.event_table(loaded.rows, event_table.run_of(name or trace), summary["window"], summary["rank"],
                                    summary["worker"])
    write_atomic(trace + EVENTS, event_table.to_parquet(table, os.path.getsize(trace)))


def name_windows(found: list[dict[str, Any]]) -> None:
    """Window names that tell runs apart: a folder of runs (``profiler/run=…/epoch=…``) names each window by its
    path below the folder all the runs share, so that two runs' windows of the same batches never merge."""
    parents = [os.path.dirname(os.path.abspath(s["path"])) for s in found]
    if len(set(parents)) > 1:
        root = os.path.commonpath([os.path.dirname(p) for p in parents])
        for s, parent in zip(found, parents):
            s["window"] = os.path.relpath(parent, root).replace(os.sep, "/")
