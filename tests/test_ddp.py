"""2-process DDP on CPU: per-rank traces in one window folder, metrics reduced across ranks."""

import csv
import glob
import os
import subprocess
import sys

from conftest import read_trace, profiler_steps, trace_files


def test_ddp_two_ranks(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run(
        [sys.executable, os.path.join(here, "ddp_script.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert output.count("lightning_profkit: profiling steps 3-5") == 1  # one plan line, rank zero
    assert "USDT:" not in output
    paths = trace_files(tmp_path)
    folders = {os.path.basename(os.path.dirname(p)) for p in paths}
    assert folders == {"epoch=0-step=3-5"}  # 40 samples / 2 ranks / batch 2 = 10 steps per epoch
    workers = sorted(os.path.basename(p).split(".")[0] for p in paths)
    assert len(workers) == 2 and workers[0].endswith("_rank0") and workers[1].endswith("_rank1")
    assert all(profiler_steps(read_trace(p)) == [3, 4, 5] for p in paths)

    (metrics,) = glob.glob(os.path.join(str(tmp_path), "csv", "*", "metrics.csv"))
    with open(metrics) as f:
        rows = [r for r in csv.DictReader(f) if r.get("profkit/data_wait_ratio")]
    assert len(rows) == 2
    for row in rows:
        mean, worst = float(row["profkit/data_wait_ratio"]), float(row["profkit/data_wait_ratio_max"])
        assert 0 < mean < worst <= 1
        assert float(row["profkit/data_wait_worst_rank"]) == 1.0  # rank 1 has the slow data
