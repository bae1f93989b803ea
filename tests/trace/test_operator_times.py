"""Operators' inclusive and self time by nesting, and kernels' time."""

from conftest import records

from lightning_profkit.trace.columns import columns
from lightning_profkit.trace.operator_times import operator_times


def test_operator_self_and_total_time():
    ev = lambda name, ts, dur, tid=1, cat="cpu_op": {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": tid}  # noqa: E731
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
