"""Operators' inclusive and self time by nesting, and kernels' time."""

import random

from conftest import records

from lightning_profkit.trace import operator_times as module
from lightning_profkit.trace.columns import columns
from lightning_profkit.trace.operator_times import operator_times


def test_operator_self_and_total_time():
    def ev(name, ts, dur, tid=1, cat="cpu_op"):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": tid}

    events = [
        ev("outer", 0, 100), ev("inner", 10, 30), ev("leaf", 15, 10), ev("inner", 50, 20),
        ev("cudaLaunchKernel", 55, 5, cat="cuda_runtime"), ev("outer", 0, 40, tid=2),
        ev("k", 60, 7, cat="kernel"), ev("k", 70, 3, cat="kernel"),
    ]
    got = operator_times(columns(records(events)))
    assert got["cpu"]["outer"] == {"calls": 2, "total_us": 140, "self_us": 50 + 40}
    assert got["cpu"]["inner"] == {"calls": 2, "total_us": 50, "self_us": 20 + 15}
    assert got["cpu"]["leaf"]["self_us"] == 10 and got["cpu"]["cudaLaunchKernel"]["self_us"] == 5
    assert got["device"]["k"] == {"calls": 2, "total_us": 10}


def nested(rng, tid, start, end, depth):
    """Spans of ``tid`` inside ``[start, end)``: some touching, some equal, some of no length, nested ``depth`` deep."""
    spans, t = [], start
    while depth and t < end:
        length = min(rng.choice([0, 1, 5, 40, 300]), end - t)
        spans.append({"ph": "X", "cat": "cpu_op", "name": f"op{rng.randrange(6)}", "ts": t, "dur": length, "pid": 0,
                      "tid": tid})
        if rng.random() < 0.1:
            spans.append(dict(spans[-1]))
        spans += nested(rng, tid, t, t + length, depth - 1)
        t += length + rng.choice([0, 0, 1, 7])
    return spans


def test_threads_longer_than_a_chunk_are_cut_where_none_of_their_spans_is_open(monkeypatch):
    rng = random.Random(5)
    events = [e for k in range(40) for tid in (1, 2) for e in nested(rng, tid, 1000 * k, 1000 * k + 990, 4)]
    rng.shuffle(events)
    whole = operator_times(columns(records(events)))  # a chunk of each thread
    monkeypatch.setattr(module, "CHUNK", 16)
    assert operator_times(columns(records(events))) == whole
    assert len(events) > 100 * module.CHUNK and whole["cpu"]["op0"]["self_us"] < whole["cpu"]["op0"]["total_us"]
