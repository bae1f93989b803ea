"""`profkit summary URL --scheduler ADDRESS` on a real Dask cluster (a LocalCluster of two worker processes, in a
process the test starts and stops by its pid) reading from a real S3-protocol server: the figures of parsing here, the sidecars put back."""

import contextlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import stop_session

pytest.importorskip("distributed")

PROFKIT = os.path.join(os.path.dirname(sys.executable), "profkit")
TRACES = ["kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
          "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"]


# a scheduler and two worker processes of one thread, in a process of their own (the cluster's threads would stay
# in the test's process); it prints the scheduler's address and ends when its input does
CLUSTER = ("import sys; from distributed import LocalCluster; "
           "cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None); "
           "print(cluster.scheduler_address, flush=True); sys.stdin.read(); cluster.close()")


@contextlib.contextmanager
def local_cluster():
    proc = subprocess.Popen([sys.executable, "-c", CLUSTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        address = proc.stdout.readline().strip()
        assert address.startswith("tcp://"), proc.communicate(timeout=60)
        yield address
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        finally:
            stop_session(proc)


def profkit(*args):
    return subprocess.run([PROFKIT, *map(str, args)], capture_output=True, text=True, timeout=300)


def test_a_cluster_parses_the_traces_the_store_holds_and_leaves_their_sidecars(tmp_path, s3_server, gpu_traces):
    window = tmp_path / "run" / "step=000001-000003-epoch=0"
    window.mkdir(parents=True)
    for rank, trace in enumerate(TRACES):
        shutil.copy(gpu_traces / trace, window / f"w_rank{rank}.1.pt.trace.json.gz")
    (window / "w_rank2.1.pt.trace.json.gz").write_bytes(b"not a trace")
    here = profkit("summary", "--json", tmp_path / "run")  # parsed here: the figures to compare with
    for name in os.listdir(window):
        if name.endswith(".gz"):  # the traces only: the sidecars written here stay here
            s3_server.fs.put_file(str(window / name), f"runs/run/{window.name}/{name}")
    url = "s3://runs/run"
    with local_cluster() as address:
        done = profkit("summary", "--json", url, "--scheduler", address)
    assert done.returncode == 3, done.stderr  # the broken trace is left out, named
    assert f"{url}/{window.name}/w_rank2.1.pt.trace.json.gz: " in done.stderr
    got, want = json.loads(done.stdout), json.loads(here.stdout)
    assert len(got["traces"]) == len(want["traces"]) == 2
    for a, b in zip(got["traces"], want["traces"]):
        assert a["path"] == b["path"].replace(str(tmp_path), "s3://runs")
        assert {**a, "path": None} == {**b, "path": None}
    assert got["aggregate"] == want["aggregate"]
    # each sidecar is on the store: the next look needs no cluster
    assert sorted(k for k in s3_server.keys("run") if k.endswith(".profkit")) == [
        f"run/{window.name}/w_rank{r}.1.pt.trace.json.gz.profkit" for r in (0, 1)]
    again = profkit("summary", "--json", url)
    assert json.loads(again.stdout)["traces"] == got["traces"]


def test_the_scheduler_is_for_object_storage_and_must_answer(tmp_path, s3_server):
    local = profkit("summary", tmp_path, "--scheduler", "tcp://127.0.0.1:1")
    assert local.returncode == 1 and "--scheduler reads traces from object storage" in local.stderr
    s3_server.fs.pipe_file("runs/x/a.pt.trace.json.gz", b"x")
    nobody = profkit("summary", "s3://runs/x", "--scheduler", "tcp://127.0.0.1:1")
    assert nobody.returncode == 1, nobody.stderr
    assert nobody.stderr.startswith("profkit: tcp://127.0.0.1:1: no Dask scheduler answers"), nobody.stderr
