"""A trace's summary and the aggregate over traces."""

import threading

from conftest import records

from lightning_profkit.trace import summary
from lightning_profkit.trace.columns import columns
from lightning_profkit.trace.load import load
from lightning_profkit.trace.summary import aggregate, summarize_columns


def operator_trace(durations):
    """A CPU trace of one thread: for each ``(name, self µs)``, an operator span holding a 1 µs child
    ``aten::empty`` (so inclusive = self + 1), one after the other."""
    events, t = [], 0
    for name, self_us in durations:
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": t, "dur": self_us + 1})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": t + self_us,
                       "dur": 1})
        t += self_us + 10
    return events


def test_traces_are_aggregated_from_whole_operator_tables():
    """``aten::linear`` is 12th by self time in one trace (outside its top 10) and first in the other: the
    aggregate counts its calls over both raw traces, and inclusive time is never below self time."""
    first = operator_trace([(f"op{i}", 100 + i) for i in range(11)] + [("aten::linear", 5)] * 3)
    second = operator_trace([("aten::linear", 500)] * 6 + [("op0", 1)])
    agg = aggregate([summarize_columns(columns(records(t))) for t in (first, second)])
    counted = {}
    for event in first + second:
        counted[event["name"]] = counted.get(event["name"], 0) + 1
    self_rows = {r["name"]: r for r in agg["operators"]["cpu_by_self"]}
    total_rows = {r["name"]: r for r in agg["operators"]["cpu_by_total"]}
    assert self_rows["aten::linear"]["calls"] == counted["aten::linear"] == 9
    assert self_rows["aten::linear"]["self_us"] == 3 * 5 + 6 * 500
    for name in set(self_rows) | set(total_rows):
        for row in (self_rows.get(name), total_rows.get(name)):
            if row is not None:
                assert row["calls"] == counted[name] and row["total_us"] >= row["self_us"], row


def test_the_operator_tables_on_a_second_thread_or_on_one_are_the_same_figures(gpu_traces, monkeypatch):
    """The real A100 trace (75,000 events, where the operator tables go to a second thread): the same summary with
    ``beside=False``, which starts no thread (the finalizing process: the least memory)."""
    c = load(str(gpu_traces / "hta" / "trace_diff_control" / "control.json.gz")).rows
    assert summary.BESIDE_MIN_ROWS <= c.ts.size < summary.BESIDE_ROWS
    started = []
    start = threading.Thread.start

    def counted(self):
        started.append(self.name)
        return start(self)

    monkeypatch.setattr(threading.Thread, "start", counted)
    beside = summarize_columns(c)
    assert len(started) == 1 and started[0].startswith("profkit-operators")
    assert summarize_columns(c, beside=False) == beside and len(started) == 1
