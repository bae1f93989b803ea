"""``profkit summary PATH --scheduler ADDRESS``: the traces without a fresh sidecar parsed on a Dask cluster, one
per task, each sidecar put back beside its trace (docs/many-ranks.md, Beyond one machine)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any

from lightning_profkit.cli.shared import CommandError, say
from lightning_profkit.trace.file import JSON_SUFFIXES, TRACE_SUFFIXES, natural

CONNECT_TIMEOUT_S = 10  # a scheduler that has not answered by then is taken as not there
DASK_NEEDS = "pip install distributed"


def summary_of(url: str) -> dict[str, Any]:
    """On a worker: the summary of the trace at ``url`` (or at a local path), its sidecar written beside it."""
    from lightning_profkit import store
    from lightning_profkit.trace import sidecar
    from lightning_profkit.trace.load import load
    from lightning_profkit.trace.summary import summarize_trace

    if not store.is_url(url):
        summary = summarize_trace(url, load(url, jobs=1))
        with contextlib.suppress(OSError):  # a folder the worker may not write: parsed again at the next look
            sidecar.keep(url, summary)
        return summary
    with tempfile.TemporaryDirectory(prefix="profkit-") as folder:
        local = os.path.join(folder, url.rsplit("/", 1)[-1])
        store.fetch_file(url, local)
        summary = sidecar.with_place(url, summarize_trace(local, load(local, jobs=1)))
        store.write(sidecar.sidecar_of(url), sidecar.dumps(summary, os.path.getsize(local)))
    return summary


def cluster_summaries(url: str, scheduler: str, left_out: list[str]) -> list[dict[str, Any]]:
    """The summary of every trace under ``url`` (or a local path), from its sidecar or parsed on the cluster at
    ``scheduler``; ``left_out`` gains a line for each trace that could not be read."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise CommandError(f"--scheduler needs Dask's distributed: {DASK_NEEDS}") from None
    from lightning_profkit.store import is_url, survey
    from lightning_profkit.trace import sidecar
    from lightning_profkit.trace.file import find_traces

    if is_url(url):
        found = survey(url, TRACE_SUFFIXES + JSON_SUFFIXES)
        if found.unread:
            say(found.unread)
        out = [sidecar.with_place(found.fs.unstrip_protocol(p), s) for p, s in found.known.items()]
        todo = [found.fs.unstrip_protocol(p) for p in found.found if p not in found.known]
    else:  # a local path: the sidecars read here
        read = {p: sidecar.read(p) for p in find_traces(url)}
        out = [sidecar.with_place(p, s) for p, s in read.items() if s is not None]
        todo = [p for p, s in read.items() if s is None]
    if todo:
        with Client(scheduler, timeout=CONNECT_TIMEOUT_S) as client:
            try:
                client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
            except TimeoutError:
                raise OSError(f"no worker joined the scheduler within {CONNECT_TIMEOUT_S} s") from None
            if not is_url(url):
                check_shared(client, url, todo[0])
            futures = client.map(summary_of, todo, pure=False)
            named = dict(zip(futures, todo))
            for future in as_completed(futures):
                try:
                    out.append(future.result())
                except Exception as err:  # a worker's failure, on its trace only
                    text = str(err)
                    left_out.append(text if text.startswith(named[future]) else f"{named[future]}: could not be read "
                                    f"({type(err).__name__}: {text})")
    return sorted(out, key=lambda s: natural(s["path"]))


def check_shared(client: Any, path: str, trace: str) -> None:
    """Every worker of ``client`` sees ``trace`` (under the local ``path``) as this process does: the same size."""
    size = os.stat(trace).st_size
    seen = client.run(os.path.getsize, trace, on_error="return")  # an error: a worker that sees no such file
    blind = sorted(worker for worker, got in seen.items() if got != size)
    if blind:
        raise CommandError(f"{path}: {len(blind)} of the cluster's {len(seen)} workers do not see this folder as "
                              f"this machine does (the first, {blind[0]}, found {trace} missing or of another size): "
                              "give a path on a filesystem every worker shares, or the run's URL on object storage")
