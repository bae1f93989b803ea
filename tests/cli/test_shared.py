"""What every profkit command shares: counting arguments, a run's trace folder, the exit status that names each
trace left out."""

import argparse

import pytest

from lightning_profkit.cli.shared import LEFT_OUT, CommandError, at_least_1, exit_status, trace_dir_of


def test_a_count_is_a_whole_number_of_1_or_more():
    assert at_least_1("3") == 3
    for text, says in (("0", "must be at least 1, got 0"), ("2.5", "must be a whole number, got '2.5'")):
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            at_least_1(text)


def test_a_run_folders_traces_are_in_its_profiler_folder(tmp_path):
    assert trace_dir_of(str(tmp_path)) == str(tmp_path)
    (tmp_path / "profiler").mkdir()
    assert trace_dir_of(str(tmp_path)) == str(tmp_path / "profiler")
    with pytest.raises(CommandError, match="nope: no such folder"):
        trace_dir_of(str(tmp_path / "nope"))


def test_each_trace_left_out_is_named_once_and_sets_the_exit_status(capsys):
    assert exit_status([]) == 0
    assert exit_status(["a.json: not JSON", "a.json: not JSON", "b\x1b[2J.json: empty file"]) == LEFT_OUT
    assert capsys.readouterr().err.splitlines() == ["profkit: a.json: not JSON; left out",
                                                    "profkit: b\\x1b[2J.json: empty file; left out"]
