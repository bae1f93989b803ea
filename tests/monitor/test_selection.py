"""Step selection: pure functions, no Trainer."""

import pytest
from conftest import make_selection, selections

from lightning_profkit.monitor.profiling.selection import EpochWindow, capture_steps, parse_step_ranges


def active_steps(sel, n, epoch_len=None):
    sel = sel.for_epoch(epoch_len)
    return [s for s in range(n) if sel.is_active(s, s)]


def test_epoch_window_default_and_short_epoch():
    sel = make_selection(10, 1, 3, None, None, None)
    assert active_steps(sel, 100, 100) == [11, 12, 13]
    # an epoch of 6 batches cannot hold skip 10 + warmup 1 + active 3: the window moves to fit
    assert active_steps(sel, 6, 6) == [3, 4, 5]
    assert sel.for_epoch(6).warmup_before(2, 2) == 1
    assert "earlier than skip_first=10, to fit an epoch of 6 batches" in sel.for_epoch(6).describe()
    assert sel.for_epoch(100).describe() == "batches 11-13 of every epoch (after 1 warm-up batch)"


@pytest.mark.parametrize("length, recorded, warmup, said", [
    (1, [0], 0, "batch 0 of every epoch (no warm-up; an epoch has 1 batch, fewer than warmup + active = 4)"),
    (2, [1], 1, "batch 1 of every epoch (after 1 warm-up batch; an epoch has 2 batches"),
    (3, [1, 2], 1, "batches 1-2 of every epoch (after 1 warm-up batch; an epoch has 3 batches"),
    (4, [1, 2, 3], 1, "batches 1-3 of every epoch (after 1 warm-up batch; earlier than skip_first=10"),
    (0, [], 0, "no batches (an epoch has 0 batches)"),
])
def test_an_epoch_shorter_than_the_window_records_what_it_can_and_says_so(length, recorded, warmup, said):
    """Lightning's bug_report_model.py has epochs of 1 batch: it records that batch, and the plan says so."""
    sel = make_selection(10, 1, 3, None, None, None)
    fitted = sel.for_epoch(length)
    assert active_steps(sel, length, length) == recorded
    assert fitted.warmup == warmup and fitted.describe().startswith(said), fitted.describe()
    assert fitted.for_epoch(100) == sel.for_epoch(100)  # the next epoch of a full length gets the whole window


def test_ranges_parse_merge_and_lookup():
    assert parse_step_ranges("100-102, 500-502") == ((100, 102), (500, 502))
    assert parse_step_ranges([[5, 6], 7, "1-2"]) == ((1, 2), (5, 7))
    sel = make_selection(0, 1, 1, "3-4,9", None, None)
    assert active_steps(sel, 20) == [3, 4, 9]
    assert [s for s in range(20) if sel.warmup_before(s, s) == 1] == [2, 8]


def test_every_n_and_filter():
    sel = make_selection(0, 1, 2, None, 10, None)
    assert active_steps(sel, 35) == [10, 11, 20, 21, 30, 31]
    sel = make_selection(0, 0, 1, None, None, lambda s: s in (4, 5, 17))
    assert active_steps(sel, 20) == [4, 5, 17]


def test_joining_a_window_in_progress_uses_the_warmup_left():
    sel = make_selection(0, 2, 3, "10-12", None, None)
    assert sel.warmup_before(8, 8) == 2  # the normal start
    assert sel.warmup_before(9, 9) == 1  # epoch started at 9: one warm-up step left
    assert sel.warmup_before(11, 11) == 0  # resumed inside the window
    assert sel.warmup_before(13, 13) is None


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        (dict(skip_first=-1), "skip_first"),
        (dict(warmup=-2), "warmup"),
        (dict(active=0), "active"),
        (dict(active=1.5), "active"),
        (dict(steps=""), "steps"),
        (dict(steps="5-3"), "steps"),
        (dict(steps="-4"), "steps"),
        (dict(steps=[]), "steps"),
        (dict(steps="a-b"), "steps"),
        (dict(steps=[[1, 2, 3]]), "steps"),
        (dict(every_n_steps=0), "every_n_steps"),
        (dict(every_n_steps=3, warmup=1, active=3), "every_n_steps"),
        (dict(step_filter=5), "step_filter"),
        (dict(steps="1", every_n_steps=5), "steps"),
    ],
)
def test_bad_selection_names_the_argument(kwargs, argument):
    args = dict(skip_first=10, warmup=1, active=3, steps=None, every_n_steps=None, step_filter=None)
    args.update(kwargs)
    with pytest.raises(ValueError, match=argument):
        make_selection(**args)


def test_epoch_window_is_frozen_per_epoch():
    sel = EpochWindow(2, 1, 2)
    assert sel.for_epoch(None) == EpochWindow(2, 1, 2, 2)


SELECTIONS = selections()


@pytest.mark.parametrize("name", SELECTIONS)
def test_next_active_is_the_first_active_step_within_the_horizon(name):
    sel = SELECTIONS[name]
    for horizon in (1, 3, 50):
        for step in range(45):
            expected = next((s for s in range(step, step + horizon) if sel.is_active(s, s)), None)
            assert sel.next_active(step, step, horizon) == expected, (step, horizon)


@pytest.mark.parametrize("after, last_step, expected", [
    (19, None, (21, 23)),  # a warm-up step, then the window
    (19, 100, (21, 23)),
    (19, 23, (21, 23)),  # it fits exactly
    (19, 22, (20, 22)),  # at once: the warm-up would push the window past the fit's end
    (19, 20, (20, 20)),  # as much as is left
    (19, 19, None),  # the fit ends at the alert's step: nothing to record
])
def test_a_capture_never_asks_for_steps_past_the_fits_end(after, last_step, expected):
    assert capture_steps(after, 3, 1, last_step) == expected
