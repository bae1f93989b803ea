"""``profkit summary URL --scheduler ADDRESS``: the traces of a run on object storage that have no fresh sidecar are
parsed by the workers of a Dask distributed cluster, one trace per task; each worker reads its trace from the
store and puts the trace's sidecar back beside it, so that the next look needs no cluster.

The workers need lightning_profkit installed and the store's credentials (their environment, as fsspec reads it).
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

from lightning_profkit.trace.file import natural

CONNECT_TIMEOUT_S = 10  # a scheduler that has not answered by then is taken as not there


def summary_of(url: str) -> dict[str, Any]:
    """On a worker: the summary of the trace at ``url``, its sidecar written beside it on the store."""
    from lightning_profkit import store
    from lightning_profkit.trace import sidecar
    from lightning_profkit.trace.load import load
    from lightning_profkit.trace.summary import summarize_trace

    with tempfile.TemporaryDirectory(prefix="profkit-") as folder:
        local = os.path.join(folder, url.rsplit("/", 1)[-1])
        store.fetch_file(url, local)
        summary = sidecar.with_place(url, summarize_trace(local, load(local, jobs=1)))
        store.write(sidecar.sidecar_of(url), sidecar.dumps(summary, os.path.getsize(local)))
    return summary


def cluster_summaries(url: str, scheduler: str, suffixes: tuple[str, ...], left_out: list[str]) -> list[dict[str, Any]]:
    """The summary of every trace under ``url``: from its sidecar, or parsed on the cluster at ``scheduler``;
    ``left_out`` gains a line for each trace that could not be read."""
    from distributed import Client, as_completed

    from lightning_profkit.store import survey
    from lightning_profkit.trace import sidecar

    found = survey(url, suffixes)
    if found.unread:
        print(f"profkit: {found.unread}", file=sys.stderr)
    out = [sidecar.with_place(found.fs.unstrip_protocol(p), s) for p, s in found.known.items()]
    todo = [found.fs.unstrip_protocol(p) for p in found.found if p not in found.known]
    if todo:
        with Client(scheduler, timeout=CONNECT_TIMEOUT_S) as client:
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
