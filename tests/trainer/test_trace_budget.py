"""max_trace_mb: a window whose trace would pass it ends early with the steps recorded, the trace valid and
marked so; the estimate it is judged by is within reach of the trace's real size."""

import gzip
import os
import warnings

import torch
from conftest import SleepDataset, TinyModel, WaitForTraces, make_trainer, read_trace

from lightning_profkit import PerformanceMonitor
from lightning_profkit.monitor.writing.output import window_name


class DeepModel(TinyModel):
    """50 layers: about 0.6 MB of trace JSON a step."""

    def __init__(self):
        super().__init__(SleepDataset(60))
        self.layer = torch.nn.Sequential(torch.nn.Linear(8, 64), *[torch.nn.Linear(64, 64) for _ in range(49)],
                                         torch.nn.Linear(64, 1))


def fit(tmp_path, **options):
    monitor = PerformanceMonitor(active=5, alert_threshold=None, **options)  # steps 11-15 of each epoch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # the second window's estimate uses the first's written trace
        trainer = make_trainer(tmp_path, [monitor, WaitForTraces(monitor, 1)], max_epochs=2)
        trainer.fit(DeepModel())
    assert trainer.global_step == 60
    traces = sorted(monitor.traces)
    cuts = [str(w.message) for w in caught if "max_trace_mb" in str(w.message)]
    return traces, cuts


def steps_in(trace):
    return sorted(int(e["name"].split("#")[1]) for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))


def test_a_window_past_the_budget_ends_early_and_says_so(tmp_path):
    traces, cuts = fit(tmp_path, max_trace_mb=0.5)
    assert len(traces) == 2, traces  # one a window: the rest of a cut window opens no other
    for epoch, path in enumerate(traces):
        trace = read_trace(path)
        first = 30 * epoch + 11
        kept = steps_in(trace)
        assert kept and kept[0] == first and kept[-1] < first + 4, kept  # 5 planned
        note = trace["profkit"]
        assert note["cut"] == {"reason": "max_trace_mb", "max_trace_mb": 0.5, "planned_steps": [first, first + 4]}
        assert note["steps"] == [first, kept[-1]] and note["estimated_mb"] >= 0.5
        assert os.path.basename(os.path.dirname(path)) == window_name(epoch, first, kept[-1])
    assert len(cuts) == 1, cuts  # once a fit
    assert "would pass max_trace_mb=0.5" in cuts[0] and "record fewer steps (active=5" in cuts[0]


def test_the_estimate_is_near_the_size_of_the_json_and_nearer_from_the_second_window_on(tmp_path):
    traces, cuts = fit(tmp_path, max_trace_mb=None, record_shapes=True)
    assert cuts == [] and len(traces) == 2
    ratios = []
    for path in traces:
        trace = read_trace(path)
        assert len(steps_in(trace)) == 5 and "cut" not in trace["profkit"]
        with gzip.open(path, "rb") as f:
            ratios.append(len(f.read()) / 1e6 / trace["profkit"]["estimated_mb"])  # the final trace: a few bytes more
    assert 0.5 < ratios[0] < 2 and 0.9 < ratios[1] < 1.1, ratios


def test_a_cut_window_that_would_run_to_the_epochs_end_leaves_the_next_epoch_its_windows(tmp_path):
    traces, cuts = fit(tmp_path, max_trace_mb=0.5, step_filter=lambda step: step >= 5)
    firsts = [read_trace(path)["profkit"]["steps"][0] for path in traces]
    assert firsts == [5, 30] and len(cuts) == 1, (firsts, cuts)  # epoch 1's window starts at its first step
