"""Rolling checks and alert rules, and the alert they raise, without a Trainer."""

import re

import pytest

from lightning_profkit.alerts import DataWaitAlert
from lightning_profkit.monitor.alerting.checks import AlertRule, BlockFigures, RollingChecks
from conftest import options


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
        checks.epoch_start(0.0, step, epoch)
        for step in range(step, step + length):
            if checks.due(step):
                said.append(checks.span(step))
                checks.take_block(0.0, 0.0, [], step)
        step += 1
    return said


def test_a_check_names_the_epochs_and_batches_its_steps_span():
    assert checks_over([64, 64], 100) == ["epoch 0 batch 0 to epoch 1 batch 35"]
    assert checks_over([50, 50, 50], 25)[1:3] == ["epoch 0, batches 25-49", "epoch 1, batches 0-24"]
    assert checks_over([10, 10, 10, 10], 35) == ["epoch 0 batch 0 to epoch 3 batch 4"]
    assert checks_over([30, 30, 30], 40) == ["epoch 0 batch 0 to epoch 1 batch 9", "epoch 1 batch 10 to epoch 2 batch 19"]


def test_a_fit_resumed_inside_an_epoch_counts_its_batches_from_the_epochs_start():
    checks = RollingChecks(0.2, 1, 0, 10, 1)
    checks.start_fit()
    checks.epoch_start(0.0, 105, 2, 100)  # resumed at batch 5 of epoch 2, whose batch 0 was step 100
    assert checks.due(114) and checks.span(114) == "epoch 2, batches 5-14"


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
        options(**{f"alert_{name}": value for name, value in args.items()})


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


def test_check_block_leaves_validation_out_and_carries_across_an_epoch_end():
    spans = [(9.0, 9.5), (12.0, 13.0)]  # the first is before the block: not in it
    checks = RollingChecks(0.2, 1, 0, 100, 1)
    checks.start_fit()
    checks.epoch_start(10.0, 0, 0)
    assert checks.take_block(15.0, fetch_s=1.5, validation_spans=spans, step=99) == BlockFigures(1.5, 4.0, 0.0)
    checks.start_fit()
    checks.epoch_start(10.0, 0, 0)
    checks.epoch_end(16.0, fetch_s=2.0, validation_spans=spans)  # the epoch ends here
    checks.epoch_start(20.0, 30, 1)  # the next epoch's fetch total starts from 0
    assert checks.take_block(21.0, fetch_s=0.25, validation_spans=[], step=99) == BlockFigures(2.25, 6.0, 0.0)
