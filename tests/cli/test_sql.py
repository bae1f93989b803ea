"""`profkit export` and `profkit sql` on a small run of real GPU traces: the events tables against a count over the
raw traces, and the figures of `profkit sql`, of the sidecars and of parsing again, equal."""

import gzip
import json
import os
import shutil
import subprocess
import sys
from collections import Counter

import pytest

PROFKIT = os.path.join(os.path.dirname(sys.executable), "profkit")
TRACES = ["kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
          "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"]

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")


def profkit(*args):
    return subprocess.run([PROFKIT, *map(str, args)], capture_output=True, text=True, timeout=300)


def rows(run, query):
    done = profkit("sql", run, query, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["rows"]


@pytest.fixture
def run(tmp_path, gpu_traces):
    """Two windows of two ranks each: run/profiler/step=…/w_rank<N>.1.pt.trace.json.gz."""
    for first in (1, 11):
        window = tmp_path / "version_0" / "profiler" / f"step={first:06d}-{first + 2:06d}-epoch=0"
        window.mkdir(parents=True)
        for rank, trace in enumerate(TRACES):
            shutil.copy(gpu_traces / trace, window / f"w_rank{rank}.1.pt.trace.json.gz")
    return tmp_path / "version_0"


def test_sidecars_parsing_and_sql_give_the_same_figures(run):
    parsed = profkit("summary", "--json", run)
    assert parsed.returncode == 0, parsed.stderr
    from_sidecars = profkit("summary", "--json", run)
    assert json.loads(from_sidecars.stdout) == json.loads(parsed.stdout)
    exported = profkit("export", run)
    assert exported.returncode == 0
    assert exported.stderr == "profkit: wrote 4 events table(s); 0 trace(s) had one already\n"
    traces = json.loads(parsed.stdout)["traces"]

    # every complete event of the raw traces is a row, labelled with its run, window and rank
    counted = rows(run, "SELECT window_name, rank, count(*) FROM events GROUP BY ALL ORDER BY ALL")
    raw = {t["path"]: sum(1 for e in json.load(gzip.open(t["path"]))["traceEvents"] if e.get("ph") == "X" and "ts" in e)
           for t in traces}
    assert counted == sorted([t["window"], t["rank"], raw[t["path"]]] for t in traces)
    assert rows(run, "SELECT DISTINCT run FROM events") == [["version_0"]]

    for t in traces:
        where = f"WHERE window_name = '{t['window']}' AND rank = {t['rank']}"
        (steps,) = rows(run, f"SELECT count(*), sum(dur_us) FROM steps {where}")
        assert steps == [t["host"]["steps"], pytest.approx(t["host"]["step_time_us"], rel=1e-12)]
        for view, table in (("operators", "cpu"), ("kernels", "device")):
            got = {name: (calls, total) for name, calls, total in
                   rows(run, f"SELECT name, count(*), sum(dur_us) FROM {view} {where} GROUP BY name")}
            want = {r["name"]: (r["calls"], pytest.approx(r["total_us"], rel=1e-9)) for r in t["operators"][table]}
            assert got == want, view
    # each GPU event's step is its launch's: as many kernels in steps as launches there, less those in no step
    in_steps = rows(run, "SELECT count(*) FROM kernels WHERE step >= 0")[0][0]
    assert 0 < in_steps <= rows(run, "SELECT count(*) FROM kernels")[0][0]
    per_rank = rows(run, "SELECT rank, traces, steps FROM ranks")
    assert per_rank == [[0, 2, 2 * traces[0]["host"]["steps"]], [1, 2, 2 * traces[1]["host"]["steps"]]]


def test_a_first_query_writes_the_tables_and_what_sql_cannot_read_is_said(run, gpu_traces):
    first = profkit("sql", run, "SELECT count(DISTINCT window_name) FROM events")
    assert first.returncode == 0 and first.stdout.split()[-1] == "2", first.stderr
    assert first.stderr == "profkit: wrote the events tables of 4 trace(s); the next query reads them\n"
    again = profkit("sql", run, "SELECT count(DISTINCT window_name) FROM events")
    assert (again.returncode, again.stderr) == (0, "")  # kept beside the traces
    bad = profkit("sql", run, "SELECT nme FROM events")
    assert bad.returncode == 1 and bad.stderr.startswith("profkit: the query failed: Binder Error:")
    extra = run / "profiler" / "step=000021-000023-epoch=1"
    extra.mkdir()
    shutil.copy(gpu_traces / TRACES[0], extra / "w_rank0.1.pt.trace.json.gz")
    (extra / "w_rank1.1.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [')[:-8])
    partial = profkit("sql", run, "SELECT count(DISTINCT window_name) FROM events")
    assert partial.returncode == 3 and partial.stdout.split()[-1] == "3", partial.stderr  # what there is
    wrote, unread = partial.stderr.splitlines()
    assert wrote == "profkit: wrote the events tables of 1 trace(s); the next query reads them"
    assert unread.startswith(f"profkit: {extra / 'w_rank1.1.pt.trace.json.gz'}: not a complete gzip file")
    assert unread.endswith("; left out"), partial.stderr
    names = Counter(line.split(":")[0] for line in profkit("sql", run).stdout.splitlines()[1:6])
    assert set(names) == {"events", "steps", "operators", "kernels", "ranks"}
    (extra / "w_rank1.1.pt.trace.json.gz").unlink()
    damaged = next((run / "profiler").glob("*/*.parquet"))
    damaged.write_bytes(b"PAR1 not a table PAR1")  # written again from its trace
    healed = profkit("sql", run, "SELECT count(DISTINCT window_name) FROM events")
    assert (healed.returncode, healed.stdout.split()[-1]) == (0, "3"), healed.stderr
    assert healed.stderr == "profkit: wrote the events tables of 1 trace(s); the next query reads them\n"
