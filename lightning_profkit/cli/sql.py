"""``profkit sql RUN [QUERY]`` and ``profkit export RUN``: SQL (DuckDB) over a run's events tables, written
beside its traces (on a store too) the first time they are needed."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from typing import Any, Optional

from lightning_profkit.cli.progress import Progress
from lightning_profkit.cli.shared import SQL_NEEDS, CommandError, add_jobs, exit_status, say, trace_dir_of
from lightning_profkit.cli.summary import unless_none_read
from lightning_profkit.companions import EVENTS
from lightning_profkit.machine import usable_cpus
from lightning_profkit.opener import FileRefused, fd_path
from lightning_profkit.store import StoreError, copy_here, is_url, put
from lightning_profkit.trace.file import TRACE_SUFFIXES, TraceError, find_traces, natural
from lightning_profkit.trace.folder import has_table, read_folder, write_table


def add(sub: Any) -> None:
    p = sub.add_parser("sql", help="query a run's events tables with SQL (DuckDB); no query: the views and columns")
    p.add_argument("run", help="a run folder, a trace folder, or its URL on object storage")
    p.add_argument("query", nargs="?", help="SQL over the views events, steps, operators, kernels and ranks")
    p.add_argument("--json", action="store_true", help="the result as JSON: columns and rows")
    p.set_defaults(handler=sql)
    p = sub.add_parser("export", help="write an events table (Parquet) beside each trace of a run that has none")
    p.add_argument("run", help="a run folder or a trace folder")
    add_jobs(p)
    p.set_defaults(handler=export)


def sql(args: argparse.Namespace) -> int:
    """``profkit sql RUN [QUERY]``: the query over the run's events tables, or (no query) the views and columns."""
    try:
        import duckdb

        from lightning_profkit.trace.event_table import connect
    except ImportError:
        raise CommandError(f"`profkit sql` needs DuckDB and pyarrow: {SQL_NEEDS}") from None
    from lightning_profkit.cli.text import write

    left_out: list[str] = []
    # a store's tables are copied here many at a time (DuckDB reads through fsspec one request at a time)
    with tempfile.TemporaryDirectory(prefix="profkit-") if is_url(args.run) else contextlib.nullcontext("") as local, \
            contextlib.ExitStack() as held:
        objects = _opened(_readable(args.run, local, left_out), held, left_out)
        if not objects:
            raise CommandError(f"{args.run}: none of its events tables could be read: {'; '.join(left_out)}")

        def named(err: Exception) -> str:  # DuckDB's first line, with each file named by its path or object
            why = str(err).splitlines()[0]
            for read in sorted(objects, key=len, reverse=True):  # /dev/fd/12 before /dev/fd/1
                why = why.replace(read, objects[read])
            return why

        try:
            db = connect(list(objects))
        except duckdb.Error as err:
            raise CommandError(f"cannot read the events tables: {named(err)}") from None
        try:
            write(_answer(db, args.query, args.json))
        except duckdb.Error as err:
            raise CommandError(f"the query failed: {named(err)}") from None
    return exit_status(left_out)


def _opened(tables: dict[str, str], held: contextlib.ExitStack, left_out: list[str]) -> dict[str, str]:
    """Of the events ``tables`` (file: name), ours held open by ``held``, as the path DuckDB reads and the name; the
    others named in ``left_out``."""
    from lightning_profkit.trace.event_table import labels, open_table

    objects = {}
    for path, name in tables.items():
        try:
            table = held.enter_context(open_table(path))
        except FileRefused as err:
            left_out.append(f"{name}: {str(err).partition(': ')[2]}")
            continue
        if labels(table):
            objects[fd_path(table)] = name
        else:
            left_out.append(f"{name}: not an events table of this version of profkit (`profkit export` writes it)")
    return objects


def _readable(run: str, local: str, left_out: list[str]) -> dict[str, str]:
    """The run's events tables (file read here: name; a store's copied into ``local``), the missing ones written
    first; a trace that cannot be read is named in ``left_out``."""
    objects, made = _store_tables(run, local, left_out) if local else _local_tables(run, left_out)
    if made:
        say(f"wrote the events tables of {len(made)} trace(s); the next query reads them")
    objects.update(made)
    return dict(sorted(unless_none_read(run, objects, left_out).items(), key=lambda kv: natural(kv[1])))


def _local_tables(run: str, left_out: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The events tables of the local run's traces, and those written for the traces that had none (or a stale one)."""
    folder = trace_dir_of(run)
    traces = find_traces(folder)
    tables = {p + EVENTS: p + EVENTS for p in traces if has_table(p)}
    if len(tables) == len(traces):
        return tables, {}
    read = read_folder(folder, usable_cpus(), tables=True, progress=Progress.on(sys.stderr))
    left_out += read.left_out
    return tables, {t: t for t in read.tables}


def _answer(db: Any, query: Optional[str], as_json: bool) -> str:
    """The query's result as a table (or JSON); no query: the views and the columns of ``events``."""
    from lightning_profkit.cli.text import table, use_color
    from lightning_profkit.trace.event_table import VIEWS

    if not query:
        columns = db.execute("DESCRIBE events").fetchall()
        views = [f"{name}: {what}" for name, (what, _) in VIEWS.items()]
        described = table(["column", "type"], [c[:2] for c in columns])
        return "\n".join(["Views:", *views, "", "Columns of events:", described])
    result = db.execute(query)
    names, rows = [d[0] for d in result.description], result.fetchall()
    if as_json:
        return json.dumps({"columns": names, "rows": [[None if x != x else x for x in r] for r in rows]}, default=str)
    return table(names, [["NULL" if x is None else str(x) for x in r] for r in rows], use_color())


def export(args: argparse.Namespace) -> int:
    """``profkit export RUN``: an events table (and a summary) beside every trace of the local run that lacks one."""
    from lightning_profkit.trace.event_table import available

    if is_url(args.run):
        raise CommandError(f"{args.run}: `profkit export` writes beside local traces; copy the run here first")
    if not available():
        raise CommandError(f"`profkit export` needs pyarrow: {SQL_NEEDS}")
    read = read_folder(trace_dir_of(args.run), args.jobs, tables=True, progress=Progress.on(sys.stderr))
    say(f"wrote {len(read.tables)} events table(s); {len(read.summaries) - len(read.tables)} trace(s) had one already")
    return exit_status(read.left_out)


def _store_tables(run: str, local: str, left_out: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The events tables of the traces on the store at ``run``, copied into ``local``, and those written there for the
    traces that had none (then put beside each trace), each by the name it goes by."""
    from lightning_profkit.store import files_under
    from lightning_profkit.trace.load import load
    from lightning_profkit.trace.summary import summarize_trace

    found = files_under(run, TRACE_SUFFIXES + tuple(t + EVENTS for t in TRACE_SUFFIXES))
    if not found:
        raise CommandError(f"{run}: no trace files (*.pt.trace.json[.gz]) there")
    listed, tables = set(found), [p for p in found if p.endswith(EVENTS)]
    untabled = [p for p in found if not p.endswith(EVENTS) and p + EVENTS not in listed]
    copies = dict(zip(copy_here(run, tables, local, EVENTS), tables))
    made = {}
    for copy, url in zip(copy_here(run, untabled, local, TRACE_SUFFIXES[1]) if untabled else [], untabled):
        try:
            loaded = load(copy)
            write_table(copy, summarize_trace(url, loaded), loaded, url)
        except TraceError as err:
            left_out.append(f"{url}: {str(err).partition(': ')[2]}")
            continue
        made[copy + EVENTS] = url + EVENTS
    with contextlib.suppress(StoreError):  # a cache: the next query writes them again
        put([[table, url] for table, url in made.items()])
    return copies, made
