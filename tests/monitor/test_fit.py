"""FitRun, the fit's logic, driven without a Trainer by plain facts and a fake clock (tests/fake_fit.py): every
figure below is known exactly in advance from the seconds the test gives each fetch and step."""

import pytest
import torch
from conftest import profiler_steps, read_trace
from fake_fit import FakeFit

from lightning_profkit.capture_request import request_capture
from lightning_profkit.monitor.alerting.advice import LoaderFacts
from lightning_profkit.monitor.fit import slowest_rank
from lightning_profkit.monitor.timing import fetch_timer

NO_WINDOWS = dict(profile=False, max_captures=0)


def epoch_row(fit):
    return [m for out in fit.outcomes for _, m in out.metrics if "profkit/data_wait_ratio" in m]


def test_epoch_figures_are_the_fetch_and_step_seconds_given(monkeypatch, tmp_path):
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, **NO_WINDOWS)
    steps = [(0.25, 0.75)] * 6 + [(0.5, 1.5)] * 4  # 10 steps: 3.5 s of 14 s waiting for data
    fit.epoch(0, steps, startup=2.0)
    fit.epoch(1, [(0.0, 1.0)] * 10)
    fit.end()
    first, second = epoch_row(fit)
    assert first["profkit/train_s"] == 16.0  # the epoch's time, worker start-up included
    assert first["profkit/data_wait_s"] == 3.5
    assert first["profkit/data_wait_ratio"] == 3.5 / 16.0
    assert first["profkit/dataloader_startup_s"] == 2.0
    assert first["profkit/step_time_ms_mean"] == pytest.approx(1400.0)  # from one fetch to the next
    assert first["profkit/step_time_ms_p90"] == pytest.approx(2000.0)
    assert first["profkit/samples_per_s"] == 10 * 2 / 16.0
    assert first["epoch"] == 0.0 and second["epoch"] == 1.0
    assert second["profkit/data_wait_ratio"] == 0.0 and second["profkit/step_time_ms_mean"] == pytest.approx(1000.0)
    assert [step for step, m in fit.logged() if "profkit/data_wait_ratio" in m] == [10, 20]  # the log step given
    assert not any(k.startswith(("profkit/overhead", "profkit/peak_memory", "profkit/gpu_idle")) for k in first)


def test_validation_is_left_out_of_training_time_and_step_times(monkeypatch, tmp_path):
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, **NO_WINDOWS)
    fit.epoch(0, [(0.5, 0.5)] * 4, validation={1: 10.0})  # 10 s of validation after batch 1
    fit.end()
    (row,) = epoch_row(fit)
    assert row["profkit/train_s"] == 4.0 and row["profkit/data_wait_ratio"] == 0.5
    assert row["profkit/step_time_ms_mean"] == pytest.approx(1000.0)


def test_rolling_checks_log_their_block_and_an_episode_alerts_once(monkeypatch, tmp_path):
    loader = LoaderFacts(num_workers=0, cpus=8)
    fit = FakeFit(monkeypatch, str(tmp_path), loader=loader, alert_window=5, alert_patience=2, alert_cooldown=1000,
                  capture_on_alert=False, **NO_WINDOWS)
    fast, slow = (0.1, 0.9), (0.6, 0.4)
    fit.epoch(0, [fast] * 5 + [slow] * 15 + [fast] * 5 + [slow] * 10)
    fit.end()
    rolling = [(step, m["profkit/rolling/data_wait_ratio"]) for step, m in fit.logged("profkit/rolling/")]
    assert [step for step, _ in rolling] == [4, 9, 14, 19, 24, 29, 34]
    assert [round(r, 12) for _, r in rolling] == [0.1, 0.6, 0.6, 0.6, 0.1, 0.6, 0.6]
    assert all(m["profkit/rolling/step_time_ms"] == pytest.approx(1000.0) for _, m in fit.logged("profkit/rolling/"))
    # the second slow check (step 14) starts the episode; the one at step 34 starts a new episode, but within
    # the cooldown of 1000 steps: one alert in all
    (alert,) = fit.alerts
    assert (alert.step, alert.ratio, alert.checked) == (14, pytest.approx(0.6), "epoch 0, batches 10-14")
    assert any("num_workers=0" in line for line in alert.advice)
    assert sum("data wait was" in w for w in fit.warnings) == 1
    assert epoch_row(fit)[0]["profkit/data_wait_alert"] == 1.0


def test_rolling_checks_read_only_the_workers_pids_and_the_loaders_settings_for_an_alert(monkeypatch, tmp_path):
    read = []  # what the fit asked for: the workers' pids at every check, the loader's settings for an alert's advice
    fit = FakeFit(monkeypatch, str(tmp_path), alert_window=5, alert_patience=2, capture_on_alert=False, **NO_WINDOWS)
    fit.run.advice.loader = lambda: read.append("settings") or LoaderFacts(num_workers=0, cpus=8)
    fit.run.advice.workers = lambda: read.append("pids") or ()
    fit.epoch(0, [(0.1, 0.9)] * 10 + [(0.6, 0.4)] * 10)  # checks at steps 4, 9 (fast), 14, 19 (slow: the alert)
    (alert,) = fit.alerts
    assert alert.step == 19 and any("num_workers=0" in line for line in alert.advice)
    assert read[:read.index("settings")] == ["pids"] * 5  # the epoch's start, then each check


def tensorboard_smoothed(values, weight=0.6):
    """What TensorBoard's scalar chart draws at its default smoothing: a debiased moving average."""
    out, last = [], 0.0
    for n, value in enumerate(values, 1):
        last = last * weight + (1 - weight) * value
        out.append(last / (1 - weight**n))
    return out


def test_the_alert_count_reads_right_smoothed(monkeypatch, tmp_path):
    """TensorBoard smooths every scalar: the 0/1 flag then reads as fractions; the count of alerts so far, smoothed,
    never shows more alerts than there were and rises at each."""
    fit = FakeFit(monkeypatch, str(tmp_path), alert_window=5, alert_patience=1, alert_cooldown=0,
                  capture_on_alert=False, **NO_WINDOWS)
    fast, slow = (0.1, 0.9), (0.6, 0.4)
    for epoch, steps in enumerate([[slow] * 5, [fast] * 5, [fast] * 5, [slow] * 5, [fast] * 5]):
        fit.epoch(epoch, steps)
    fit.end()
    counts = [row["profkit/data_wait_alerts"] for row in epoch_row(fit)]
    alerted = [sum(alert.epoch <= epoch for alert in fit.alerts) for epoch in range(5)]
    assert counts == alerted == [1, 1, 1, 2, 2]
    smoothed = tensorboard_smoothed(counts)
    assert all(s <= c + 1e-12 for s, c in zip(smoothed, counts))
    assert smoothed[3] > smoothed[2] and smoothed == sorted(smoothed)
    flags = tensorboard_smoothed([row["profkit/data_wait_alert"] for row in epoch_row(fit)])
    assert 0 < flags[2] < 1  # the flag smoothed: a fraction no epoch had


@pytest.mark.parametrize(
    "slow, patience, cooldown, expected",
    [
        ([(20, 79)], 2, 0, [39]),  # one long episode: one alert, at its second slow check
        ([(20, 29)], 2, 0, []),  # one slow block: patience holds it back
        ([(20, 59), (120, 159)], 2, 0, [39, 139]),  # two episodes
        ([(20, 59), (120, 159)], 2, 200, [39]),  # the second is inside the cooldown
        ([(20, 59), (120, 159)], 3, 0, [49, 149]),
    ],
    ids=["episode", "burst", "two-episodes", "cooldown", "patience-3"],
)
def test_patience_and_cooldown(monkeypatch, tmp_path, slow, patience, cooldown, expected):
    fit = FakeFit(monkeypatch, str(tmp_path), alert_window=10, alert_patience=patience, alert_cooldown=cooldown,
                  capture_on_alert=False, **NO_WINDOWS)
    fit.epoch(0, [(0.01 if any(lo <= i <= hi for lo, hi in slow) else 0.0, 0.002) for i in range(200)])
    fit.end()
    assert [alert.step for alert in fit.alerts] == expected
    assert sum("data wait was" in w for w in fit.warnings) == len(expected)


def test_a_check_block_runs_on_across_an_epoch_end(monkeypatch, tmp_path):
    fit = FakeFit(monkeypatch, str(tmp_path), alert_window=4, alert_threshold=0.5, **NO_WINDOWS)
    fit.epoch(0, [(0.2, 0.8)] * 6)  # checks at step 3; steps 4-5 carried into the next epoch's block
    fit.epoch(1, [(0.8, 0.2)] * 6)  # checks at 7 (steps 4-7: 2 fast, 2 slow) and 11
    fit.end()
    rolling = {step: m["profkit/rolling/data_wait_ratio"] for step, m in fit.logged("profkit/rolling/")}
    assert rolling == {3: pytest.approx(0.2), 7: pytest.approx(0.5), 11: pytest.approx(0.8)}


def test_the_step_hook_is_woken_only_for_steps_with_work(monkeypatch, tmp_path):
    fit = FakeFit(monkeypatch, str(tmp_path), alert_window=10, **NO_WINDOWS)
    fit.epoch(0, [(0.0, 0.1)] * 40)
    fit.end()
    assert fit.woken_at == [9, 19, 29, 39]  # the rolling checks: nothing else has work at a step's end


def test_capture_requests_are_looked_for_once_a_second_and_recorded(monkeypatch, tmp_path):
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, steps="100", warmup=1, active=2, max_captures=1)
    fit.epoch(0, [(0.0, 0.5)] * 12)  # polls at steps 0, 3, 6 and 9: the first fetch 1 s of the clock after the last
    assert fit.woken_at == [0, 3, 6, 9]
    request_capture(str(tmp_path))
    fit.epoch(1, [(0.0, 0.5)] * 12)  # the poll at step 12 takes it: warm-up 13, steps 14-15 recorded
    request_capture(str(tmp_path))
    fit.epoch(2, [(0.0, 0.5)] * 12)  # a second request finds the budget spent
    fit.end()
    assert fit.woken_at[4:9] == [12, 13, 14, 15, 17]  # the window (13-15; a poll at 14, 1 s after 12), a poll at 17
    lines = [line for out in fit.outcomes for line in out.lines]
    assert "recording 2 steps from batch 2 of epoch 1 (requested from outside)" in lines
    assert fit.checks.captures_left == 0
    assert any("no more captures: `max_captures=1`" in w for w in fit.warnings)
    assert [p.split("/")[-2] for p in fit.traces] == ["epoch=0001-batch=000002-000003"]  # steps 14-15: epoch 1 began at step 12


class AdvancingProfiler:
    """torch.profiler.profile's calls, each moving the fake clock by a known number of seconds."""

    def __init__(self, monkeypatch, clock, seconds):
        self.total = 0.0
        for name in ("__init__", "start", "step", "stop"):
            monkeypatch.setattr(torch.profiler.profile, name, self.advancing(getattr(torch.profiler.profile, name),
                                                                             clock, seconds[name]))

    def advancing(self, real, clock, seconds):
        def call(*args, **kwargs):
            clock.advance(seconds)
            self.total += seconds
            return real(*args, **kwargs)
        return call


def test_own_cost_is_the_profiled_steps_and_the_profilers_calls(monkeypatch, tmp_path):
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, steps="10-12", warmup=1, max_captures=0)
    profiler = AdvancingProfiler(monkeypatch, fit.clock, {"__init__": 0.001, "start": 0.002, "step": 0.003, "stop": 0.004})
    # steps 9-12 run inside the session (9: warm-up), 2 s each; the others 1 s; after the window, 1.5 s
    steps = [(0.0, 1.0)] * 9 + [(0.0, 2.0)] * 4 + [(0.0, 1.5)] * 7
    fit.epoch(0, steps)
    fit.end()
    (row,) = epoch_row(fit)
    times = [b - a for a, b in zip(fit.fetch_starts, fit.fetch_starts[1:])]  # each step, the profiler's calls in it
    on = [times[i] for i in range(9, 13)]
    off = [t for i, t in enumerate(times) if not 9 <= i <= 12]
    assert row["profkit/overhead/profiled_step_ratio"] == pytest.approx((sum(on) / 4) / (sum(off) / len(off)))
    after, before = sorted(times[13:])[3], sorted(times[5:9])
    assert row["profkit/overhead/after_window_ratio"] == pytest.approx(after / ((before[1] + before[2]) / 2))
    assert row["profkit/overhead/window_ms"] == pytest.approx(1000 * profiler.total)
    assert [p.split("/")[-2] for p in fit.traces] == ["epoch=0000-batch=000010-000012"]


def test_window_ms_is_absent_from_an_epoch_without_a_window(monkeypatch, tmp_path):
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, steps="30-31", max_captures=0)
    fit.epoch(0, [(0.0, 1.0)] * 20)
    fit.end()
    (row,) = epoch_row(fit)
    assert not any(k.startswith("profkit/overhead/") for k in row)


def test_a_clean_run_reads_1_and_is_not_warned(monkeypatch, tmp_path):
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, max_captures=0)  # windows at batches 11-13
    for epoch in range(3):
        fit.epoch(epoch, [(0.001, 0.01)] * 30)
    fit.end()
    rows = epoch_row(fit)
    assert [(r["profkit/overhead/profiled_step_ratio"], r["profkit/overhead/after_window_ratio"]) for r in rows] == [
        (1.0, 1.0)] * 3
    assert not [w for w in fit.warnings if "after_window_ratio" in w]


def test_steps_slower_after_the_window_warn_once(monkeypatch, tmp_path):
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, max_captures=0)
    for epoch in range(3):  # after epoch 0's window (steps 10-13), each step 2x as long
        fit.epoch(epoch, [(0.001, 0.01 if 30 * epoch + i < 20 else 0.021) for i in range(30)])
    fit.end()
    assert [r["profkit/overhead/after_window_ratio"] for r in epoch_row(fit)] == [2.0] * 3
    warned = [w for w in fit.warnings if "after_window_ratio" in w]
    assert len(warned) == 1 and "2.00x" in warned[0] and "2 epochs running" in warned[0] and "profile=False" in warned[0]


def test_steps_slower_after_the_window_while_the_thread_waited_for_a_cpu_are_not_warned(monkeypatch, tmp_path):
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, max_captures=0)
    slow_from = fit.clock() + 14 * 0.011  # step 14, the first after epoch 0's window (steps 10-13)
    fit.cpu_wait = lambda now: max(now - slow_from, 0.0) / 2  # from then on, half of the time waiting for a CPU
    for epoch in range(3):  # ... and each step 2x as long: the machine, not the window
        fit.epoch(epoch, [(0.001, 0.01 if 30 * epoch + i < 14 else 0.021) for i in range(30)])
    fit.end()
    assert [r["profkit/overhead/after_window_ratio"] for r in epoch_row(fit)] == [pytest.approx(1.0)] * 3
    assert not [w for w in fit.warnings if "after_window_ratio" in w]


def test_epochs_of_one_batch_record_that_batch(monkeypatch, tmp_path):
    """Lightning's bug_report_model.py: epochs of 1 batch each get a window of that batch, as the plan says."""
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, max_captures=0)
    assert fit.options.plan(str(tmp_path), 1)[0].startswith(
        "profiling batch 0 of every epoch (no warm-up; an epoch has 1 batch,")
    for epoch in range(3):
        fit.epoch(epoch, [(0.001, 0.01)])
    fit.end()
    assert [p.split("/")[-2] for p in fit.traces] == [f"epoch={s:04d}-batch=000000" for s in range(3)]
    assert [profiler_steps(read_trace(p)) for p in fit.traces] == [[s] for s in range(3)]


def test_window_ms_counts_validation_windows_too(monkeypatch, tmp_path):
    """One training window (steps 10-12) and one validation window (batches 0-1 of the run after step 14): the
    profiler's calls of both, as the fake clock moved in them, averaged over the 2 windows."""
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, steps="10-12", warmup=1, max_captures=0,
                  validation_batches="0-1")
    profiler = AdvancingProfiler(monkeypatch, fit.clock, {"__init__": 0.001, "start": 0.002, "step": 0.003, "stop": 0.004})
    fit.epoch(0, [(0.0, 1.0)] * 20, validation={14: 0.5}, validation_batches=3)
    fit.end()
    (row,) = epoch_row(fit)
    assert [p.split("/")[-2] for p in fit.traces] == ["epoch=0000-batch=000010-000012",
                                                      "epoch=0000-batch=000014-val-batch=000000-000001"]
    assert row["profkit/overhead/window_ms"] == pytest.approx(1000 * profiler.total / 2)


def test_the_end_of_fit_line_tells_profiled_steps_from_every_step(monkeypatch, tmp_path):
    """The windows' step time is the profiled steps' (slower: the profiler's own work); the line also gives every
    step's mean of the last epoch, here exactly the 10 ms the fake clock gave each."""
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, max_captures=0)
    fit.epoch(0, [(0.001, 0.009)] * 20)
    lines = fit.end().lines
    assert lines[0].startswith("last 1 window of rank 0: a profiled step took ")
    at = lines.index("every step of the last epoch: 10.0 ms on average")
    assert lines[at + 1] == f"more: profkit summary {tmp_path}"


def test_after_an_error_no_window_starts_again_in_the_fit(monkeypatch, tmp_path):
    """Profiling turned off by an error stays off when training is armed again (after a tuner's loops ran without
    the callback): no window of the next epoch is recorded, and the metrics go on."""
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, max_captures=0)
    fit.run.fail("on_train_batch_end", RuntimeError("a failure inside the callback"))
    fit.run.disarm(wait=False)
    fit.run.arm(fetch_timer.FetchTimer(fit.trainer).install(), False, 2, LoaderFacts, tuple)
    fit.epoch(0, [(0.001, 0.01)] * 20)
    fit.end()
    assert fit.run.runner is None and fit.traces == [] and epoch_row(fit)
    assert [w for w in fit.warnings if "profiling is off for the rest of this run" in w]


def own_warnings(fit):
    return [w for w in fit.warnings if w.startswith("PerformanceMonitor:")]


def test_a_window_records_the_selections_steps_and_wakes_only_around_them(monkeypatch, tmp_path):
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, skip_first=2, warmup=1, active=2, max_captures=0)
    fit.epoch(0, [(0.0, 0.01)] * 20)
    fit.end()
    assert [p.split("/")[-2] for p in fit.traces] == ["epoch=0000-batch=000003-000004"]  # skip 2, warm up 1, record 2
    assert own_warnings(fit) == []
    assert fit.woken_at[0] >= 1 and len(fit.woken_at) < 20  # from the step before the warm-up; not every step


def test_captures_spend_the_budget_and_stop_at_the_fits_last_step(monkeypatch, tmp_path):
    told = []
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, skip_first=2, warmup=1, active=2, max_captures=1)
    fit.run.report = lambda message, key="": told.append(key)
    fit.run.last_step = 20
    assert fit.run._capture(5, 3) == (7, 9) and fit.run.due <= 5  # after a warm-up step
    assert fit.run._capture(8, 3) is None and told == ["budget"]
    fit.checks.start_fit()
    assert fit.run._capture(18, 5) == (19, 20)  # at once, cut at the last step
    assert fit.run._capture(20, 5) is None  # the fit ends there


def test_after_the_windows_stop_nothing_records(monkeypatch, tmp_path):
    fit = FakeFit(monkeypatch, str(tmp_path), alert_threshold=None, skip_first=2, warmup=1, active=2, max_captures=1)
    fit.run._stop_windows()
    assert fit.run.runner is None and fit.run.due == float("inf")
    assert fit.run._capture(5, 3) is None and fit.checks.captures_left == 1
    fit.epoch(0, [(0.0, 0.01)] * 20)
    fit.end()
    assert fit.woken_at == [0] and fit.traces == []  # the first capture-request poll only


def test_one_process_has_no_slowest_rank():
    assert slowest_rank(None, []) is None
