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
def local_cluster(cwd=None):
    proc = subprocess.Popen([sys.executable, "-c", CLUSTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=cwd)
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


def profkit(*args, cwd=None):
    return subprocess.run([PROFKIT, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)


def a_run(folder, gpu_traces):
    """A window of two real traces and a damaged one under ``folder``; returns the window's folder."""
    window = folder / "step=000001-000003-epoch=0"
    window.mkdir(parents=True)
    for rank, trace in enumerate(TRACES):
        shutil.copy(gpu_traces / trace, window / f"w_rank{rank}.1.pt.trace.json.gz")
    (window / "w_rank2.1.pt.trace.json.gz").write_bytes(b"not a trace")
    return window


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


def test_a_cluster_parses_a_folder_its_workers_share_and_leaves_the_sidecars_there(tmp_path, gpu_traces):
    """A cluster's shared filesystem (NFS, Lustre, GPFS) is a local path every worker sees: read there, in place."""
    window = a_run(tmp_path / "run", gpu_traces)
    here = profkit("summary", "--json", tmp_path / "run")  # parsed here: the figures to compare with
    for sidecar in window.glob("*.profkit"):
        sidecar.unlink()
    with local_cluster() as address:
        done = profkit("summary", "--json", tmp_path / "run", "--scheduler", address)
    assert done.returncode == 3 and f"{window}/w_rank2.1.pt.trace.json.gz: " in done.stderr, done.stderr
    got, want = json.loads(done.stdout), json.loads(here.stdout)
    assert len(got["traces"]) == 2 and got == want
    assert sorted(p.name for p in window.glob("*.profkit")) == [f"w_rank{r}.1.pt.trace.json.gz.profkit" for r in (0, 1)]


def test_a_folder_the_workers_see_otherwise_is_refused_naming_it(tmp_path, gpu_traces):
    """/proc/self/cwd is each process's own folder: the workers, started elsewhere, find nothing there, or another
    file of the same name."""
    (tmp_path / "here").mkdir()
    (tmp_path / "there").mkdir()
    a_run(tmp_path / "here" / "run", gpu_traces)
    with local_cluster(cwd=tmp_path / "there") as address:
        missing = profkit("summary", "/proc/self/cwd/run", "--scheduler", address, cwd=tmp_path / "here")
        other = a_run(tmp_path / "there" / "run", gpu_traces)
        (other / "w_rank0.1.pt.trace.json.gz").write_bytes(b"another file")
        differs = profkit("summary", "/proc/self/cwd/run", "--scheduler", address, cwd=tmp_path / "here")
    for done in (missing, differs):
        assert done.returncode == 1 and done.stdout == "", done.stderr
        assert done.stderr.startswith("profkit: /proc/self/cwd/run: 2 of the cluster's 2 workers do not see this "
                                      "folder as this machine does"), done.stderr
    assert not list((tmp_path / "here").rglob("*.profkit"))


def test_the_scheduler_must_answer(tmp_path, s3_server):
    s3_server.fs.pipe_file("runs/x/a.pt.trace.json.gz", b"x")
    nobody = profkit("summary", "s3://runs/x", "--scheduler", "tcp://127.0.0.1:1")
    assert nobody.returncode == 1, nobody.stderr
    assert nobody.stderr.startswith("profkit: tcp://127.0.0.1:1: no Dask scheduler answers"), nobody.stderr


def test_without_distributed_the_command_says_what_to_install(tmp_path, monkeypatch, capsys):
    from lightning_profkit.cli import main

    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    assert main(["summary", str(tmp_path), "--scheduler", "tcp://127.0.0.1:1"]) == 1
    assert capsys.readouterr().err == "profkit: --scheduler needs Dask's distributed: pip install distributed\n"
