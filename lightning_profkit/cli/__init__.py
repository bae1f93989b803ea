"""The ``profkit`` command.

    profkit summary PATH [--json] [--jobs N]    where the time went: a trace, a window folder or a run folder
                 [--scheduler ADDRESS]          (a URL's traces parsed on a Dask cluster)
    profkit compare A B [--json] [--jobs N]     the same figures for two paths side by side (before / after)
    profkit capture RUN_DIR [--steps N]         ask a running PerformanceMonitor to record a window now
    profkit report RUN_DIR [-o report.html]     one HTML page of a run: epochs, windows, alerts, ranks (offline)
    profkit upload LOCAL URL                    upload the traces a fit kept here when its store failed
    profkit sql RUN ["QUERY"] [--json]          SQL (DuckDB) over the run's events tables; no query: the views
    profkit export RUN [--jobs N]               write the events table (Parquet) of each trace that has none

PATH, A and B may be URLs of object storage (``s3://…``, ``gs://…``): their traces are copied to a temporary
folder first.

Exit status: 0; 1 when the input is wrong or none of its traces could be read; 2 for a wrong command line; 3
(``LEFT_OUT``) when some traces could not be read: each is named on stderr with why, and the others are shown.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import sys
import tempfile
from typing import Any, Optional, Sequence

# Neither msgspec nor numpy here: `profkit summary` starts its decoding workers before it imports numpy.
from lightning_profkit.atomic_files import write_atomic
from lightning_profkit.cli.progress import Progress
from lightning_profkit.companions import EVENTS, SIDECAR
from lightning_profkit.machine import usable_cpus
from lightning_profkit.printable import printable, redact
from lightning_profkit.store import StoreError, copy_here, fetch, is_url, join, read, send, subfolders, write
from lightning_profkit.trace.file import JSON_SUFFIXES, TRACE_SUFFIXES, TraceError, find_traces, missing, natural

JOBS_HELP = "processes that decode a large trace (default: the CPU cores this process may use)"
LEFT_OUT = 3  # the exit status when some traces could not be read


def at_least_1(text: str) -> int:
    """An argument that counts something: a whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def steps_to_record(text: str) -> int:
    """``--steps`` of ``profkit capture``: 1 to the most a running callback records for one request."""
    from lightning_profkit.capture_request import MAX_STEPS

    value = at_least_1(text)
    if value > MAX_STEPS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_STEPS} (a window that long is already a large trace), "
                                         f"got {value}")
    return value


class CommandError(Exception):
    """A problem with the user's input: printed as one line, exit status 1."""


def trace_dir_of(path: str) -> str:
    """The folder a run's PerformanceMonitor writes to: ``PATH/profiler`` for a run folder, else PATH."""
    if not os.path.isdir(path):
        raise CommandError(f"{path}: no such folder")
    nested = os.path.join(path, "profiler")
    return nested if os.path.isdir(nested) else path


def capture(args: argparse.Namespace) -> int:
    from lightning_profkit import capture_request  # here: `profkit summary` starts faster without it

    if is_url(args.run_dir):
        folder, run = remote_run(args.run_dir)
        soon = "within a few seconds (the run looks on the store every 2 s)"
    else:
        folder = trace_dir_of(args.run_dir)
        run, soon = capture_request.running(folder), "within about a second"
        if run is None:  # runs of their own under it (no TensorBoard or CSV logger): the newest that is running
            for own in sorted(glob.glob(os.path.join(glob.escape(folder), "run=*")), reverse=True):
                if capture_request.running(own) is not None:
                    folder, run = own, capture_request.running(own)
                    break
    if run is None:
        raise CommandError(f"{folder}: no running PerformanceMonitor writes traces here (no {capture_request.MARKER})")
    why = capture_request.gone(run)
    if why is not None:
        raise CommandError(f"{folder}: the run that wrote {capture_request.MARKER} is not running ({why})")
    if is_url(folder):
        write(join(folder, capture_request.REQUEST), json.dumps(capture_request.request(args.steps)).encode())
    else:
        capture_request.request_capture(folder, args.steps)
    print(f"requested a window of {args.steps or 'the configured'} steps from the run in {redact(folder)} "
          f"(pid {run.get('pid')} on {run.get('host')}); it starts {soon}")
    return 0


def upload_kept(args: argparse.Namespace) -> int:
    """``profkit upload LOCAL URL``: the traces a fit kept on this machine when its store failed (the folder its end
    warning names), put at ``URL`` under the same paths; each local copy goes once it is up."""
    from lightning_profkit.companions import remove_local
    from lightning_profkit.store import upload_with_companions

    if not is_url(args.url):
        raise CommandError(f"{args.url}: not an object-store URL (s3://, gs://, az://, ...)")
    if not os.path.isdir(args.local):
        raise CommandError(missing(args.local) if not os.path.exists(args.local) else f"{args.local}: not a folder")
    found = [p for p in find_traces(args.local) if p.endswith(TRACE_SUFFIXES)]
    if not found:
        raise CommandError(f"{args.local}: no trace files (*.pt.trace.json[.gz]) there")
    for done, path in enumerate(found):
        try:
            upload_with_companions(path, join(args.url, os.path.relpath(path, args.local).replace(os.sep, "/")))
        except StoreError as err:
            raise CommandError(f"{err}; {done} of {len(found)} trace(s) uploaded, the others are still in {args.local}")
        remove_local(path)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(path))  # a window's folder, once empty
    print(f"profkit: uploaded {len(found)} trace(s) to {redact(args.url)}", file=sys.stderr)
    return 0


def remote_run(url: str) -> tuple[str, Optional[dict[str, Any]]]:
    """The trace folder of the run at ``url`` (``url/profiler`` for a run folder, else ``url``; in either, the
    newest ``run=*`` folder of its own whose run may still be running) and its marker."""
    from lightning_profkit import capture_request

    for folder in (join(url, "profiler"), url.rstrip("/")):
        text = read(join(folder, capture_request.MARKER))
        if text is not None:
            return folder, capture_request.marker_of(text)
        for own in reversed(subfolders(folder, "run=")):
            text = read(join(own, capture_request.MARKER))
            marker = capture_request.marker_of(text) if text is not None else None
            if marker is not None and capture_request.gone(marker) is None:
                return own, marker
    return url.rstrip("/"), None


def summaries(path: str, jobs: int, left_out: list[str], scheduler: Optional[str] = None) -> list[dict[str, Any]]:
    """The summary of every readable trace under ``path`` (a file, a window folder or a run folder; a URL of
    object storage is copied to a temporary folder first, or parsed by the workers of the Dask cluster at
    ``scheduler``, and the summaries name the objects); ``left_out`` gains a line for each trace that could not be
    read. None readable: a :class:`CommandError`."""
    if scheduler is not None:
        if not is_url(path):
            raise CommandError(f"{path}: --scheduler reads traces from object storage, where the cluster's workers "
                               "read them too: give an s3://, gs:// or az:// URL")
        try:
            from lightning_profkit.cli.cluster import cluster_summaries
            found = cluster_summaries(path, scheduler, TRACE_SUFFIXES + JSON_SUFFIXES, left_out)
        except ImportError:
            raise CommandError(f"--scheduler needs Dask's distributed: {DASK_NEEDS}") from None
        except OSError as err:  # the scheduler cannot be reached
            raise CommandError(f"{scheduler}: no Dask scheduler answers there ({err})") from None
        if not found and not left_out:
            raise CommandError(f"{path}: no trace files (*.pt.trace.json[.gz]) there")
        name_windows(found)
        return readable(path, found, left_out)
    if not is_url(path):
        skipped: list[str] = []
        found = local_summaries(path, jobs, skipped)
        left_out += skipped
        return readable(path, found, skipped)
    with tempfile.TemporaryDirectory(prefix="profkit-") as local:
        got = fetch(path, TRACE_SUFFIXES + JSON_SUFFIXES, local)
        refused = [f"{name}: not read: a key with an empty, '.' or '..' part, which would be copied outside the "
                   "temporary folder" for name in got["refused"]]
        if not got["paths"] and not got["known"]:
            raise CommandError("; ".join(refused) or f"{path}: no trace files (*.pt.trace.json[.gz]) there")
        if got["unread"]:
            print(f"profkit: {printable(got['unread'])}", file=sys.stderr)
        left_out += refused

        def remote(p: str) -> str:  # the object a copy in ``local`` was made from
            return path if path.endswith(JSON_SUFFIXES) else path.rstrip("/") + p[len(local):].replace(os.sep, "/")

        skipped: list[str] = []
        kept: list[str] = []
        found = local_summaries(local, jobs, skipped, kept, got["known"])
        try:  # the next look, by anyone, reads them instead of parsing the traces
            send([[p, remote(p[:-len(SIDECAR)]) + SIDECAR] for p in kept])
        except StoreError as err:
            print(f"profkit: could not keep the summaries beside the traces ({printable(redact(str(err)))}); the next "
                  "look parses them again", file=sys.stderr)

    named = []
    for line in skipped:  # "<local copy>: why"
        copy, _, why = line.partition(": ")
        named.append(f"{remote(copy)}: {why}" if copy.startswith(local) else line)
    left_out += named
    for s in found:
        s["path"] = remote(s["path"])
    return readable(path, found, named)


def readable(path: str, found: list[dict[str, Any]], skipped: list[str]) -> list[dict[str, Any]]:
    """``found``, unless none of ``path``'s traces could be read (``skipped``: why each could not)."""
    if not found and skipped:
        raise CommandError(f"{path}: none of its {len(skipped)} trace(s) could be read: {'; '.join(skipped)}")
    return found


def local_summaries(path: str, jobs: int, left_out: list[str], kept: Optional[list[str]] = None,
                    known: Optional[dict[str, dict[str, Any]]] = None, tables: Optional[list[str]] = None
                    ) -> list[dict[str, Any]]:
    """The summary of every trace under the local ``path`` and of those ``known`` (summaries by path, of traces not
    there): from its sidecar where that is fresh (see :mod:`~lightning_profkit.trace.sidecar`), else read (each as a
    stream: see :mod:`~lightning_profkit.trace.load`), with a progress line on a terminal for long reads, and its
    sidecar written beside it (``kept`` gains its path). Where ``tables`` is given, a trace whose events table is
    missing or stale is read too and its table written (``tables`` gains its path). A trace that cannot be read is
    left out, with a line in ``left_out`` that names it and says why."""
    from lightning_profkit.trace import sidecar

    known = known or {}
    if known:
        with contextlib.suppress(TraceError):  # none there: all known
            known = {**dict.fromkeys(find_traces(path)), **known}
    paths = sorted(known, key=natural) if known else find_traces(path)
    from lightning_profkit.trace.load import load

    progress = Progress.on(sys.stderr)
    out, unkept = [], None
    for p in paths:
        summary = known.get(p) or sidecar.read(p)
        if summary is not None and (tables is None or has_table(p)):
            out.append(sidecar.placed(p, summary))
            continue
        try:
            trace = load(p, jobs, progress=progress.reading(p) if progress else None)
            from lightning_profkit.trace.summary import summarize_trace  # numpy: after the first read's workers

            out.append(sidecar.placed(p, summary) if summary is not None else summarize_trace(p, trace))
            if tables is not None:
                try:
                    write_table(p, out[-1], trace)
                    tables.append(p + EVENTS)
                except OSError as err:
                    left_out.append(f"{p + EVENTS}: cannot write the events table ({err.strerror or err})")
            del trace  # before the next one is read
        except TraceError as err:  # its text starts with the path
            left_out.append(str(err))
            continue
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as err:  # a trace with unexpected content: one line, never a traceback
            if os.environ.get("PROFKIT_DEBUG"):
                raise
            left_out.append(f"{p}: could not be read ({type(err).__name__}: {err}; PROFKIT_DEBUG=1 shows where)")
            continue
        finally:
            if progress:
                progress.done()
        if summary is not None:
            continue
        try:
            write_atomic(sidecar.sidecar_of(p), sidecar.dumps(out[-1], os.stat(p)))
            if kept is not None:
                kept.append(sidecar.sidecar_of(p))
        except OSError as err:
            unkept = unkept or f"{sidecar.sidecar_of(p)}: {err.strerror or err}"
    if unkept:  # once: the figures are shown all the same
        print(f"profkit: could not keep the summaries beside the traces ({printable(unkept)}); the next look parses "
              "them again", file=sys.stderr)
    name_windows(out)
    return out


def has_table(trace: str) -> bool:
    """Whether the local ``trace`` has a fresh events table beside it."""
    from lightning_profkit.trace.event_table import fresh

    return fresh(trace + EVENTS, os.path.getsize(trace))


def write_table(trace: str, summary: dict[str, Any], loaded: Any, name: Optional[str] = None) -> None:
    """Write the events table of the local ``trace`` (read as ``loaded``; on a store at ``name``) beside it."""
    from lightning_profkit.trace import event_table
    from lightning_profkit.trace.columns import from_rows

    table = event_table.table_of(name or trace, summary, from_rows(loaded.rows))
    write_atomic(trace + EVENTS, event_table.to_parquet(table, os.path.getsize(trace)))


def name_windows(found: list[dict[str, Any]]) -> None:
    """Window names that tell runs apart: a folder of runs (``profiler/run=…/step=…``) names each window by its
    path below the folder all the runs share, so that two runs' windows of the same steps never merge."""
    parents = [os.path.dirname(os.path.abspath(s["path"])) for s in found]
    if len(set(parents)) > 1:
        root = os.path.commonpath([os.path.dirname(p) for p in parents])
        for s, parent in zip(found, parents):
            s["window"] = os.path.relpath(parent, root).replace(os.sep, "/")


def exit_status(left_out: list[str]) -> int:
    """Name each trace that was left out, once, on stderr; the exit status."""
    for line in dict.fromkeys(left_out):
        print(f"profkit: {printable(redact(line))}; left out", file=sys.stderr)
    return LEFT_OUT if left_out else 0


def summary(args: argparse.Namespace) -> int:
    left_out: list[str] = []
    traces = summaries(args.path, args.jobs, left_out, args.scheduler)
    from lightning_profkit.cli.text import summary_text, use_color, write
    from lightning_profkit.trace.ranks import ranks_section
    from lightning_profkit.trace.summary import UNITS, aggregate

    agg, ranks = aggregate(traces), ranks_section(traces)
    if args.json:
        write(json.dumps({"units": UNITS, "traces": traces, "aggregate": agg, "ranks": ranks, "left_out": left_out},
                         indent=1))
    else:
        write(summary_text(traces, agg, use_color(sys.stdout), ranks))
    return exit_status(left_out)


def compare_paths(args: argparse.Namespace) -> int:
    left_out: list[str] = []
    a, b = summaries(args.a, args.jobs, left_out), summaries(args.b, args.jobs, left_out)
    from lightning_profkit.cli.text import compare_text, use_color, write
    from lightning_profkit.trace.summary import UNITS, aggregate, compare

    result = compare(aggregate(a), aggregate(b))
    if args.json:
        write(json.dumps({"units": UNITS, **result, "left_out": left_out}, indent=1))
    else:
        write(compare_text(result, use_color(sys.stdout)))
    return exit_status(left_out)


def report(args: argparse.Namespace) -> int:
    if is_url(args.run_dir):
        raise CommandError(f"{args.run_dir}: `profkit report` reads a local run folder; copy the run here first")
    trace_dir = trace_dir_of(args.run_dir)
    left_out: list[str] = []
    try:
        windows = local_summaries(trace_dir, args.jobs, left_out)
    except TraceError:  # no trace: a run without windows still has its epochs
        windows = []
    from lightning_profkit.report.page import page
    from lightning_profkit.report.run_data import read_run
    from lightning_profkit.trace.ranks import ranks_section

    data = read_run(args.run_dir)
    if data.source is None and os.path.abspath(trace_dir) == os.path.abspath(args.run_dir):  # given the profiler/ folder
        data = read_run(os.path.dirname(os.path.abspath(args.run_dir)))
    if not data.epochs and not windows:
        exit_status(left_out)
        raise CommandError(f"{args.run_dir}: nothing to report: no epoch metrics of PerformanceMonitor in a logger's "
                           "files (TensorBoard or CSV) and no readable trace")
    out = os.path.abspath(args.output)
    text = page(args.run_dir, data, windows, ranks_section(windows), os.path.dirname(out), trace_dir)
    try:
        write_atomic(out, text.encode("utf-8"))
    except OSError as err:  # named by the user's path, not the temporary one written first
        named = args.output if os.path.abspath(args.output) == args.output else f"{args.output} ({out})"
        raise CommandError(f"{named}: cannot write the report: {err.strerror or err}") from None
    print(f"profkit: wrote {args.output}: {len(data.epochs)} epoch(s), {len(windows)} trace(s), "
          f"{data.alert_count} alert(s)", file=sys.stderr)
    return exit_status(left_out)


SQL_NEEDS = "pip install 'lightning_profkit[sql]'"
DASK_NEEDS = "pip install 'lightning_profkit[dask]'"


def tables_of(run: str) -> tuple[Any, list[str], list[str]]:
    """The events tables of the run (a folder or a URL: its traces' ``*.parquet`` companions), the file system that
    reads them (None: local) and the traces that have none (or, local, a stale one)."""
    if is_url(run):
        from lightning_profkit.store import files_under

        fs, found = files_under(run, TRACE_SUFFIXES + tuple(t + EVENTS for t in TRACE_SUFFIXES))
        tables = [p for p in found if p.endswith(EVENTS)]
        untabled = [p for p in found if not p.endswith(EVENTS) and p + EVENTS not in set(tables)]
    else:
        fs, traces = None, find_traces(trace_dir_of(run))
        tables = [p + EVENTS for p in traces if has_table(p)]
        untabled = [p for p in traces if p + EVENTS not in set(tables)]
    return fs, sorted(tables, key=natural), untabled


def tabulate(run: str, fs: Any, untabled: list[str], local: str, left_out: list[str]) -> dict[str, str]:
    """Write the events table of each trace in ``untabled``: beside it for a local run, else in the folder ``local``
    from a copy of the trace (and put on the store beside it, for the next query); returns each table written and
    the name it goes by. A trace that cannot be read is named in ``left_out``."""
    if not untabled:
        return {}
    if fs is None:
        written: list[str] = []
        local_summaries(trace_dir_of(run), usable_cpus(), left_out, tables=written)
        return {t: t for t in written}
    from lightning_profkit.trace.load import load
    from lightning_profkit.trace.summary import summarize_trace

    made = {}
    for copy, url in zip(copy_here(run, fs, untabled, local, TRACE_SUFFIXES[1]), untabled):
        try:
            loaded = load(copy)
            write_table(copy, summarize_trace(url, loaded), loaded, url)
        except TraceError as err:
            left_out.append(f"{url}: {str(err).partition(': ')[2]}")
            continue
        made[copy + EVENTS] = url + EVENTS
    with contextlib.suppress(StoreError):  # a cache: the next query writes them again
        send([[table, url] for table, url in made.items()])
    return made


def sql(args: argparse.Namespace) -> int:
    """``profkit sql RUN [QUERY]``: the query over the run's events tables, or (no query) the views and columns."""
    try:
        import duckdb

        from lightning_profkit.trace.sql_views import VIEWS, connect
    except ImportError:
        raise CommandError(f"`profkit sql` needs DuckDB and pyarrow: {SQL_NEEDS}") from None
    fs, tables, untabled = tables_of(args.run)
    left_out: list[str] = []
    from lightning_profkit.cli.text import table, use_color, write

    # a store's tables are copied here many at a time (DuckDB reads through fsspec one request at a time)
    with tempfile.TemporaryDirectory(prefix="profkit-") if fs is not None else contextlib.nullcontext("") as local:
        objects = dict(zip(copy_here(args.run, fs, tables, local, EVENTS), tables)) if local else {}
        made = tabulate(args.run, fs, untabled, local, left_out)
        if made:
            print(f"profkit: wrote the events tables of {len(made)} trace(s); the next query reads them",
                  file=sys.stderr)
        objects.update(made)
        read_here = list(objects) if local else sorted(set(tables) | set(made), key=natural)
        if not read_here:
            raise CommandError(f"{args.run}: none of its {len(untabled)} trace(s) could be read: {'; '.join(left_out)}")

        def said(err: Exception) -> str:  # DuckDB's first line, with each copy named by its object
            why = str(err).splitlines()[0]
            for copy, name in objects.items():
                why = why.replace(copy, name)
            return why

        try:
            db = connect(read_here)
        except duckdb.Error as err:
            raise CommandError(f"cannot read the events tables: {said(err)}") from None
        if not args.query:
            columns = db.execute("DESCRIBE events").fetchall()
            lines = [f"{name}: {what}" for name, (what, _) in VIEWS.items()]
            described = table(["column", "type"], [c[:2] for c in columns])
            write("\n".join(["Views:", *lines, "", "Columns of events:", described]))
            return exit_status(left_out)
        try:
            result = db.execute(args.query)
            names, rows = [d[0] for d in result.description], result.fetchall()
        except duckdb.Error as err:
            raise CommandError(f"the query failed: {said(err)}") from None
    if args.json:
        write(json.dumps({"columns": names, "rows": [[None if x != x else x for x in r] for r in rows]}, default=str))
    else:
        write(table(names, [["NULL" if x is None else str(x) for x in r] for r in rows], use_color(sys.stdout)))
    return exit_status(left_out)


def export(args: argparse.Namespace) -> int:
    """``profkit export RUN``: an events table (and a summary) beside every trace of the local run that lacks one."""
    from lightning_profkit.trace.event_table import available

    if is_url(args.run):
        raise CommandError(f"{args.run}: `profkit export` writes beside local traces; copy the run here first")
    if not available():
        raise CommandError(f"`profkit export` needs pyarrow: {SQL_NEEDS}")
    left_out: list[str] = []
    written: list[str] = []
    found = local_summaries(trace_dir_of(args.run), args.jobs, left_out, tables=written)
    print(f"profkit: wrote {len(written)} events table(s); {len(found) - len(written)} trace(s) had one already",
          file=sys.stderr)
    return exit_status(left_out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="profkit", description="lightning_profkit's command line")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("summary", help="where the time went in a trace, a window folder or a run folder")
    p.add_argument("path")
    p.add_argument("--json", action="store_true", help="the same figures as JSON")
    p.add_argument("--jobs", type=at_least_1, default=usable_cpus(), help=JOBS_HELP)
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="parse the traces of an object-store URL on this Dask distributed cluster (tcp://host:8786)")
    p.set_defaults(handler=summary)
    p = sub.add_parser("compare", help="two traces or folders side by side, with differences")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--json", action="store_true", help="the same figures as JSON")
    p.add_argument("--jobs", type=at_least_1, default=usable_cpus(), help=JOBS_HELP)
    p.set_defaults(handler=compare_paths)
    p = sub.add_parser("capture", help="ask a running PerformanceMonitor to record a window now")
    p.add_argument("run_dir", help="the run folder (its profiler/ subfolder) or the trace folder itself")
    p.add_argument("--steps", type=steps_to_record, default=None,
                   help="steps to record, 1 to 100 (default: the callback's `active`)")
    p.set_defaults(handler=capture)
    p = sub.add_parser("sql", help="query a run's events tables with SQL (DuckDB); no query: the views and columns")
    p.add_argument("run", help="a run folder, a trace folder, or its URL on object storage")
    p.add_argument("query", nargs="?", help="SQL over the views events, steps, operators, kernels and ranks")
    p.add_argument("--json", action="store_true", help="the result as JSON: columns and rows")
    p.set_defaults(handler=sql)
    p = sub.add_parser("export", help="write an events table (Parquet) beside each trace of a run that has none")
    p.add_argument("run", help="a run folder or a trace folder")
    p.add_argument("--jobs", type=at_least_1, default=usable_cpus(), help=JOBS_HELP)
    p.set_defaults(handler=export)
    p = sub.add_parser("upload", help="upload the traces a fit kept on this machine when its store failed")
    p.add_argument("local", help="the folder the fit's end warning names")
    p.add_argument("url", help="where they belong: the run's trace folder on the store")
    p.set_defaults(handler=upload_kept)
    p = sub.add_parser("report", help="one self-contained HTML page of a run, readable offline and printable")
    p.add_argument("run_dir", help="the run folder (the logger's log_dir, holding profiler/) or its profiler/ folder")
    p.add_argument("-o", "--output", default="report.html", help="the HTML file to write (default: report.html)")
    p.add_argument("--jobs", type=at_least_1, default=usable_cpus(), help=JOBS_HELP)
    p.set_defaults(handler=report)
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (CommandError, TraceError, StoreError) as err:
        print(f"profkit: {printable(redact(str(err)))}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `profkit summary ... | head`
        return 0
    except KeyboardInterrupt:  # Ctrl+C: no traceback, the shell's usual status
        return 130
    except OSError as err:
        print(printable(f"profkit: {err.filename or ''}: {err.strerror or err}"), file=sys.stderr)
        return 1
    except Exception as err:  # a trace with unexpected content: one line, never a traceback
        if os.environ.get("PROFKIT_DEBUG"):
            raise
        print(printable(f"profkit: could not read the trace ({type(err).__name__}: {err}); PROFKIT_DEBUG=1 shows where"),
              file=sys.stderr)
        return 1


def run() -> None:
    """The console script: :func:`main`, then an exit that does not free the trace's objects one by one
    (measured: about 35 ms, a tenth of a summary of a 2 MB trace); there is nothing else to clean up."""
    # One BLAS thread: profkit does no linear algebra, and OpenBLAS's threads would spend a core for a
    # twentieth of a second at numpy's import, the core that reads the trace meanwhile.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # `profkit summary ... | head`
        pass
    except OSError as err:
        print(f"profkit: cannot write the output: {err.strerror or err}", file=sys.stderr)
        code = 1
    os._exit(code)


if __name__ == "__main__":
    run()
