"""An alert's advice in a running fit: the DataLoader's real worker processes read between marks, advice drawn
from what they did, and a failure to read them or the loader reported while the advice goes on without it."""

import subprocess
import sys
import time

import pytest

from lightning_profkit.monitor.alerting.advice import LoaderFacts
from lightning_profkit.monitor.alerting.loader_advice import LoaderAdvice
from lightning_profkit.monitor.timing.fetch_timer import FetchStats


def worker(code):
    """A worker process running ``code`` once it has started (its start-up, on a busy node mostly a wait for a CPU,
    is no part of what it does)."""
    proc = subprocess.Popen([sys.executable, "-c", f"print(flush=True)\n{code}"], stdout=subprocess.PIPE)
    proc.stdout.readline()
    return proc


def test_advice_tells_sleeping_workers_from_computing_ones():
    told = []
    sleeping, burning = worker("import time; time.sleep(60)"), worker("while True: pass")
    try:
        for pid, says in ((sleeping.pid, "wait on storage"), (burning.pid, "compute")):
            advice = LoaderAdvice(lambda message, key: told.append(key))
            advice.loader = lambda: LoaderFacts(num_workers=1, cpus=1, persistent_workers=True)
            advice.workers = lambda: [pid]
            start = time.perf_counter()
            advice.mark(start, FetchStats())
            time.sleep(1.2)
            waited = FetchStats()
            waited.train_s = 1.0
            advice.mark(time.perf_counter(), waited)
            lines = advice.advice(None, None, None, time.perf_counter() - start)
            assert says in lines[0] and any(x.startswith("measured: 1 workers: busy ") for x in lines), lines
    finally:
        for p in (sleeping, burning):
            p.kill()
            p.wait()
            p.stdout.close()
    assert told == []


def test_what_cannot_be_read_is_reported_and_the_advice_goes_on():
    told = []
    advice = LoaderAdvice(lambda message, key: told.append((message.splitlines()[0], key)))

    def broken():
        raise RuntimeError("the loader is gone")

    advice.workers = broken
    advice.mark(1.0, FetchStats())
    assert advice.advice(None, None, None, 1.0)  # from the loader's settings alone
    advice.loader = broken
    assert advice.advice(None, None, None, 1.0) == []
    assert told == [("reading the DataLoader's CPU failed:", "advice"), ("advice failed:", "advice")]


def test_a_check_reads_the_cpu_only_when_a_mark_is_due_or_an_alert_asks():
    """Rolling checks come every few tenths of a second; the CPU is read at most once in the watch's min_seconds,
    and at an alert (its advice covers the span to the latest check)."""
    read = []
    advice = LoaderAdvice(lambda message, key: None)
    advice.workers = lambda: read.append(True) or []
    advice.mark(10.0, FetchStats())  # the first mark: read
    advice.mark(10.2, FetchStats())
    advice.mark(10.4, FetchStats())
    assert len(read) == 1  # checks 0.2 s and 0.4 s after the mark read nothing
    advice.advice(None, None, None, 1.0)
    assert len(read) == 2  # an alert's advice reads the span to the latest check
    advice.mark(11.5, FetchStats())  # 1.5 s after the mark: a new one
    advice.mark(12.2, FetchStats())
    assert len(read) == 3


def test_the_cpu_a_batch_costs_each_side_is_read_from_the_fetches_and_the_workers():
    """Between two marks: the training thread's CPU in its fetches and the workers' CPU, each over the batches
    fetched, as the advice compares them."""
    seconds = iter([(1.0, 0.0), (1.6, 0.1)])  # the one worker's CPU and its wait for a CPU, at each mark
    advice = LoaderAdvice(lambda message, key: None)
    advice.watch.read = lambda pid: next(seconds)
    advice.watch.thread = iter([(5.0, None), (5.9, None)]).__next__
    advice.workers = lambda: [123]
    stats = FetchStats()
    advice.mark(10.0, stats)
    stats.train_s, stats.train_count, stats.cpu_s = 1.0, 20, 0.24
    advice.mark(11.2, stats)
    busy = advice.busy
    assert busy.training.cpu_ms_per_batch == pytest.approx(12.0) and busy.workers.cpu_ms_per_batch == pytest.approx(30.0)
    assert busy.training.taking is None  # the thread's wait for a CPU not given: not known
    assert "30.0 ms of CPU to make a batch" in str(busy.workers)
