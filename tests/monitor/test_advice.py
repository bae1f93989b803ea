"""Advice from what the DataLoader and the training process did, and the GPU-idle advice, without a Trainer; an
alert's advice in a running fit: the DataLoader's real worker processes read between marks, advice drawn from what
they did, and a failure to read them or the loader reported while the advice goes on without it."""

import dataclasses
from collections import UserDict
import gzip
import json
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from conftest import GPU_TRACES, records

from lightning_profkit.monitor.alerting.advice import (LoaderAdvice, LoaderFacts, data_wait_advice, gpu_idle_advice,
                                                      gpu_idle_notice, shards, tensors_in)
from lightning_profkit.monitor.timing.fetch_timer import FetchStats
from lightning_profkit.monitor.timing.loader_busy import LoaderBusy, WaitBusy, WorkersBusy
from lightning_profkit.trace.columns import columns
from lightning_profkit.trace.host_steps import window_figures


def test_advice_from_the_loader():
    lines = data_wait_advice(LoaderFacts(num_workers=0, cpus=8, on_cuda=True))
    assert lines[0].startswith("num_workers=0") and "num_workers=6" in lines[0]
    assert any("pin_memory=True" in line for line in lines)
    lines = data_wait_advice(LoaderFacts(num_workers=2, cpus=16, processes_per_node=2, persistent_workers=False,
                                         pin_memory=True, on_cuda=True), startup_s=4.0, train_s=60.0)
    assert "num_workers=6" in lines[0] and "8 CPUs per rank" in lines[0]
    assert any("persistent_workers=True" in line and "4.0 s" in line for line in lines)
    assert not any("pin_memory" in line for line in lines)
    lines = data_wait_advice(LoaderFacts(num_workers=7, cpus=8, persistent_workers=True, prefetch_factor=2,
                                         batch_size=4), busy=LoaderBusy(WorkersBusy(0.9, 7, 5.0)))
    assert "compute on every CPU" in lines[0] and "busy 90% of the last 5.0 s" in lines[1]
    assert any("prefetch_factor=4" in line for line in lines)
    assert any("batch_size=4" in line for line in lines)
    # an iterable dataset read by 7 workers that shows no sharding: each worker yields it all, told first
    unsharded = data_wait_advice(LoaderFacts(num_workers=7, cpus=8, persistent_workers=True, iterable=True),
                                 busy=LoaderBusy(WorkersBusy(0.9, 7, 5.0)))
    assert unsharded[0].startswith("IterableDataset without get_worker_info() read by 7 workers, each yields every "
                                   "sample (7 copies an epoch): shard it first") and "busy 90%" in unsharded[1]
    sharded = data_wait_advice(LoaderFacts(num_workers=2, cpus=8, iterable=True, shards_itself=True))  # litdata's
    assert not any("get_worker_info" in line or "IterableDataset" in line for line in sharded)


def test_what_shows_that_an_iterable_dataset_shards():
    import torch

    class Unsharded(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield from range(10)

    class Sharded(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            yield from range(info.id if info else 0, 10, info.num_workers if info else 1)

    assert not shards(Unsharded()) and shards(Sharded())


@pytest.mark.parametrize("busy, says", [
    (WorkersBusy(0.23, 2, 4.0), ["the workers wait on storage, the network or a lock, not the CPU: try num_workers=4",
                                 "measured: 2 workers: busy 23% of the last 4.0 s"]),
    (WorkersBusy(0.23, 2, 4.0, queued=0.05), ["the workers wait on storage, the network or a lock, not the CPU",
                                              "measured: 2 workers: busy 23%, waiting for a CPU 5% of the last 4.0 s"]),
    (WorkersBusy(0.41, 2, 4.0, queued=0.52), ["the workers compute on CPUs that are all taken: make __getitem__ cheaper",
                                              "measured: 2 workers: busy 41%, waiting for a CPU 52% of the last 4.0 s"]),
    (WorkersBusy(0.95, 2, 4.0), ["the workers compute on every CPU there is: make __getitem__ cheaper",
                                 "measured: 2 workers: busy 95% of the last 4.0 s"]),
    (None, ["if the workers compute: make __getitem__ cheaper",
            "if they wait on storage or the network: try num_workers=4 (their CPU could not be read)"]),
], ids=["waiting", "waiting, a little queued", "computing on a crowded node", "computing", "unmeasured"])
def test_how_many_workers_rests_on_how_busy_they_were(busy, says):
    """Two workers on 2 CPUs: waiting on I/O (busy 23%) they gain from more workers than CPUs; computing (95%, or 41%
    and waiting for a CPU 52% beside other processes: not a wait on storage) from cheaper samples; unmeasured, the
    advice says it does not know which."""
    lines = data_wait_advice(LoaderFacts(num_workers=2, cpus=2, persistent_workers=True), busy=LoaderBusy(busy))
    assert len(lines) >= len(says) > 0 and all(line.startswith(said) for line, said in zip(lines, says)), lines


@pytest.mark.parametrize("workers, training, says", [
    (0, WaitBusy(0.97, 1.0, 6.0, 8.0), ["num_workers=0: the training process loads every batch itself: try "
                                        "num_workers=6, persistent_workers=True",
                                        "measured: training process: on or waiting for a CPU 97-100% of its 6.0 s "
                                        "data wait in 8.0 s"]),
    (0, WaitBusy(0.0, 0.25, 6.0, 8.0), ["num_workers=0: the training process loads every batch, waiting on I/O: try "
                                        "num_workers=6", "measured: training process: on or waiting for a CPU 0-25%"]),
    (0, WaitBusy(0.2, 0.6, 6.0, 8.0), ["num_workers=0: the training process loads every batch itself: try "
                                       "num_workers=6", "measured: training process: on or waiting for a CPU 20-60%"]),
    (4, WaitBusy(0.8, 0.8, 6.0, 8.0, rank=3), ["the training process unpacks every batch the workers send",
                                               "measured: rank 3's training process: on or waiting for a CPU 80% of "
                                               "its 6.0 s data wait in 8.0 s"]),
    (4, WaitBusy(0.1, 0.7, 6.0, 8.0), ["num_workers=4 with 8 CPUs: try num_workers=6"]),
    # taking a batch costs the training process 12 ms of CPU, making one the workers 5 ms in all, and the thread ran
    # through 60% of its wait less its wait for a CPU: taking them is the limit
    (6, WaitBusy(0.6, 0.65, 6.0, 8.0, cpu_ms_per_batch=12.0, taking=0.6), [
        "the training process unpacks every batch the workers send; more workers do not help: return fewer, larger "
        "tensors", "measured: training process: on or waiting for a CPU 60-65% of its 6.0 s data wait in 8.0 s",
        "measured: training process: 12.0 ms of CPU in each fetch, 60% of its wait less its wait for a CPU"]),
    # the same CPU a batch, but the thread asleep through its wait: workers that wait on storage
    (6, WaitBusy(0.05, 0.3, 6.0, 8.0, cpu_ms_per_batch=12.0, taking=0.1), ["the workers wait on storage"]),
    # taking costs little beside making: the workers are the limit, whatever the thread did
    (6, WaitBusy(0.6, 0.65, 6.0, 8.0, cpu_ms_per_batch=1.0, taking=0.6), ["the workers compute on every CPU there is"]),
])
def test_where_the_batches_are_made_rests_on_the_training_threads_cpu_in_its_wait(workers, training, says):
    """A training thread on a CPU (or waiting for one) through its wait makes or unpacks the batches itself; one that
    sleeps there waits for workers or storage (the advice had only the configuration to go on)."""
    made = 5.0 if training.cpu_ms_per_batch == 12.0 else 200.0
    share = 0.1 if training.low < 0.1 else 0.9  # workers that wait on storage, or compute
    workers_busy = WorkersBusy(share, workers, 8.0, cpu_ms_per_batch=made) if training.cpu_ms_per_batch else None
    lines = data_wait_advice(LoaderFacts(num_workers=workers, cpus=8, persistent_workers=True),
                             busy=LoaderBusy(training=training, workers=workers_busy))
    assert len(lines) >= len(says) > 0 and all(line.startswith(said) for line, said in zip(lines, says)), lines


@pytest.mark.parametrize("tensors, says", [
    (300, "the training process unpacks every batch the workers send (300 tensors each); more workers do not help"),
    (None, "the training process unpacks every batch the workers send; more workers do not help"),
    (1, "the workers wait on storage"),
], ids=["300 tensors", "not read", "one tensor"])
def test_the_training_process_is_the_limit_only_with_tensors_to_merge(tensors, says):
    """The figures of workers that sleep, read beside two CPU-burning processes (the thread took 1.8 ms of CPU a
    batch, 33% of its shortened wait; the workers 1.9 ms): with one tensor a batch there is nothing to merge, and the
    wait is for the workers."""
    training = WaitBusy(0.5, 1.0, 0.1, 0.4, cpu_ms_per_batch=1.8, taking=0.33)
    workers = WorkersBusy(0.04, 2, 0.4, queued=0.11, cpu_ms_per_batch=1.9)
    facts = LoaderFacts(num_workers=2, cpus=2, persistent_workers=True, tensors_per_batch=tensors)
    lines = data_wait_advice(facts, busy=LoaderBusy(training=training, workers=workers))
    assert lines[0].startswith(says), lines


@dataclasses.dataclass
class Pair:
    image: object
    labels: object


def test_tensors_in_a_batch_are_counted_through_its_containers():
    x = torch.zeros(2)
    batch = {"a": [x, (x, x)], "b": Pair(x, {"c": x, "d": "text"}), "e": 3, "f": Pair, "g": np.zeros(3)}
    assert tensors_in(batch) == 6
    assert tensors_in(UserDict({i: x for i in range(300)})) == 300  # a mapping of another class (BatchEncoding's)
    assert tensors_in([x] * 1000, most=100) == 99  # counted over at most 100 items: the list and 99 of its own
    assert tensors_in([[x] for _ in range(1000)], most=100) < 100
    loop = []
    loop.extend([loop] * 1000)
    assert tensors_in(loop) == 0  # each container once: a batch that holds itself costs its size, not its square
    assert tensors_in(None) is tensors_in("text") is tensors_in(object()) is None  # not a batch it can read


def test_a_batch_of_unknown_shape_leaves_the_advice_to_the_measured_figures():
    """A batch whose parts cannot be counted (a class the count does not walk, a field that raises) is unknown, not
    "fewer than 8": the training process is named the limit on the figures alone, and the advice stays whole."""
    @dataclasses.dataclass
    class Broken:
        x: object = dataclasses.field(init=False)

    for batch in (object(), Broken()):
        watch = LoaderAdvice(report=lambda *a: None)
        watch.see(batch)
        assert watch.tensors is None
    training = WaitBusy(0.6, 0.65, 6.0, 8.0, cpu_ms_per_batch=12.0, taking=0.6)
    workers = WorkersBusy(0.9, 6, 8.0, cpu_ms_per_batch=5.0)
    lines = data_wait_advice(LoaderFacts(num_workers=6, cpus=8), busy=LoaderBusy(training=training, workers=workers))
    assert lines[0].startswith("the training process unpacks every batch the workers send; more workers"), lines


def figures_of(path):
    return window_figures(columns(records(json.load(gzip.open(path))["traceEvents"])))


def test_gpu_idle_advice_on_real_traces(gpu_traces):
    """resnet50 with 4 workers: little data wait but the GPU idles 27%, mostly while the host runs operators; blocking
    copies take 4.5% of the steps."""
    figures = figures_of(gpu_traces / "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz")
    lines = gpu_idle_advice(figures)
    assert lines[0] == ("mostly running CPU operators (19% of the steps): the GPU outruns Python: larger batches, "
                        "torch.compile, CUDA graphs")
    assert lines[1].startswith("cudaMemcpyAsync") and "pin_memory=True" in lines[1]
    assert gpu_idle_notice(figures, "w", 0.2) is None  # idle 28%: not the GPU's problem to flag
    notice = gpu_idle_notice(dataclasses.replace(figures, gpu_idle_share=0.6), "runs/x/profiler/w", 0.2)
    assert notice and "idle 60%" in notice and "runs/x/profiler/w" in notice and lines[1] in notice
    cpu_only = figures_of(gpu_traces / "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert gpu_idle_advice(cpu_only) == [] and gpu_idle_notice(cpu_only, "w", 0.2) is None


def test_no_gpu_idle_notice_for_a_gpu_bound_h200_window():
    """The H200's compute-bound window (GPU idle 2.2% by HTA, 2.3-5.6% by NVML) once drew "the GPU was idle 52%
    ... the CPU side of the step is the limit", its host being steps ahead of its GPU."""
    figures = figures_of(GPU_TRACES.parent / "h200" / "compute_bound.pt.trace.json.gz")
    assert figures.gpu_idle_share < 0.05 and gpu_idle_notice(figures, "w", 0.2) is None


def test_a_process_decoding_its_own_batches_on_two_cpus_is_told_two_workers():
    """One worker on 2 CPUs makes batches no faster than the training process did (benchmarks/advice.py: 2.48 s of
    data wait, 2.37 s with one worker, 1.14 s with two)."""
    lines = data_wait_advice(LoaderFacts(num_workers=0, cpus=2), busy=LoaderBusy(training=WaitBusy(0.97, 1.0, 6.0, 8.0)))
    assert lines[0] == "num_workers=0: the training process loads every batch itself: try num_workers=2, " \
                       "persistent_workers=True", lines


def test_workers_restarting_every_epoch_are_told_to_persist_first_where_it_is_a_fifth_of_the_time():
    busy = LoaderBusy(WorkersBusy(0.05, 2, 8.0), WaitBusy(0.0, 0.1, 6.0, 8.0))
    facts = LoaderFacts(num_workers=2, cpus=8, persistent_workers=False)
    long = data_wait_advice(facts, startup_s=0.5, train_s=2.0, busy=busy)
    assert long[0] == "persistent_workers=True: workers start again every epoch, 0.5 s this epoch", long
    assert sum(line.startswith("persistent_workers=True") for line in long) == 1
    short = data_wait_advice(facts, startup_s=0.5, train_s=20.0, busy=busy)
    assert short[0].startswith("the workers wait on storage")
    assert any(line.startswith("persistent_workers=True: workers start") for line in short[1:]), short


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
