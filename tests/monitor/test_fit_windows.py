"""A fit's profiler windows with real torch.profiler sessions: woken only from the step before a window, the steps
recorded are the selection's, a capture spends the fit's budget (said once when spent) and never runs past the
fit's last step, and after stop nothing records again."""

import warnings

from torch.profiler import ProfilerActivity

from lightning_profkit.monitor.alerting.checks import RollingChecks
from lightning_profkit.monitor.profiling.fit_windows import FitWindows
from lightning_profkit.monitor.profiling.selection import EpochWindow
from lightning_profkit.monitor.profiling.windows import Recording, WindowRunner, session_opener


def windows(told, selection=None):
    recorded = []
    recording = Recording([ProfilerActivity.CPU], {}, lambda session, prof: recorded.append(
        (session.first_active, session.last_recorded)))
    report = lambda message, key=None: told.append(key)  # noqa: E731
    runner = WindowRunner(selection or EpochWindow(2, 1, 2), session_opener(recording, report))
    return FitWindows(runner, None, report), recorded


def run_epoch(fit_windows, first, steps):
    """An epoch of ``steps`` steps from ``first``; the steps whose end was asked for."""
    woken = []
    fit_windows.epoch_start(first, 0, steps)
    for batch_idx in range(steps):
        step = first + batch_idx
        if step >= fit_windows.due:
            woken.append(step)
            fit_windows.step_end(step, batch_idx, batch_idx == steps - 1)
    fit_windows.epoch_end()
    return woken


def test_a_window_records_the_selections_steps_and_wakes_only_around_them():
    told = []
    fit_windows, recorded = windows(told)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kineto's own
        woken = run_epoch(fit_windows, 0, 20)
    assert recorded == [(3, 4)] and told == []  # skip 2, warm up 1, record 2
    assert woken[0] >= 1 and len(woken) < 20  # from the step before the warm-up; not every step


def test_captures_spend_the_budget_and_stop_at_the_fits_last_step():
    told = []
    fit_windows, _ = windows(told)
    budget = RollingChecks(0.5, 2, 100, 10, max_captures=1)
    budget.start_fit()
    fit_windows.last_step = 20
    assert fit_windows.capture(5, 3, budget) == (7, 9) and fit_windows.due <= 5  # after a warm-up step
    assert fit_windows.capture(8, 3, budget) is None and told == ["budget"]
    budget.start_fit()
    assert fit_windows.capture(18, 5, budget) == (19, 20)  # at once, cut at the last step
    assert fit_windows.capture(20, 5, budget) is None  # the fit ends there


def test_after_stop_nothing_records():
    told = []
    fit_windows, recorded = windows(told)
    fit_windows.stop()
    assert fit_windows.runner is None and fit_windows.due == float("inf")
    assert run_epoch(fit_windows, 0, 20) == [] and recorded == []
    assert fit_windows.capture(5, 3, RollingChecks(0.5, 2, 100, 10, max_captures=1)) is None
