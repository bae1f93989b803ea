"""Whether a written trace holds what its window recorded: plain events in, one sentence per lack out."""

from conftest import records

from lightning_profkit.trace.columns import columns
from lightning_profkit.trace.integrity import problems


def step(n, ts):
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": ts, "dur": 10}


def test_a_whole_trace_has_no_problems_and_each_lack_is_one_sentence():
    whole = columns(records([step(10, 0), step(11, 10), step(12, 20)]))
    assert problems(whole, {"steps": [10, 12]}) == []
    open_op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5}  # no duration
    lacking = columns(records([step(10, 0), step(12, 20), open_op]))
    assert problems(lacking, {"steps": [10, 12], "gpu": True}) == [
        "1 of the 3 recorded steps have no ProfilerStep span in the trace (11)",
        "1 complete event(s) have no duration",
        "no GPU activity although CUDA was profiled on a CUDA model (CUPTI may have failed to attach; see "
        "pytorch/pytorch#192021)"]
    validation = problems(whole, {"validation": True, "batch_idx": [10, 13], "steps": [10, 12]})
    assert validation == ["1 of the 4 recorded steps have no ProfilerStep span in the trace (13)"]  # its batches


def test_a_long_list_of_missing_steps_is_cut():
    assert problems(columns(records([step(0, 0)])), {"steps": [0, 30]}) == [
        "30 of the 31 recorded steps have no ProfilerStep span in the trace (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ...)"]
