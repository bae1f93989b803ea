"""The fetch timer on a real Trainer's loops, called as Lightning's fetcher calls them: each fetch's wait, each
step's time from one first fetch to the next, the alarm at a step asked for, and the loops given back."""

import time

from conftest import make_trainer
from lightning_profkit.internals import FETCH_PAIR
from lightning_profkit.monitor.timing.fetch_timer import FetchStats, FetchTimer


def fetch(loop, seconds=0.0, completes=True):
    loop._on_before_fetch()
    time.sleep(seconds)
    loop._on_after_fetch()
    if completes:
        loop.batch_progress.total.completed += 1


def own(loop):
    return [name for name in FETCH_PAIR if name in vars(loop)]


def test_fetch_waits_and_step_times_are_timed_and_the_loops_given_back(tmp_path):
    trainer = make_trainer(tmp_path, [])
    loop = trainer.fit_loop.epoch_loop
    timer = FetchTimer(trainer).install()
    woken = []
    timer.wake(2, float("inf"), lambda: woken.append(loop.batch_progress.total.completed))
    try:
        for _ in range(4):
            start = time.perf_counter()
            fetch(loop, 0.01)
            time.sleep(0.01)  # the step's work
    finally:
        timer.uninstall()
    stats = timer.stats
    assert stats.train_count == 4 and 0.04 <= stats.train_s < time.perf_counter() - stats.first_fetch
    assert len(stats.step_times) == 3 and all(0.02 <= s for s in stats.step_times)  # the fourth has not ended
    stats.end_step(time.perf_counter(), loop.batch_progress.total.completed)
    assert len(stats.step_times) == 4 and stats.first_fetch <= start
    assert woken == [2, 3] and own(loop) == []


def test_a_validation_run_is_left_out_of_the_step_it_follows():
    stats = FetchStats()
    stats.step_start, stats.steps_done = 10.0, 0
    stats.exclude(3.0)
    stats.end_step(15.0, 1)
    stats.end_step(20.0, 1)  # closed once
    assert list(stats.step_times) == [2.0]
