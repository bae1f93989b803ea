"""A trace's summary kept beside it, so that a trace is parsed once: the finalizing process writes it when the
window is written, and ``profkit`` writes it after parsing a trace that had none.

The sidecar of ``NAME`` (``*.pt.trace.json[.gz]``) is ``NAME.profkit``: a name no viewer reads (torch-tb-profiler
reads ``*.pt.trace.json[.gz]``, HolisticTraceAnalysis every ``*.json`` and ``*.gz`` of a folder). It is JSON: the
summary of :func:`~lightning_profkit.trace.summary.summarize_trace` less the trace's place, the size (and, for a
local file, the modification time) of the trace it was made from, and the version of the code that made it. It is
stale, and the trace parsed again, when the trace differs in these (on object storage only the size is compared: a
copy there has a time of its own) or another version of the figures' code made it: :func:`version` is a hash of
that code's source, so that no change to a figure can leave old sidecars believed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Any, Optional, Union

from lightning_profkit.atomic_files import write_atomic
from lightning_profkit.companions import SIDECAR
from lightning_profkit.trace.file import TraceError, open_plain

MAX_BYTES = 64 * 2**20  # a sidecar larger than this is not ours: it is not read
_PLACE = ("path", "window")  # where the trace is: told by where it is found, never by the sidecar


def with_place(path: str, summary: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """``summary`` (or a new one) labelled with where its trace is: its path and its window (the folder's name)."""
    out = {"path": path, "window": os.path.basename(os.path.dirname(os.path.abspath(path)))}
    if summary is not None:
        out.update((k, v) for k, v in summary.items() if k not in out)
    return out


def sidecar_of(trace: str) -> str:
    """Where the sidecar of the trace at ``trace`` (a path or a URL) is."""
    return trace + SIDECAR


@functools.lru_cache(maxsize=None)
def version() -> str:
    """A hash of the source of the code that makes a summary (this package's ``trace/`` and ``figures.py``)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256()
    for folder, names in ((os.path.join(package, "trace"), None), (package, ["figures.py"])):
        for name in sorted(names or os.listdir(folder)):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as f:
                    digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()[:16]


def dumps(summary: dict[str, Any], trace: Union[os.stat_result, int]) -> bytes:
    """The sidecar of ``summary``, made from a local trace whose file has the status ``trace``, or from an object of
    ``trace`` bytes."""
    figures = {k: v for k, v in summary.items() if k not in _PLACE}
    size, mtime = (trace, None) if isinstance(trace, int) else (trace.st_size, trace.st_mtime_ns)
    return json.dumps({"version": version(), "trace_bytes": size, "trace_mtime_ns": mtime, "summary": figures}).encode()


def loads(text: bytes, trace_bytes: int, trace_mtime_ns: Optional[int] = None) -> Optional[dict[str, Any]]:
    """The summary in the sidecar ``text`` if it is fresh for a trace of ``trace_bytes`` bytes (modified at
    ``trace_mtime_ns``, where given); None if it is stale, damaged or not a sidecar (the trace is then parsed)."""
    if len(text) > MAX_BYTES:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("version") != version() or doc.get("trace_bytes") != trace_bytes:
        return None
    if trace_mtime_ns is not None and doc.get("trace_mtime_ns") != trace_mtime_ns:
        return None
    summary = doc.get("summary")
    return summary if isinstance(summary, dict) else None


def read(trace: str) -> Optional[dict[str, Any]]:
    """The fresh summary beside the local trace ``trace`` (its place not yet set), or None (also where the sidecar
    is a symbolic link, which we never make, or not a plain file)."""
    try:
        status = os.stat(trace)
        with open_plain(sidecar_of(trace)) as f:
            text = f.read(MAX_BYTES + 1)
    except (OSError, TraceError):
        return None
    return loads(text, status.st_size, status.st_mtime_ns)


def keep(trace: str, summary: dict[str, Any]) -> None:
    """Write the sidecar of the local ``trace`` (whole, or not at all)."""
    write_atomic(sidecar_of(trace), dumps(summary, os.stat(trace)))
