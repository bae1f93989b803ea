"""A trace's summary kept beside it (``NAME.profkit``), so that a trace is parsed once; what it holds and when it is
stale: docs/many-ranks.md. Design notes: docs/how-it-works.md."""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
from typing import Any, Optional, Union

import msgspec

from lightning_profkit.atomic_files import write_atomic
from lightning_profkit.companions import SIDECAR
from lightning_profkit.figures import HostFigures
from lightning_profkit.opener import FileRefused, read_regular
from lightning_profkit.printable import name_text
from lightning_profkit.trace.vocabulary import STEP_COLUMNS

# A sidecar larger than this is not read (its trace is parsed) nor written: a window's is a few kB, a trace of
# thousands of steps and operators a few MB.
MAX_BYTES = 16 * 10**6
_PLACE = ("path", "window")  # where the trace is: told by where it is found, never by the sidecar


def with_place(path: str, summary: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """``summary`` (or a new one) labelled with where its trace is: its path and its window (the folder's name)."""
    window = name_text(os.path.basename(os.path.dirname(os.path.abspath(path))))
    return {"path": path, "window": window, **{k: v for k, v in (summary or {}).items() if k not in _PLACE}}


@functools.lru_cache(maxsize=None)
def version() -> str:
    """A hash of the source of the code that makes a summary (this package's ``trace/`` and ``figures.py``)."""
    trace = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    modules = sorted(glob.glob(os.path.join(glob.escape(trace), "*.py")))  # the folder's name may hold [, * or ?
    for path in modules + [os.path.join(os.path.dirname(trace), "figures.py")]:
        digest.update(os.path.basename(path).encode() + b"\0" + read_regular(path, MAX_BYTES))
    return digest.hexdigest()[:16]


def dumps(summary: dict[str, Any], trace: Union[os.stat_result, int]) -> bytes:
    """The sidecar of ``summary``, made from a local trace whose file has the status ``trace``, or from an object of
    ``trace`` bytes."""
    figures = {k: v for k, v in summary.items() if k not in _PLACE}
    size, mtime = (trace, None) if isinstance(trace, int) else (trace.st_size, trace.st_mtime_ns)
    return json.dumps({"version": version(), "trace_bytes": size, "trace_mtime_ns": mtime, "summary": figures}).encode()


# What a sidecar holds, typed: decoded by msgspec (a nesting limit, nothing built beyond the schema), a sidecar
# whose figures do not fit is unread and what the schema does not name is dropped, so that no figure of another
# shape reaches the tables.
_Breakdown = msgspec.defstruct("_Breakdown", [(column, float) for column in STEP_COLUMNS])


class _Steps(msgspec.Struct):
    steps: list[Optional[int]]
    per_step: list[_Breakdown]  # type: ignore[valid-type]
    avg: _Breakdown  # type: ignore[valid-type]
    dataloader_frac: float


_Temporal = msgspec.defstruct("_Temporal", [(key, float) for key in (
    "span_us", "idle_us", "compute_us", "non_compute_us", "idle_frac", "compute_frac", "non_compute_frac")])


class _DeviceRow(msgspec.Struct):
    name: str
    calls: int
    total_us: float


class _CpuRow(_DeviceRow):
    self_us: float


class _Operators(msgspec.Struct):
    cpu: list[_CpuRow]
    device: list[_DeviceRow]


class _Summary(msgspec.Struct):
    worker: str
    rank: Optional[int]
    step_breakdown: Optional[_Steps]
    temporal: Optional[_Temporal]  # type: ignore[valid-type]
    host: HostFigures
    operators: _Operators
    notes: list[str]


class _Sidecar(msgspec.Struct):
    version: str
    trace_bytes: int
    trace_mtime_ns: Optional[int]
    summary: _Summary


_DECODER = msgspec.json.Decoder(_Sidecar)


def loads(text: bytes, trace_bytes: int, trace_mtime_ns: Optional[int] = None) -> Optional[dict[str, Any]]:
    """The summary in the sidecar ``text`` if it is fresh for a trace of ``trace_bytes`` bytes (modified at
    ``trace_mtime_ns``, where given); None if it is stale, damaged or not a sidecar (the trace is then parsed)."""
    if len(text) > MAX_BYTES:
        return None
    try:
        doc = _DECODER.decode(text)
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        return None
    if doc.version != version() or doc.trace_bytes != trace_bytes:
        return None
    if trace_mtime_ns is not None and doc.trace_mtime_ns != trace_mtime_ns:
        return None
    summary = msgspec.to_builtins(doc.summary)
    summary["host"] = doc.summary.host.to_json()
    return summary if _plausible(summary) else None


LARGEST = 1e15  # no figure of a trace is larger (µs: 31 years; calls, bytes, ranks): a sidecar's beyond is forged


def _plausible(value: Any) -> bool:
    """Whether every number in ``value`` (nested dicts and lists) is one a trace's figures can be."""
    if isinstance(value, dict):
        return all(_plausible(v) for v in value.values())
    if isinstance(value, list):
        return all(_plausible(v) for v in value)
    return not isinstance(value, (int, float)) or -LARGEST <= value <= LARGEST


def read(trace: str) -> Optional[dict[str, Any]]:
    """The fresh summary beside the local trace ``trace`` (its place not yet set), or None (also where the sidecar
    is a symbolic link, which we never make, or not a plain file)."""
    try:
        status = os.stat(trace)
        text = read_regular(trace + SIDECAR, MAX_BYTES)
    except (OSError, FileRefused):
        return None
    return loads(text, status.st_size, status.st_mtime_ns)


def keep(trace: str, summary: dict[str, Any]) -> bool:
    """Write the sidecar of the local ``trace`` (whole, or not at all); False where it would be larger than a sidecar
    may be (the trace is parsed at each look)."""
    text = dumps(summary, os.stat(trace))
    if len(text) > MAX_BYTES:
        return False
    write_atomic(trace + SIDECAR, text)
    return True
