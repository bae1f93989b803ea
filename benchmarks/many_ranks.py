"""A run of many ranks: the first look (traces parsed, sidecars written), the second look (sidecars read), the
events tables written by `profkit export`, and a DuckDB query over them (`profkit sql`); on local disk and on a
moto S3 server on 127.0.0.1.

Each rank's trace is the first step of a real A100 trace (``control.json.gz``: its events inside the first
``ProfilerStep``), with its ``distributedInfo`` rank set; one rank is planted slow (every time in its trace
stretched by ``--stretch``). Every command runs as a fresh process of the installed console script (see
``summary_speed.py``), once timed and once sampled for peak memory (the processes it started included); the
sidecars are removed before each first look. Each look must name the planted rank: the summary's verdict and the
query both.

    python benchmarks/many_ranks.py [--ranks 1024] [--slow 737] [--stretch 1.3] [--no-s3] [--no-local]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from summary_speed import ENV, TRACES, installed_copy, run  # noqa: E402

SOURCE = os.path.join(TRACES, "hta", "trace_diff_control", "control.json.gz")
WINDOW = "epoch=0000-batch=001009"
QUERY = "SELECT rank FROM ranks ORDER BY step_ms DESC LIMIT 1"


def first_step(source: str) -> dict:
    """The trace of ``source``'s first ProfilerStep: its metadata and the events that start inside that step."""
    with gzip.open(source, "rb") as f:
        doc = json.load(f)
    step = min((e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")),
               key=lambda e: e["ts"])
    start, end = step["ts"], step["ts"] + step["dur"]
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "M" or start <= e.get("ts", -1) < end]
    return doc


def stretched(doc: dict, factor: float) -> dict:
    """``doc`` with every time after its first event's ``factor`` times as long (a slower rank)."""
    t0 = min(e["ts"] for e in doc["traceEvents"] if "ts" in e)
    events = []
    for e in doc["traceEvents"]:
        e = dict(e)
        if "ts" in e:
            e["ts"] = t0 + (e["ts"] - t0) * factor
        if "dur" in e:
            e["dur"] = e["dur"] * factor
        events.append(e)
    return {**doc, "traceEvents": events}


def make_run(root: str, ranks: int, slow: int, stretch: float) -> tuple[int, int]:
    """Write the run's traces under ``root/profiler/WINDOW``; returns their JSON and gzip bytes in all."""
    window = os.path.join(root, "profiler", WINDOW)
    os.makedirs(window)
    base = first_step(SOURCE)
    texts = {False: json.dumps(base), True: json.dumps(stretched(base, stretch))}
    json_bytes = gz_bytes = 0
    for rank in range(ranks):
        text = texts[rank == slow].replace('"rank": 3, "world_size": 8', f'"rank": {rank}, "world_size": {ranks}')
        data = gzip.compress(text.encode(), compresslevel=1)
        with open(os.path.join(window, f"host{rank // 8}_rank{rank}.1.pt.trace.json.gz"), "wb") as f:
            f.write(data)
        json_bytes, gz_bytes = json_bytes + len(text), gz_bytes + len(data)
    return json_bytes, gz_bytes


def remove(root: str, suffix: str) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(suffix):
                os.remove(os.path.join(folder, name))


class Moto:
    """moto's S3 server on a free port of 127.0.0.1, stopped by its pid."""

    def __init__(self, log: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{port}"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                         stdout=out, stderr=subprocess.STDOUT)
        for _ in range(600):
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=5).close()
                break
            except OSError:
                time.sleep(0.1)
        self.env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        os.environ.update(self.env)
        ENV.update(self.env)
        import s3fs

        self.fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
        self.fs.mkdir("runs")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def look(profkit: str, target: str, slow: int, clear=None) -> tuple[float, float]:
    """Seconds and peak MiB of `profkit summary --json TARGET` (``clear()`` before each run); checks its verdict."""
    timings = []
    for sample in (False, True):
        if clear:
            clear()
        timings.append(run([profkit, "summary", "--json", target], sample))
    out = subprocess.run([profkit, "summary", "--json", target], capture_output=True, text=True, env=ENV, check=True)
    if out.stderr:  # what the look said (a sidecar the store did not give, say)
        print(out.stderr.strip(), flush=True)
    verdict = json.loads(out.stdout)["ranks"]["verdict"]
    assert verdict["slowest"] == slow, verdict
    return timings[0][0], timings[1][1]


def query(profkit: str, target: str, slow: int) -> tuple[float, float]:
    timings = [run([profkit, "sql", target, QUERY], sample) for sample in (False, True)]
    out = subprocess.run([profkit, "sql", target, QUERY, "--json"], capture_output=True, text=True, env=ENV, check=True)
    assert json.loads(out.stdout)["rows"] == [[slow]], out.stdout
    return timings[0][0], timings[1][1]


class Rows(list):
    """The table's rows, each printed as it comes (a failure later keeps what was measured)."""

    def append(self, row: tuple) -> None:
        super().append(row)
        print(row, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--slow", type=int, default=737)
    parser.add_argument("--stretch", type=float, default=1.3)
    parser.add_argument("--no-s3", action="store_true")
    parser.add_argument("--no-local", action="store_true", help="the store's looks only")
    args = parser.parse_args()
    rows = Rows()
    with tempfile.TemporaryDirectory(prefix="many-ranks-") as folder:
        profkit = os.path.join(installed_copy(folder), "profkit")
        root = os.path.join(folder, "run")
        json_bytes, gz_bytes = make_run(root, args.ranks, args.slow, args.stretch)
        print(f"{args.ranks} ranks, rank {args.slow} {args.stretch}x slower: {json_bytes / 1e6:.0f} MB of JSON, "
              f"{gz_bytes / 1e6:.0f} MB gzipped, {len(first_step(SOURCE)['traceEvents'])} events a trace", flush=True)
        if not args.no_local:
            rows.append(("local", "first look: summary parses, writes sidecars",
                         *look(profkit, root, args.slow, lambda: remove(root, ".profkit"))))
            rows.append(("local", "second look: summary reads sidecars", *look(profkit, root, args.slow)))
        start = time.perf_counter()
        subprocess.run([profkit, "export", root], check=True, env=ENV, capture_output=True)
        rows.append(("local", "profkit export (parse, write Parquet)", time.perf_counter() - start, None))
        parquet = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs
                      if f.endswith(".parquet"))
        if not args.no_local:
            rows.append(("local", "profkit sql: slowest rank", *query(profkit, root, args.slow)))
        if not args.no_s3:
            moto = Moto(os.path.join(folder, "moto.log"))
            try:
                url = "s3://runs/run"
                local = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if not f.endswith(".profkit")]
                moto.fs.put(local, [url + p[len(root):] for p in local])
                def clear() -> None:
                    kept = [p for p in moto.fs.find(url) if p.endswith(".profkit")]
                    if kept:
                        moto.fs.rm(kept)

                first = look(profkit, url, args.slow, clear)
                rows.append(("s3", "first look: summary parses, writes sidecars", *first))
                rows.append(("s3", "second look: summary reads sidecars", *look(profkit, url, args.slow)))
                rows.append(("s3", "profkit sql: slowest rank", *query(profkit, url, args.slow)))
            finally:
                moto.stop()
    print(f"\n{datetime.date.today()}, {os.cpu_count()} CPUs; Parquet in all: {parquet / 1e6:.0f} MB\n")
    print("| where | what | seconds | peak MiB |\n|---|---|---:|---:|")
    for where, what, seconds, mib in rows:
        print(f"| {where} | {what} | {seconds:.1f} | {'' if mib is None else f'{mib:.0f}'} |")


if __name__ == "__main__":
    main()
