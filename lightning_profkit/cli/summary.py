"""``profkit summary PATH`` and ``profkit compare A B``: where the time went, in a trace, a window folder or a run
folder (local, on object storage, or parsed on a Dask cluster: docs/many-ranks.md, Beyond one machine)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from typing import Any, Optional, TypeVar

from lightning_profkit.cli.progress import Progress
from lightning_profkit.cli.shared import CommandError, add_jobs, exit_status, say
from lightning_profkit.companions import SIDECAR
from lightning_profkit.printable import redact
from lightning_profkit.store import StoreError, download, is_url, put, survey
from lightning_profkit.trace import sidecar
from lightning_profkit.trace.file import JSON_SUFFIXES, TRACE_SUFFIXES, find_traces, natural
from lightning_profkit.trace.folder import name_windows, read_folder

CONNECT_TIMEOUT_S = 10  # a Dask scheduler that has not answered by then is taken as not there
Found = TypeVar("Found", list, dict)


LEGEND = """columns:
  Step time breakdown  as the Overview of TensorBoard's PyTorch Profiler tab, with kineto's later fixes (its
                       "CPU Exec" is CpuOp); each a share of the step time. Profiled steps are slower than the
                       others by the profiler's own work: the logged step_time_ms_mean is every step's
  hta/                 HolisticTraceAnalysis's temporal breakdown, first to last GPU activity, the last step
                       left out as HTA does
  own (ranks)          a rank's step less its communication, where it waits for the other ranks"""


def add(sub: Any) -> None:
    p = sub.add_parser("summary", help="where the time went in a trace, a window folder or a run folder",
                       epilog=LEGEND, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", help="a trace, a window folder, a run folder, or its URL on object storage")
    p.add_argument("--json", action="store_true", help="the same figures as JSON")
    add_jobs(p)
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="parse the traces on this Dask distributed cluster (tcp://host:8786): an object-store URL, or a "
                        "folder on a filesystem every worker shares")
    p.set_defaults(handler=summary)
    p = sub.add_parser("compare", help="two traces or folders side by side, with differences")
    p.add_argument("a", help="the traces before: a trace or a folder (or its URL)")
    p.add_argument("b", help="the traces after, likewise")
    p.add_argument("--json", action="store_true", help="the same figures as JSON")
    add_jobs(p)
    p.set_defaults(handler=compare_paths)


def summary(args: argparse.Namespace) -> int:
    left_out: list[str] = []
    traces = summaries(args.path, args.jobs, left_out, args.scheduler)
    from lightning_profkit.cli.text import json_text, summary_text, use_color, write
    from lightning_profkit.trace.ranks import ranks_section
    from lightning_profkit.trace.summary import UNITS, aggregate

    agg, ranks = aggregate(traces), ranks_section(traces)
    write(json_text({"units": UNITS, "traces": traces, "aggregate": agg, "ranks": ranks, "left_out": left_out})
          if args.json else summary_text(traces, agg, use_color(), ranks))
    return exit_status(left_out)


def compare_paths(args: argparse.Namespace) -> int:
    left_out: list[str] = []
    a, b = summaries(args.a, args.jobs, left_out), summaries(args.b, args.jobs, left_out)
    from lightning_profkit.cli.text import compare_text, json_text, use_color, write
    from lightning_profkit.trace.summary import UNITS, aggregate, compare

    result = compare(aggregate(a), aggregate(b))
    write(json_text({"units": UNITS, **result, "left_out": left_out}) if args.json
          else compare_text(result, use_color()))
    return exit_status(left_out)


def summaries(path: str, jobs: int, left_out: list[str], scheduler: Optional[str] = None) -> list[dict[str, Any]]:
    """The summary of every readable trace under ``path`` (a URL's traces copied here, or parsed on the Dask cluster
    at ``scheduler``); ``left_out`` gains a line for each trace that could not be read."""
    if scheduler is not None:
        return unless_none_read(path, on_cluster(path, scheduler, left_out), left_out)
    if not is_url(path):
        found, skipped = read_here(path, jobs)
        left_out += skipped
        return unless_none_read(path, found, skipped)
    with tempfile.TemporaryDirectory(prefix="profkit-") as local:
        got = download(path, TRACE_SUFFIXES + JSON_SUFFIXES, local)
        refused = [f"{name}: not read: a key with an empty, '.' or '..' part, which would be copied outside the "
                   "temporary folder" for name in got["refused"]]
        if not got["paths"] and not got["known"]:
            raise CommandError("; ".join(refused) or f"{path}: no trace files (*.pt.trace.json[.gz]) there")
        if got["unread"]:
            say(got["unread"])
        left_out += refused

        def remote(p: str) -> str:  # the object a copy in ``local`` was made from
            return path if path.endswith(JSON_SUFFIXES) else path.rstrip("/") + p[len(local):].replace(os.sep, "/")

        read = read_folder(local, jobs, got["known"], progress=Progress.on(sys.stderr))
        try:  # the next look, by anyone, reads them instead of parsing the traces
            put([[p, remote(p[:-len(SIDECAR)]) + SIDECAR] for p in read.kept])
        except StoreError as err:
            say(f"could not keep the summaries beside the traces ({redact(str(err))}); the next look parses them again")
    named = [f"{remote(copy)}: {why}" if copy.startswith(local) else line  # "<local copy>: why"
             for line in read.left_out for copy, _, why in [line.partition(": ")]]
    left_out += named
    for s in read.summaries:
        s["path"] = remote(s["path"])
    return unless_none_read(path, read.summaries, named)


def on_cluster(path: str, scheduler: str, left_out: list[str]) -> list[dict[str, Any]]:
    """The summary of every trace under ``path``, from its sidecar or parsed by the workers of the Dask cluster at
    ``scheduler``, one trace a task; ``left_out`` gains a line for each trace that could not be read."""
    try:
        from distributed import Client
    except ImportError:
        raise CommandError("--scheduler needs Dask's distributed: pip install distributed") from None
    if is_url(path):
        found = survey(path, TRACE_SUFFIXES + JSON_SUFFIXES)
        if found.unread:
            say(found.unread)
        out = [sidecar.with_place(found.fs.unstrip_protocol(p), s) for p, s in found.known.items()]
        todo = [found.fs.unstrip_protocol(p) for p in found.found if p not in found.known]
    else:  # a local path: the sidecars read here
        read = {p: sidecar.read(p) for p in find_traces(os.path.abspath(path))}
        out = [sidecar.with_place(p, s) for p, s in read.items() if s is not None]
        todo = [p for p, s in read.items() if s is None]
    if todo:
        try:
            with Client(scheduler, timeout=CONNECT_TIMEOUT_S) as client:
                out += parsed_on(client, todo, None if is_url(path) else os.path.abspath(path), left_out)
        except OSError as err:  # the scheduler cannot be reached
            raise CommandError(f"{scheduler}: no Dask scheduler answers there ({err})") from None
    if not out and not left_out:
        raise CommandError(f"{path}: no trace files (*.pt.trace.json[.gz]) there")
    out.sort(key=lambda s: natural(s["path"]))
    name_windows(out)
    return out


def parsed_on(client: Any, todo: list[str], folder: Optional[str], left_out: list[str]) -> list[dict[str, Any]]:
    """The summaries of the traces ``todo`` (under the local ``folder``, or on a store) parsed by ``client``'s
    workers; ``left_out`` gains a line for each that could not be read."""
    from distributed import as_completed

    try:
        client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
    except TimeoutError:
        raise OSError(f"no worker joined the scheduler within {CONNECT_TIMEOUT_S} s") from None
    if folder is not None:  # every worker must see the trace as this process does: the same size
        size, seen = os.stat(todo[0]).st_size, client.run(os.path.getsize, todo[0], on_error="return")
        blind = sorted(worker for worker, got in seen.items() if got != size)  # an error: it sees no such file
        if blind:
            raise CommandError(f"{folder}: {len(blind)} of the cluster's {len(seen)} workers do not see this folder "
                               f"as this machine does (the first, {blind[0]}, found {todo[0]} missing or of another "
                               "size): give a path on a filesystem every worker shares, or the run's URL on object "
                               "storage")
    futures = client.map(summary_of, todo, pure=False)
    named, out = dict(zip(futures, todo)), []
    for future in as_completed(futures):
        try:
            out.append(future.result())
        except Exception as err:  # a worker's failure, on its trace only
            text = str(err)
            left_out.append(text if text.startswith(named[future]) else f"{named[future]}: could not be read "
                            f"({type(err).__name__}: {text})")
    return out


def summary_of(url: str) -> dict[str, Any]:
    """On a worker: the summary of the trace at ``url`` (or at a local path), its sidecar written beside it."""
    from lightning_profkit import store
    from lightning_profkit.trace.load import load
    from lightning_profkit.trace.summary import summarize_trace

    if not is_url(url):
        summary = summarize_trace(url, load(url, jobs=1))
        with contextlib.suppress(OSError):  # a folder the worker may not write: parsed again at the next look
            sidecar.keep(url, summary)
        return summary
    with tempfile.TemporaryDirectory(prefix="profkit-") as folder:
        local = os.path.join(folder, url.rsplit("/", 1)[-1])
        store.fetch_file(url, local)
        summary = sidecar.with_place(url, summarize_trace(local, load(local, jobs=1)))
        store.write(url + SIDECAR, sidecar.dumps(summary, os.path.getsize(local)))
    return summary


def read_here(path: str, jobs: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The summaries of the local traces under ``path``, and a line for each left out."""
    read = read_folder(path, jobs, progress=Progress.on(sys.stderr))
    if read.unkept:
        say(f"could not keep the summaries beside the traces ({read.unkept}); the next look parses them again")
    return read.summaries, read.left_out


def unless_none_read(path: str, found: Found, skipped: list[str]) -> Found:
    """``found``, unless none of ``path``'s traces could be read (``skipped``: why each could not)."""
    if not found and skipped:
        raise CommandError(f"{path}: none of its {len(skipped)} trace(s) could be read: {'; '.join(skipped)}")
    return found
