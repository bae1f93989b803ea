"""``profkit summary PATH`` and ``profkit compare A B``: where the time went, in a trace, a window folder or a run
folder (local, on object storage, or parsed on a Dask cluster)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any, Optional

from lightning_profkit.cli.progress import Progress
from lightning_profkit.cli.shared import CommandError, add_jobs, exit_status, say
from lightning_profkit.companions import SIDECAR
from lightning_profkit.printable import redact
from lightning_profkit.store import StoreError, download, is_url, put
from lightning_profkit.trace.file import JSON_SUFFIXES, TRACE_SUFFIXES
from lightning_profkit.trace.folder import name_windows, read_folder


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
          if args.json else summary_text(traces, agg, use_color(sys.stdout), ranks))
    return exit_status(left_out)


def compare_paths(args: argparse.Namespace) -> int:
    left_out: list[str] = []
    a, b = summaries(args.a, args.jobs, left_out), summaries(args.b, args.jobs, left_out)
    from lightning_profkit.cli.text import compare_text, json_text, use_color, write
    from lightning_profkit.trace.summary import UNITS, aggregate, compare

    result = compare(aggregate(a), aggregate(b))
    write(json_text({"units": UNITS, **result, "left_out": left_out}) if args.json
          else compare_text(result, use_color(sys.stdout)))
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
    """The summaries of the traces at ``path``, parsed by the workers of the Dask cluster at ``scheduler``."""
    from lightning_profkit.cli.cluster import cluster_summaries

    try:
        found = cluster_summaries(path if is_url(path) else os.path.abspath(path), scheduler, left_out)
    except StoreError:  # an OSError too, said as it is
        raise
    except OSError as err:  # the scheduler cannot be reached
        raise CommandError(f"{scheduler}: no Dask scheduler answers there ({err})") from None
    if not found and not left_out:
        raise CommandError(f"{path}: no trace files (*.pt.trace.json[.gz]) there")
    name_windows(found)
    return found


def read_here(path: str, jobs: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The summaries of the local traces under ``path``, and a line for each left out."""
    read = read_folder(path, jobs, progress=Progress.on(sys.stderr))
    if read.unkept:
        say(f"could not keep the summaries beside the traces ({read.unkept}); the next look parses them again")
    return read.summaries, read.left_out


def unless_none_read(path: str, found: list[dict[str, Any]], skipped: list[str]) -> list[dict[str, Any]]:
    """``found``, unless none of ``path``'s traces could be read (``skipped``: why each could not)."""
    if not found and skipped:
        raise CommandError(f"{path}: none of its {len(skipped)} trace(s) could be read: {'; '.join(skipped)}")
    return found
