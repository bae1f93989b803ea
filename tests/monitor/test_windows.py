"""The window runner and validation windows over a selection, and the profiler sessions quiet on stderr."""

import os

import pytest
import torch
from conftest import make_selection, selections
from torch.profiler import ProfilerActivity

from lightning_profkit.monitor.profiling.selection import EpochWindow, StepList
from lightning_profkit.monitor.profiling.windows import Recording, ValidationWindows, WindowRunner, WindowSession


SELECTIONS = selections()


class Recorder:
    """A stand-in session: notes the steps it is driven through."""

    spent_s, planned_last = 0.0, None

    def __init__(self, log, step, warmup, length):
        self.log, self.left, self.first_step = log, warmup + length, step
        log.append(("open", step, warmup))

    def step(self):
        self.left -= 1
        return self.left > 0

    def finish(self, ran_current=True):
        self.log.append(("finish",))


def recording_into(log):
    """A session opener whose sessions note in ``log`` what they are driven through, each as long as the
    selection's run of active steps."""

    def open_session(selection, step, batch_idx, warmup):
        length = 1
        while selection.is_active(step + warmup + length, batch_idx + warmup + length):
            length += 1
        return Recorder(log, step, warmup, length)

    return open_session


def drive(sel, steps, epoch_len, every_step):
    """Run a WindowRunner over ``steps`` steps; with ``every_step`` False, call step_end only where
    next_step_end says it has work. Returns what the runner did."""
    log = []
    runner = WindowRunner(sel, recording_into(log))
    due = None
    for step in range(steps):
        batch_idx = step % epoch_len
        if batch_idx == 0:
            runner.epoch_start(step, 0, epoch_len)
            due = runner.next_step_end(step, 0, horizon=8)
        if every_step or step >= due:
            log.append(("step_end", step))
            runner.step_end(step, batch_idx, batch_idx == epoch_len - 1)
            due = runner.next_step_end(step + 1, batch_idx + 1, horizon=8)
    return [entry for entry in log if entry[0] != "step_end"]


@pytest.mark.parametrize("name", SELECTIONS)
def test_calling_the_runner_only_where_it_has_work_changes_nothing(name):
    sel = SELECTIONS[name]
    every = drive(sel, 90, 40, every_step=True)
    assert drive(sel, 90, 40, every_step=False) == every
    if name != "none":
        assert any(entry[0] == "open" for entry in every)  # the test sees windows open


def test_the_runner_notes_the_steps_each_window_held():
    sel = make_selection(10, 1, 3, None, None, None)
    runner = WindowRunner(sel, lambda selection, step, batch_idx, warmup: Recorder([], step, warmup, 3))
    runner.epoch_start(0, 0, 30)
    for step in range(30):
        runner.step_end(step, step, step == 29)
    assert runner.profiled == [(10, 13)]  # the warm-up step and the 3 recorded
    runner.epoch_start(30, 0, 30)
    assert runner.profiled == []


def test_a_window_paused_by_validation_goes_on_after_it():
    sel = make_selection(10, 1, 3, None, None, None)  # warm-up 10, batches 11-13 recorded
    log = []
    runner = WindowRunner(sel, lambda selection, step, batch_idx, warmup: Recorder(log, step, warmup, 3))
    runner.epoch_start(0, 0, 30)
    for step in range(12):
        runner.step_end(step, step, False)
    assert log == [("open", 10, 1)] and runner.session is not None
    runner.pause()  # validation after step 11: step 12 has not run
    assert runner.session is None and log[-1] == ("finish",)
    assert runner.resume(12, 12) and log[-1] == ("open", 12, 0)  # the rest of the window, without a warm-up
    assert not runner.resume(12, 12)  # nothing paused now
    runner.pause()
    runner.epoch_start(30, 0, 30)  # a new epoch forgets a pause
    assert not runner.resume(30, 0)


def test_validation_windows_record_the_batches_asked_for_in_every_run():
    log = []
    windows = ValidationWindows(StepList(((2, 3),), 1), recording_into(log))
    for run in range(2):
        windows.run_start()
        for batch_idx in range(6):
            windows.batch_start(batch_idx)
            windows.batch_end()
        windows.stop()
    assert log == [("open", 1, 1), ("finish",)] * 2  # opened at batch 1 to warm up, done after batch 3
    windows.run_start()
    windows.batch_start(1)
    windows.run_start()  # a run that ended without its end (an exception in validation): the next one starts clean
    assert log[-1] == ("finish",)


@pytest.mark.parametrize("per_step, max_bytes, kept", [
    (100.0, 350, 3),  # 3 steps: 300 bytes; a 4th would make 400
    (100.0, 300, 3),  # reaching the budget is not passing it
    (500.0, 350, 1),  # one step past the budget on its own: kept
    (100.0, 600, 6),  # all fit
    (100.0, None, 6),  # no budget
    (None, 350, 6),  # no estimate: the fit's first window of its kind
])
def test_a_session_ends_before_the_step_that_would_take_its_estimate_past_the_budget(per_step, max_bytes, kept):
    handed = []
    recording = Recording([ProfilerActivity.CPU], {}, lambda session, prof: handed.append(session), max_bytes=max_bytes)
    session = WindowSession(EpochWindow(0, 1, 6), 0, 0, 1, recording, per_step)  # warm up at 0, record 1-6
    while session.step():
        torch.ones(4).sum()
    session.finish()
    assert handed == [session] and (session.first_active, session.last_recorded) == (1, kept)
    assert session.planned_last == (6 if kept < 6 else None)
    assert session.estimate_bytes == (None if per_step is None else per_step * kept)


KINETO_LINE = ("USDT:", "STAGE:", "INFO:", "ERROR:", "WARNING:")
FIT_PRINTING_ON_FD2 = """
import os
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning_profkit import PerformanceMonitor
class UserLines(Callback):
    stderr = set()
    def on_train_batch_end(self, *args):
        self.stderr.add(os.fstat(2).st_ino)
        os.write(2, b"a line of the user\\n")
Trainer(max_epochs=1, limit_train_batches=8, callbacks=[PerformanceMonitor(steps="2-3,5-6"), UserLines()],
        enable_progress_bar=False, enable_model_summary=False, logger=False, enable_checkpointing=False,
        accelerator="cpu").fit(BoringModel())
print("done:", len(UserLines.stderr), os.environ.get("KINETO_LOG_LEVEL"))
"""


@pytest.mark.parametrize("level", [None, "0"])
def test_kineto_starts_quiet_unless_the_user_set_its_level(tmp_path, level):
    """Two windows of a real fit in a fresh process: none of kineto's lines (torch 2.13's USDT at every start and
    stop, 2.3's STAGE) reach the terminal, the user's own lines on fd 2 are printed where they are written (fd 2 is
    never pointed elsewhere) and the environment is as it was. A KINETO_LOG_LEVEL the user set is theirs."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    if level is not None:
        env["KINETO_LOG_LEVEL"] = level
    done = subprocess.run([sys.executable, "-c", FIT_PRINTING_ON_FD2], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    kinetos = [line for line in lines if line.startswith(KINETO_LINE)]
    # the script's own last line (Lightning may print more, through rich where it is installed)
    said = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("done: ")]
    assert lines.count("a line of the user") == 8 and said == [["1", str(level)]], (lines, done.stdout)
    if level is None:
        assert kinetos == [], kinetos
    else:  # every torch since 2.3 prints lines at its level 0 on a session's start and stop
        assert len(kinetos) >= 2, lines


def test_a_cuda_build_on_a_machine_without_a_gpu_prints_no_kineto_error(tmp_path):
    """The quick start's windows with a CUDA build of torch where no GPU is usable (torch 2.8.0's printed
    `gpuGetDeviceCount failed with code 35` once a process, 2.3.1 `cudaGetDeviceCount` and STAGE lines every window):
    nothing of kineto's reaches the terminal."""
    import subprocess
    import sys

    import torch

    if torch.version.cuda is None or torch.cuda.is_available():
        pytest.skip("needs a CUDA build of torch on a machine without a usable GPU")
    code = ("from lightning.pytorch import Trainer\nfrom lightning.pytorch.demos.boring_classes import BoringModel\n"
            "from lightning_profkit import PerformanceMonitor\n"
            "Trainer(max_epochs=1, limit_train_batches=20, callbacks=[PerformanceMonitor()], enable_progress_bar=False,"
            " accelerator='cpu').fit(BoringModel())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    kinetos = [line for line in done.stderr.splitlines() if line.startswith(("ERROR:", "STAGE:", "USDT:"))]
    assert kinetos == [] and "profiling batches 11-13" in done.stderr, kinetos
