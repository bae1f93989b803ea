"""2-process DDP on CPU: per-rank traces in one window folder, metrics reduced across ranks."""

import csv
import glob
import json
import os
import subprocess
import sys

import pytest

from conftest import read_trace, profiler_steps, trace_files

from lightning_profkit.companions import SIDECAR


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_ddp_two_ranks(tmp_path, strategy):
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run(
        [sys.executable, os.path.join(here, "ddp_script.py"), str(tmp_path), strategy],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert output.count("lightning_profkit: profiling the fit's steps 3-5") == 1  # one plan line, rank zero
    assert "USDT:" not in output
    paths = trace_files(tmp_path)
    # 40 samples / 2 ranks / batch 2 = 10 steps per epoch; the first rolling check (steps 0-4) alerts, and
    # every rank records the same capture window once the scheduled one (3-5) is done
    by_folder = {}
    for p in paths:
        by_folder.setdefault(os.path.basename(os.path.dirname(p)), []).append(p)
    assert set(by_folder) == {"epoch=0000-batch=000003-000005", "epoch=0000-batch=000006-000008"}
    for folder, files in by_folder.items():
        workers = sorted(os.path.basename(p).split(".")[0] for p in files)
        assert len(workers) == 2 and workers[0].endswith("_rank0") and workers[1].endswith("_rank1")
        first, last = map(int, folder.split("batch=")[1].split("-")[:2])  # epoch 0: batch is step
        assert all(profiler_steps(read_trace(p)) == list(range(first, last + 1)) for p in files)

    # one alert, on rank zero only, naming the slow rank and pointing to the capture
    assert not os.path.exists(os.path.join(str(tmp_path), "alerts-rank1.jsonl"))
    with open(os.path.join(str(tmp_path), "alerts-rank0.jsonl")) as f:
        (alert,) = [json.loads(line) for line in f]
    assert alert["worst_rank"] == 1 and alert["step"] == 4 and alert["recording"] == [6, 8]  # sent as it fired
    named = "trace of the steps after the alert (epoch 0, batches 0-4):\n  "
    assert output.count(named) == 1 and f"{named}{tmp_path}" in output  # rank zero, once the trace is written
    assert output.split(named)[1].split()[0].endswith("epoch=0000-batch=000006-000008")
    # its advice rests on what rank 1's loading did
    assert "measured: rank 1's training process: on or waiting for a CPU" in alert["advice"][1], alert["advice"]
    assert output.count("of the training time on rank 1 (alert at") == 1
    assert output.count("windows of rank 0") == 1  # one end-of-fit summary, from rank zero
    # ... which names the slow rank and its reason, as `profkit summary` does from the traces
    assert output.count("straggler: rank 1,") == 1 and "it waits on data" in output, output[-3000:]
    exe = os.path.join(os.path.dirname(sys.executable), "profkit")
    done = subprocess.run([exe, "summary", "--json", os.path.dirname(paths[0].rsplit(os.sep, 1)[0])],
                          capture_output=True, text=True, timeout=120)
    ranks = json.loads(done.stdout)["ranks"]
    assert [r["rank"] for r in ranks["per_rank"]] == [0, 1] and [r["traces"] for r in ranks["per_rank"]] == [2, 2]
    found = ranks["verdict"]
    assert (found["slowest"], found["reason"], [w["rank"] for w in found["waiting"]]) == (1, "data", [0]), found


def test_ddp_only_rank_one_profiles(tmp_path):
    """Ranks that do not profile still take part in every exchange: no deadlock, same metrics, one alert."""
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run(
        [sys.executable, os.path.join(here, "ddp_script.py"), str(tmp_path), "ddp", "1"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    workers = sorted(os.path.basename(p).split(".")[0] for p in trace_files(tmp_path))
    assert workers and all(w.endswith("_rank1") for w in workers)
    (metrics,) = glob.glob(os.path.join(str(tmp_path), "csv", "*", "metrics.csv"))
    with open(metrics) as f:
        rows = [r for r in csv.DictReader(f) if r.get("profkit/data_wait_ratio")]
    assert len(rows) == 2 and all(float(r["profkit/data_wait_worst_rank"]) == 1.0 for r in rows)
    with open(os.path.join(str(tmp_path), "alerts-rank0.jsonl")) as f:
        (alert,) = [json.loads(line) for line in f]
    assert alert["worst_rank"] == 1 and alert["trace_dir"] is None  # rank zero records no capture

    (metrics,) = glob.glob(os.path.join(str(tmp_path), "csv", "*", "metrics.csv"))
    with open(metrics) as f:
        rows = [r for r in csv.DictReader(f) if r.get("profkit/data_wait_ratio")]
    assert len(rows) == 2
    for row in rows:
        mean, worst = float(row["profkit/data_wait_ratio"]), float(row["profkit/data_wait_ratio_max"])
        assert 0 < mean < worst <= 1
        assert float(row["profkit/data_wait_worst_rank"]) == 1.0  # rank 1 has the slow data


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_nodes(root, dirpath=None):
    """Two "nodes" on this machine: one process each, started as a cluster launcher starts them."""
    here = os.path.dirname(os.path.abspath(__file__))
    port, procs = free_port(), []
    for node in (0, 1):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NODE_RANK=str(node), LOCAL_RANK="0",
                   WORLD_SIZE="2")
        args = [sys.executable, os.path.join(here, "ddp_script.py"), str(root), "nodes", ""] + ([dirpath] if dirpath else [])
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        outputs = [p.communicate(timeout=300)[0] for p in procs]
    finally:  # a node that hangs is not left behind
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    return outputs


def windows_and_workers(paths):
    by_folder = {}
    for p in paths:
        by_folder.setdefault(p.replace("\\", "/").split("/")[-2], []).append(p.replace("\\", "/").split("/")[-1].split(".")[0])
    return {folder: sorted(w.rsplit("_", 1)[1] for w in workers) for folder, workers in by_folder.items()}


WINDOWS = {"epoch=0000-batch=000003-000005": ["rank0", "rank1"], "epoch=0000-batch=000006-000008": ["rank0", "rank1"]}


def test_two_nodes_write_into_the_same_window_folders(tmp_path):
    outputs = run_nodes(tmp_path)
    assert windows_and_workers(trace_files(tmp_path)) == WINDOWS
    assert sum(o.count("lightning_profkit: profiling the fit's steps 3-5") for o in outputs) == 1  # global rank zero only
    assert all("process groups after fit: 1" in o for o in outputs)  # ours destroyed at teardown


def test_two_nodes_write_into_the_same_window_folders_on_s3(tmp_path, s3_server):
    run_nodes(tmp_path, "s3://runs/nodes/profiler")
    keys = s3_server.keys("nodes/profiler")
    traces = [k for k in keys if k.endswith(".pt.trace.json.gz")]
    assert windows_and_workers(traces) == WINDOWS and keys == sorted(k for t in traces for k in (t, t + SIDECAR))
    assert trace_files(tmp_path) == []
