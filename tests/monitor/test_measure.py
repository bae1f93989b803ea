"""The after-window notice of an epoch's measure: two slow epochs running, and on CPU none counted that were busy
with other work after their window."""

from lightning_profkit.monitor.timing.measure import EpochMeasure


def notices(ratios, busy_after, on_cuda=False):
    measure = EpochMeasure(lambda *args: None)
    measure.on_cuda = on_cuda
    said = []
    for ratio, busy in zip(ratios, busy_after):
        measure.busy_after = busy  # as the epoch's figures leave it
        said.append(measure.after_window(ratio) is not None)
    return said


def test_two_slow_epochs_running_give_the_notice_and_a_busy_machine_none():
    assert notices([2.0, 2.0, 2.0], [0.1, None, 0.2]) == [False, True, True]
    assert notices([2.0, 1.0, 2.0], [0.1, 0.1, 0.1]) == [False, False, False]  # not running
    assert notices([2.0, 2.0, 2.0], [0.8, 0.8, 0.1]) == [False, False, False]  # waiting for a CPU: not counted
    assert notices([1.2, 1.2], [0.8, 0.8], on_cuda=True) == [False, True]  # CUDA: counted, at its own limit
