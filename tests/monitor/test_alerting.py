"""Alert rules and advice, without a Trainer."""

import dataclasses
import gzip
import json
import re

import pytest

from conftest import GPU_TRACES, records
from lightning_profkit.alerts import DataWaitAlert
from lightning_profkit.monitor.alerting.advice import LoaderFacts, data_wait_advice, gpu_idle_advice, gpu_idle_notice
from lightning_profkit.monitor.alerting.checks import AlertRule, CheckBlock, RollingChecks
from lightning_profkit.monitor.options import Options
from lightning_profkit.monitor.timing.loader_busy import LoaderBusy, LoaderWatch, WaitBusy, WorkersBusy
from lightning_profkit.trace.columns import columns
from lightning_profkit.trace.host_steps import window_figures


def run(rule, ratios, every=10):
    """Feed checks at steps every, 2*every, ...; the steps at which an alert fired."""
    return [(i + 1) * every for i, r in enumerate(ratios) if rule.check(r, (i + 1) * every)]


def test_patience_counts_consecutive_checks():
    assert run(AlertRule(0.2, patience=3, cooldown=0), [0.5, 0.5, 0.1, 0.5, 0.5, 0.5, 0.5]) == [60]
    assert run(AlertRule(0.2, patience=1, cooldown=0), [0.1, 0.3]) == [20]
    assert run(AlertRule(0.2, patience=2, cooldown=0), [0.2, 0.2, 0.2]) == []  # at the threshold is not over it


def test_one_alert_per_episode_and_cooldown_between_episodes():
    flicker = [0.5, 0.5, 0.5, 0.1, 0.5, 0.5, 0.5, 0.1, 0.5, 0.5]
    assert run(AlertRule(0.2, patience=1, cooldown=0), flicker) == [10, 50, 90]
    assert run(AlertRule(0.2, patience=1, cooldown=45), flicker) == [10, 90]  # the episode at 50 is too soon
    rule = AlertRule(0.2, patience=1, cooldown=0)
    assert run(rule, [0.9] * 50) == [10] and rule.in_episode and rule.alerts == 1


def checks_over(epoch_lengths, window):
    """What each rolling check of a fit with these epochs (steps) measures."""
    checks, said, step = RollingChecks(0.2, 1, 0, window, 1), [], 0
    checks.start_fit()
    for epoch, length in enumerate(epoch_lengths):
        checks.epoch_start(0.0, 0.0, step, epoch)
        for step in range(step, step + length):
            if checks.due(step):
                said.append(checks.span(step))
                checks.take_block(0.0, 0.0, [], step)
        step += 1
    return said


def test_a_check_names_the_epochs_its_steps_span():
    assert checks_over([64, 64], 100) == ["steps 0-99 (epochs 0-1)"]
    assert checks_over([50, 50, 50], 25)[1:3] == ["steps 25-49 (epoch 0)", "steps 50-74 (epoch 1)"]
    assert checks_over([10, 10, 10, 10], 35) == ["steps 0-34 (epochs 0-3)"]
    assert checks_over([30, 30, 30], 40) == ["steps 0-39 (epochs 0-1)", "steps 40-79 (epochs 1-2)"]


def test_rule_state_round_trips():
    rule = AlertRule(0.2, patience=2, cooldown=100)
    run(rule, [0.5, 0.5, 0.5])
    again = AlertRule(0.2, patience=2, cooldown=100)
    again.load_state_dict(rule.state_dict())
    assert again == rule


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        (dict(threshold=0), "alert_threshold"), (dict(threshold=1.5), "alert_threshold"),
        (dict(threshold="0.2"), "alert_threshold"), (dict(window=0), "alert_window"),
        (dict(patience=0), "alert_patience"), (dict(cooldown=-1), "alert_cooldown"),
        (dict(action="explode"), "alert_action"),
    ],
)
def test_bad_alert_arguments(kwargs, argument):
    args = dict(threshold=0.2, window=100, patience=2, cooldown=0, action="warn") | kwargs
    with pytest.raises(ValueError, match=argument):
        Options(**{f"alert_{name}": value for name, value in args.items()})


def test_message_names_ratio_rank_advice_and_trace():
    alert = DataWaitAlert(0.62, 0.2, 3, 1200, "epoch 3", worst_rank=1, advice=["try num_workers=6"], trace_dir="/t/w")
    text = alert.message
    assert "62%" in text and "on rank 1" in text and "num_workers=6" in text and "/t/w" in text
    assert alert.as_dict()["step"] == 1200


def test_tensorboard_shows_the_alerts_text_as_written():
    """TensorBoard's Text tab renders Markdown and drops HTML: an advice line naming ``__getitem__`` stayed bold
    ``getitem``. Rendered by TensorBoard's own function, the text reads as the console's."""
    from html import unescape

    from tensorboard.plugin_util import markdown_to_safe_html

    advice = ["`Dataset.__getitem__` took *most* of [the] fetch (see #1 & <b>x</b>) | 2.5 - 1 ~ ok!", "\\path_\\x"]
    alert = DataWaitAlert(0.62, 0.2, 3, 1200, "epoch 3", advice=advice, trace_dir="/runs/a_b/__c__/step=[1]")
    html = markdown_to_safe_html(alert.markdown)
    shown = unescape(re.sub(r"<[^>]+>", "", html))
    for text in [alert.headline, *advice, alert.trace_dir]:
        assert text in shown, (text, html)
    assert html.count("<strong>") == 1 and "<em>" not in html and "<code>" not in html and "<a " not in html


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
                                         batch_size=4, iterable=True), busy=LoaderBusy(WorkersBusy(0.9, 7, 5.0)))
    assert "compute on every CPU" in lines[0] and "busy 90% of the last 5.0 s" in lines[1]
    assert any("prefetch_factor=4" in line for line in lines)
    assert any("batch_size=4" in line for line in lines)
    assert any("get_worker_info" in line for line in lines)
    sharded = data_wait_advice(LoaderFacts(num_workers=2, cpus=8, iterable=True, shards_itself=True))  # litdata's
    assert not any("get_worker_info" in line or "IterableDataset" in line for line in sharded)


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
    assert all(line.startswith(said) for line, said in zip(lines, says)), lines


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
])
def test_where_the_batches_are_made_rests_on_the_training_threads_cpu_in_its_wait(workers, training, says):
    """A training thread on a CPU (or waiting for one) through its wait makes or unpacks the batches itself; one that
    sleeps there waits for workers or storage (the advice had only the configuration to go on)."""
    lines = data_wait_advice(LoaderFacts(num_workers=workers, cpus=8, persistent_workers=True),
                             busy=LoaderBusy(training=training))
    assert all(line.startswith(said) for line, said in zip(lines, says)), lines


def test_loader_busy_crosses_ranks_as_numbers():
    busy = LoaderBusy(WorkersBusy(0.25, 2, 3.0), WaitBusy(0.5, 0.75, 1.0, 3.0))
    assert LoaderBusy.from_values(busy.as_values(), 1) == LoaderBusy(WorkersBusy(0.25, 2, 3.0, 1),
                                                                    WaitBusy(0.5, 0.75, 1.0, 3.0, 1))
    queued = LoaderBusy(WorkersBusy(0.25, 2, 3.0, queued=0.5))
    assert LoaderBusy.from_values(queued.as_values(), 1) == LoaderBusy(WorkersBusy(0.25, 2, 3.0, 1, 0.5))
    assert LoaderBusy.from_values(LoaderBusy().as_values()) == LoaderBusy()


def test_loader_watch_is_the_cpu_over_the_wall_time_since_the_last_mark():
    cpu, thread = {11: 1.0, 12: 2.0}, [10.0]
    watch = LoaderWatch(read=lambda pid: (cpu[pid], None) if pid in cpu else None, thread_busy=lambda: thread[0])
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
    watch = LoaderWatch(read=seconds.get, thread_busy=lambda: 0.0)
    watch.busy([11, 12], 100.0, 0.0)
    seconds.update({11: (1.4, 1.9), 12: (2.6, 1.0)})  # in 2 s: 1.0 s on a CPU and 2.4 s waiting for one, of 4
    busy = watch.busy([11, 12], 102.0, 0.0).workers
    assert (busy.share, busy.queued) == (pytest.approx(0.25), pytest.approx(0.6)) and busy.computing == pytest.approx(0.85)


def figures_of(path):
    return window_figures(columns(records(json.load(gzip.open(path))["traceEvents"])))


def test_gpu_idle_advice_on_real_traces(gpu_traces):
    """resnet50 with 4 workers: little data wait but the GPU idles 28%; blocking copies are the reason."""
    figures = figures_of(gpu_traces / "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz")
    lines = gpu_idle_advice(figures)
    assert lines and lines[0].startswith("cudaMemcpyAsync") and "pin_memory=True" in lines[0]
    assert gpu_idle_notice(figures, "w", 0.2) is None  # idle 28%: not the GPU's problem to flag
    notice = gpu_idle_notice(dataclasses.replace(figures, gpu_idle_share=0.6), "runs/x/profiler/w", 0.2)
    assert notice and "idle 60%" in notice and "runs/x/profiler/w" in notice and lines[0] in notice
    cpu_only = figures_of(gpu_traces / "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert gpu_idle_advice(cpu_only) == [] and gpu_idle_notice(cpu_only, "w", 0.2) is None


def test_no_gpu_idle_notice_for_a_gpu_bound_h200_window():
    """The H200's compute-bound window (GPU idle 2.2% by HTA, 2.3-5.6% by NVML) once drew "the GPU was idle 52%
    ... the CPU side of the step is the limit", its host being steps ahead of its GPU."""
    figures = figures_of(GPU_TRACES.parent / "h200" / "compute_bound.pt.trace.json.gz")
    assert figures.gpu_idle_share < 0.05 and gpu_idle_notice(figures, "w", 0.2) is None


def test_check_block_leaves_validation_out_and_carries_across_an_epoch_end():
    block = CheckBlock()
    block.start(10.0, fetch_s=2.0)
    spans = [(9.0, 9.5), (12.0, 13.0)]  # the first is before the block: not in it
    assert block.so_far(15.0, fetch_s=3.5, validation_spans=spans) == (1.5, 4.0)
    carry = block.so_far(16.0, fetch_s=4.0, validation_spans=spans)  # the epoch ends here
    block.start(20.0, fetch_s=0.0, carry=carry)  # the next epoch's fetch total starts from 0
    assert block.so_far(21.0, fetch_s=0.25, validation_spans=[]) == (2.25, 6.0)
