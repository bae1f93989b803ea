"""AlertDelivery without a Trainer: what rank zero sends when an alert fires, the line that names the trace recorded
for it once written, and that a failing ``on_alert`` or logger never reaches training."""

import warnings
from dataclasses import replace

from lightning_profkit.alerts import DataWaitAlert, DataWaitWarning
from lightning_profkit.monitor.alerting.delivery import AlertDelivery


def alert(step):
    return DataWaitAlert(0.5, 0.2, 0, step, f"steps {step - 9}-{step} (epoch 0)", advice=["try num_workers=1"])


def deliver(delivery, *calls):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for call, *args in calls:
            getattr(delivery, call)(*args)
    return [str(w.message) for w in caught if w.category is DataWaitWarning]


def test_sent_alerts_warn_and_reach_the_hook_and_the_loggers():
    got, logged, problems = [], [], []
    delivery = AlertDelivery(got.append, lambda message, key: problems.append(key), logged.append)
    warned = deliver(delivery, ("send", alert(19)))
    assert warned == [alert(19).message] and got == logged == [alert(19)] and not problems


def test_other_ranks_decide_alike_but_say_nothing():
    got = []
    delivery = AlertDelivery(got.append, lambda *a: None)
    delivery.to_user = False
    assert deliver(delivery, ("send", alert(19))) == [] and got == []


def recorded(step, steps):
    return DataWaitAlert(0.5, 0.2, 0, step, f"epoch 0, batches {step - 9}-{step}", recording=steps)


def test_an_alert_goes_at_once_and_a_line_names_its_trace_when_written():
    got = []
    delivery = AlertDelivery(got.append, lambda *a: None)
    first, later = recorded(19, (21, 23)), recorded(59, (61, 63))
    warned = deliver(delivery, ("send", first), ("send", later))
    assert got == [first, later] and warned == [a.message for a in (first, later)]
    assert "Recording 3 steps after it; their trace is named when written" in warned[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ((was, named),) = delivery.window_written("/r/epoch=0000-batch=000021-000023/t.json.gz", 21)
    assert [str(w.message) for w in caught] == [
        "trace of the steps after the alert (epoch 0, batches 10-19):\n  /r/epoch=0000-batch=000021-000023"]
    assert was is first and named == replace(first, trace_dir="/r/epoch=0000-batch=000021-000023")
    assert (first.trace_dir, later.trace_dir) == (None, None)  # what on_alert was handed stays as it was
    assert "Trace of the steps after the alert: /r/epoch=0000-batch=000021-000023" in named.message
    assert delivery.recording == [later] and got == [first, later]  # the hook is not called again


def test_a_failing_hook_or_logger_is_reported_and_delivery_goes_on():
    problems = []

    def broken(_):
        raise ValueError("user bug")

    delivery = AlertDelivery(broken, lambda message, key: problems.append((key, message)), broken)
    warned = deliver(delivery, ("send", alert(19)), ("send", alert(39)))
    assert len(warned) == 2
    assert [key for key, _ in problems] == ["to_loggers", "on_alert"] * 2  # said once each by the callback's notices
    assert "ValueError('user bug')" in problems[1][1] and "training continues" in problems[1][1]
