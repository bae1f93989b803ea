"""`profkit summary s3://RUN --scheduler ADDRESS` on a Dask LocalCluster against `profkit summary s3://RUN` alone, and
the one worker option that matters here: Dask's default ``MALLOC_TRIM_THRESHOLD_=65536`` for its workers against
glibc's own default (the variable unset).

The run is ``many_ranks.py``'s (a step of a real A100 trace per rank, one rank slower) on a moto S3 server on
127.0.0.1. Each configuration runs in turn, interleaved, ``--repeats`` times, its sidecars removed before each run;
a cluster (2 worker processes of 1 thread: this machine's 2 cores) is started before its run and closed after, its
start not timed. The time is the command's wall time; every process (the command, the cluster's workers, moto) is
on this machine's 2 cores.

    python benchmarks/cluster.py [--ranks 64] [--repeats 2]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from many_ranks import Moto, make_run  # noqa: E402
from summary_speed import ENV  # noqa: E402

CONFIGS = ("no cluster", "cluster, Dask's MALLOC_TRIM_THRESHOLD_=65536", "cluster, MALLOC_TRIM_THRESHOLD_ unset")


def timed(profkit: str, url: str, config: str) -> float:
    import dask
    from distributed import LocalCluster

    if config == CONFIGS[0]:
        start = time.perf_counter()
        subprocess.run([profkit, "summary", "--json", url], check=True, env=ENV, capture_output=True)
        return time.perf_counter() - start
    trim = None if config == CONFIGS[2] else 65536
    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": trim}):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            start = time.perf_counter()
            subprocess.run([profkit, "summary", "--json", url, "--scheduler", cluster.scheduler_address], check=True,
                           env=ENV, capture_output=True)
            return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    profkit = os.path.join(os.path.dirname(sys.executable), "profkit")
    times: dict[str, list[float]] = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="cluster-") as folder:
        root = os.path.join(folder, "run")
        json_bytes, gz_bytes = make_run(root, args.ranks, 7, 1.3)
        moto = Moto(os.path.join(folder, "moto.log"))
        try:
            url = "s3://runs/run"
            local = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
            moto.fs.put(local, [url + p[len(root):] for p in local])
            for _ in range(args.repeats):
                for config in CONFIGS:
                    kept = [p for p in moto.fs.find(url) if p.endswith(".profkit")]
                    if kept:
                        moto.fs.rm(kept)
                    times[config].append(timed(profkit, url, config))
                    print(config, f"{times[config][-1]:.1f} s", flush=True)
        finally:
            moto.stop()
    print(f"\n{datetime.date.today()}, {os.cpu_count()} CPUs, {args.ranks} ranks ({json_bytes / 1e6:.0f} MB of JSON, "
          f"{gz_bytes / 1e6:.0f} MB gzipped), median of {args.repeats}\n")
    base = statistics.median(times[CONFIGS[0]])
    print("| configuration | seconds | against no cluster |\n|---|---:|---:|")
    for config in CONFIGS:
        median = statistics.median(times[config])
        print(f"| {config} | {median:.1f} | {median / base:.2f}x |")


if __name__ == "__main__":
    main()
