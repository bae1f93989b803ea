"""Why the GPU idled: a trace where each cause dominates in turn gets that cause's advice, in the end-of-fit lines
and in profkit summary's verdict; without a GPU, nothing is said."""

import pytest
from conftest import records

from lightning_profkit.cli.text import summary_text
from lightning_profkit.idle_causes import CAUSES, verdict
from lightning_profkit.trace.columns import columns
from lightning_profkit.trace.headline import fit_line
from lightning_profkit.trace.load import LoadedTrace
from lightning_profkit.trace.summary import aggregate, summarize_trace

DOMINANT = {  # the host event over most of a step, and what the advice must say
    "data_wait": ({"cat": "user_annotation", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"},
                  "more workers"),
    "blocking_sync": ({"cat": "cuda_runtime", "name": "cudaStreamSynchronize"}, "cudaStreamSynchronize"),
    "cpu_ops": ({"cat": "cpu_op", "name": "aten::mm"}, "torch.compile"),
    "other": (None, "logging"),
}


def trace(cause):
    """One 1 ms step: a kernel for its first 0.1 ms, then the dominant cause's event from 0.2 to 0.9 ms."""
    host = {"ph": "X", "pid": 1, "tid": 1}
    events = [{**host, "cat": "cpu_op", "name": "ProfilerStep#5", "ts": 0, "dur": 1000},
              {**host, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 2, "args": {"correlation": 9}},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0, "dur": 100,
               "args": {"correlation": 9, "stream": 7}}]
    event, _ = DOMINANT[cause]
    if event is not None:
        events.append({**host, **event, "ts": 200, "dur": 700})
    return LoadedTrace(columns(records(events)), None, None)


@pytest.mark.parametrize("cause", CAUSES)
def test_the_largest_cause_gets_its_advice(cause):
    summary = summarize_trace("w/t.pt.trace.json", trace(cause))
    by_cause = summary["host"]["gpu_idle_by_cause"]
    assert max(by_cause, key=by_cause.get) == cause and by_cause[cause] >= 0.7 - 1e-9, by_cause
    assert sum(by_cause.values()) == pytest.approx(summary["host"]["gpu_idle_share"]) == pytest.approx(0.9)
    agg = aggregate([summary])
    lines = fit_line(agg)
    said = next(line for line in lines if line.startswith("what to do: "))
    assert DOMINANT[cause][1] in said and any(line.startswith(f"GPU idle by cause: {cause} ") for line in lines), lines
    assert all(len(line) <= 100 for line in lines)  # printed after "lightning_profkit: " within 120 characters
    text = summary_text([summary], agg)
    assert f"Verdict: the GPU idled 90.0% of the profiled steps" in text and DOMINANT[cause][1] in text, text


def test_without_a_gpu_nothing_is_said():
    events = [{"ph": "X", "pid": 1, "tid": 1, "cat": "cpu_op", "name": "ProfilerStep#5", "ts": 0, "dur": 1000}]
    summary = summarize_trace("w/t.pt.trace.json", LoadedTrace(columns(records(events)), None, None))
    assert summary["host"]["gpu_idle_by_cause"] == {} and summary["host"]["gpu_idle_share"] is None
    agg = aggregate([summary])
    assert not any("GPU idle" in line or "what to do" in line for line in fit_line(agg))
    assert "Why the GPU idled" not in summary_text([summary], agg)
    assert verdict(None, {}) == []
