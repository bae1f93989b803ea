"""Every argument of PerformanceMonitor, its invalid values, and the error each gets at construction (the checks of
Options)."""

import itertools
import pickle
import re

import pytest
import torch

from lightning_profkit import PerformanceMonitor

# (argument, invalid value, error message fragment); ValueError naming the argument unless stated
TABLE = [
    ("profile", "no", "`profile` must be True or False"),
    ("skip_first", -1, "`skip_first` must be an integer >= 0"),
    ("skip_first", 1.5, "`skip_first` must be an integer >= 0"),
    ("warmup", True, "`warmup` must be an integer >= 0"),
    ("active", 0, "`active` must be an integer >= 1"),
    ("steps", "", "`steps` must name at least one step"),
    ("steps", "5-3", "`steps` has a reversed range"),
    ("steps", "a-b", "`steps` has an invalid range"),
    ("steps", [[1, 2, 3]], "`steps` has an invalid entry"),
    ("steps", "-4", "`steps` must not be negative"),
    ("every_n_steps", 0, "`every_n_steps` must be an integer >= 1"),
    ("every_n_steps", 3, "`every_n_steps` (3) must be at least `warmup` + `active` (4)"),
    ("step_filter", 5, "`step_filter` must be callable"),
    ("ranks", [], "`ranks` must be a non-empty list"),
    ("ranks", [-1], "`ranks` must be a non-empty list of ranks >= 0"),
    ("ranks", "0", "`ranks` must be a non-empty list"),
    ("dirpath", 5, "`dirpath` must be a folder path"),
    ("activities", ["tpu"], "`activities` must be a list of 'cpu' and/or 'cuda'"),
    ("activities", "cpu", "`activities` must be a list"),
    ("record_shapes", "yes", "`record_shapes` must be True or False"),
    ("profile_memory", 1, "`profile_memory` must be True or False"),
    ("with_stack", None, "`with_stack` must be True or False"),
    ("with_flops", "no", "`with_flops` must be True or False"),
    ("with_modules", 0, "`with_modules` must be True or False"),
    ("quiet", "yes", "`quiet` must be True or False"),
    ("flush_timeout", -1, "`flush_timeout` must be a number of seconds >= 0"),
    ("flush_timeout", "60", "`flush_timeout` must be a number of seconds >= 0"),
    ("log_metrics", 1, "`log_metrics` must be True or False"),
    ("alert_threshold", 0, "`alert_threshold` must be a ratio between 0 and 1"),
    ("alert_threshold", 1.2, "`alert_threshold` must be a ratio between 0 and 1"),
    ("alert_threshold", "0.2", "`alert_threshold` must be a ratio between 0 and 1"),
    ("alert_window", 0, "`alert_window` must be an integer >= 1"),
    ("alert_patience", 0, "`alert_patience` must be an integer >= 1"),
    ("alert_cooldown", -5, "`alert_cooldown` must be an integer >= 0"),
    ("alert_action", "explode", "`alert_action` must be one of 'warn', 'stop', 'raise'"),
    ("on_alert", "print", "`on_alert` must be callable"),
    ("capture_on_alert", "yes", "`capture_on_alert` must be True or False"),
    ("max_captures", -1, "`max_captures` must be an integer >= 0"),
    ("keep_last_windows", 0, "`keep_last_windows` must be an integer >= 1 or None"),
    ("max_trace_mb", 0, "`max_trace_mb` must be megabytes of trace JSON > 0 (or None for no limit)"),
    ("max_trace_mb", "1GB", "`max_trace_mb` must be megabytes of trace JSON > 0 (or None for no limit)"),
    ("validation_batches", "3-1", "`validation_batches` has a reversed range"),
    ("validation_batches", "x", "`validation_batches` has an invalid range"),
    ("storage_options", "key=abc", "`storage_options` must be a dict of str keys and JSON values"),
    ("storage_options", {"session": object()}, "`storage_options` must be a dict of str keys and JSON values"),
]
COMBINATIONS = [
    (dict(steps="1", every_n_steps=5), "Pass at most one of `steps`, `every_n_steps`, `step_filter`"),
    (dict(profile=False, steps="1-2"), "`profile=False` records no windows; do not pass `steps`"),
    (dict(profile=False, validation_batches="0-1"), "`profile=False` records no windows; do not pass `validation_batches`"),
]


@pytest.mark.parametrize("argument, value, message", TABLE, ids=[re.sub(r" at 0x[0-9a-f]+", "", f"{a}={v!r}") for a, v, _ in TABLE])
def test_invalid_value_names_the_argument(argument, value, message):
    with pytest.raises(ValueError) as err:
        PerformanceMonitor(**{argument: value})
    assert message in str(err.value)


@pytest.mark.parametrize("kwargs, message", COMBINATIONS)
def test_conflicting_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PerformanceMonitor(**kwargs)


def test_every_argument_is_in_the_table():
    import inspect

    tested = {a for a, _, _ in TABLE}
    assert set(inspect.signature(PerformanceMonitor).parameters) == tested


def test_the_signature_holds_the_defaults_and_the_checked_options_name_the_same_arguments():
    """PerformanceMonitor's signature is what Lightning's CLI (YAML) and editors read, and the one place of the
    defaults; Options checks the same arguments, in the same order, with the same types, and has no defaults."""
    import dataclasses
    import inspect
    import typing

    from lightning_profkit.monitor.options import Options

    signature = inspect.signature(PerformanceMonitor).parameters.values()
    hints = typing.get_type_hints(PerformanceMonitor.__init__)
    fields = dataclasses.fields(Options)
    option_hints = typing.get_type_hints(Options)
    assert [p.name for p in signature] == [f.name for f in fields]
    assert [hints[p.name] for p in signature] == [option_hints[f.name] for f in fields]
    assert all(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING for f in fields)
    assert all(p.default is not inspect.Parameter.empty for p in signature)


def test_the_plan_of_a_metrics_only_run_says_which_windows_it_may_still_record():
    """``profile=False`` still records a window after an alert or on request (``max_captures``): the plan says so
    (it said "no profiler windows", then recorded one after an alert)."""
    assert PerformanceMonitor(profile=False).options.plan("out", 100) == [
        "metrics only (profile=False); up to 10 windows after an alert or when asked (profkit capture)", "traces -> out"]
    assert PerformanceMonitor(profile=False, alert_threshold=None).options.plan("out", 100)[0] == (
        "metrics only (profile=False); up to 10 windows when asked (profkit capture)")
    assert PerformanceMonitor(profile=False, max_captures=0).options.plan("out", 100) == [
        "metrics only (profile=False)", "traces -> out"]


def test_the_plan_names_the_steps_and_ranks_and_says_when_this_rank_cannot_profile():
    assert PerformanceMonitor(steps="5-7", ranks=[0, 2]).options.plan("out", 100) == [
        "profiling the fit's steps 5-7 on ranks 0,2", "traces -> out"]
    assert PerformanceMonitor(steps="5-7").options.plan("out", 100, disabled=True)[0] == (
        "profiling the fit's steps 5-7 on all ranks: disabled, see the warning")


def test_ranks_and_activities_given_as_iterators_are_kept_and_bounded():
    """A generator was read by the argument's check and kept: `ranks=(r for r in [2, 0])` profiled no rank. An
    endless one is read up to a bound; an array is read as its items."""
    monitor = PerformanceMonitor(ranks=(r for r in [2, 0]), activities=(a for a in ["cpu"]))
    assert monitor.options.ranks == (0, 2) and monitor.options.activities == ("cpu",)
    assert pickle.loads(pickle.dumps(monitor)).options.ranks == (0, 2)
    with pytest.raises(ValueError, match=r"^`ranks` must be a non-empty list of ranks >= 0, got more than 1000000"):
        PerformanceMonitor(ranks=itertools.count())
    with pytest.raises(ValueError, match=r"^`ranks` must be a non-empty list of ranks >= 0, got \(tensor\(0\)"):
        PerformanceMonitor(ranks=torch.tensor([0, 1]))
