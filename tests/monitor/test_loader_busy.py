"""How busy the loader was: its workers CPU and wait for a CPU, read from the OS."""

import pytest

from lightning_profkit.monitor.timing.loader_busy import LoaderBusy, LoaderWatch, WaitBusy


def test_loader_watch_is_the_cpu_over_the_wall_time_since_the_last_mark():
    cpu, thread = {11: 1.0, 12: 2.0}, [10.0]
    watch = LoaderWatch(read=lambda pid: (cpu[pid], None) if pid in cpu else None, thread=lambda: (thread[0], None))
    assert watch.busy([11, 12], 100.0, 5.0) == LoaderBusy()  # the first mark
    cpu.update({11: 1.5, 12: 2.3, 13: 0.2})  # 13: a worker started since (all of its CPU counts)
    thread[0] = 11.5  # 1.5 s of CPU in 2 s, of which 1 s waiting: at least 0.5 s of it on the CPU in the wait
    busy = watch.busy([11, 12, 13, 14], 102.0, 6.0)  # 14: unreadable
    assert (busy.workers.workers, busy.workers.seconds) == (3, 2.0)
    assert busy.workers.share == pytest.approx((0.5 + 0.3 + 0.2) / (2.0 * 3))
    assert busy.training == WaitBusy(0.5, 1.0, 1.0, 2.0)
    cpu.update({11: 1.6, 12: 2.4, 13: 0.3})
    assert watch.busy([11, 12, 13], 102.5, 6.0).workers.seconds == 0.5  # since the mark at 102; no wait: no share
    cpu.update({11: 1.7, 12: 2.5, 13: 0.4})
    thread[0] = 11.6
    later = watch.busy([11, 12, 13], 102.8, 6.5)  # under 1 s since 102: that mark is kept, the span grows
    assert later.workers.seconds == pytest.approx(0.8) and later.workers.share == pytest.approx(0.6 / (0.8 * 3))
    # 0.1 s of CPU in 0.8 s: all of it may be outside the 0.5 s of wait, or in it
    assert (later.training.low, later.training.high) == (0.0, pytest.approx(0.2))
    assert watch.busy([], 104.0, 8.5).workers is None


def test_loader_watch_reads_the_workers_wait_for_a_cpu_where_the_os_gives_it():
    seconds = {11: (1.0, 0.5), 12: (2.0, 0.0)}
    watch = LoaderWatch(read=seconds.get, thread=lambda: (0.0, 0.0))
    watch.busy([11, 12], 100.0, 0.0)
    seconds.update({11: (1.4, 1.9), 12: (2.6, 1.0)})  # in 2 s: 1.0 s on a CPU and 2.4 s waiting for one, of 4
    busy = watch.busy([11, 12], 102.0, 0.0).workers
    assert (busy.share, busy.queued) == (pytest.approx(0.25), pytest.approx(0.6)) and busy.computing == pytest.approx(0.85)


def test_what_taking_a_batch_cost_the_training_thread_leaves_out_its_wait_for_a_cpu():
    """In 2 s, 1.2 s of them in 10 fetches with 0.3 s of its CPU: outside the fetches 0.8 s of wall time with 0.4 s
    of CPU, so 0.4 s waiting for a CPU there; of its 0.7 s waiting for a CPU, 0.3 s were in the fetches. Taking the
    batches: 0.3 s of CPU over the 0.9 s of the wait it was not waiting for a CPU."""
    thread = [(10.0, 1.0)]
    watch = LoaderWatch(read=lambda pid: None, thread=lambda: thread[0])
    watch.busy([], 100.0, 5.0, 100, 1.0)
    thread[0] = (10.7, 1.7)  # 0.7 s on a CPU (0.3 s in fetches), 0.7 s waiting for one
    busy = watch.busy([], 102.0, 6.2, 110, 1.3).training
    assert busy.cpu_ms_per_batch == pytest.approx(30.0) and busy.taking == pytest.approx(0.3 / 0.9)
    assert busy.taking_line == "training process: 30.0 ms of CPU in each fetch, 33% of its wait less its wait for a CPU"
