"""2-process DDP on CPU: per-rank traces in one window folder, metrics reduced across ranks."""

import csv
import glob
import json
import os
import subprocess
import sys

import pytest

from conftest import read_trace, profiler_steps, trace_files


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_ddp_two_ranks(tmp_path, strategy):
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run(
        [sys.executable, os.path.join(here, "ddp_script.py"), str(tmp_path), strategy],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert output.count("lightning_profkit: profiling steps 3-5") == 1  # one plan line, rank zero
    assert "USDT:" not in output
    paths = trace_files(tmp_path)
    # 40 samples / 2 ranks / batch 2 = 10 steps per epoch; the first rolling check (steps 0-4) alerts, and
    # every rank records the same capture window once the scheduled one (3-5) is done
    by_folder = {}
    for p in paths:
        by_folder.setdefault(os.path.basename(os.path.dirname(p)), []).append(p)
    assert set(by_folder) == {"step=000003-000005-epoch=0", "step=000006-000008-epoch=0"}
    for folder, files in by_folder.items():
        workers = sorted(os.path.basename(p).split(".")[0] for p in files)
        assert len(workers) == 2 and workers[0].endswith("_rank0") and workers[1].endswith("_rank1")
        first, last = map(int, folder.split("step=")[1].split("-")[:2])
        assert all(profiler_steps(read_trace(p)) == list(range(first, last + 1)) for p in files)

    # one alert, on rank zero only, naming the slow rank and pointing to the capture
    assert not os.path.exists(os.path.join(str(tmp_path), "alerts-rank1.jsonl"))
    with open(os.path.join(str(tmp_path), "alerts-rank0.jsonl")) as f:
        (alert,) = [json.loads(line) for line in f]
    assert alert["worst_rank"] == 1 and alert["step"] == 4 and alert["trace_dir"].endswith("step=000006-000008-epoch=0")
    assert output.count("was spent waiting for the DataLoader on rank 1") == 1
    assert output.count("window(s) of rank 0") == 1  # one end-of-fit summary, from rank zero


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
