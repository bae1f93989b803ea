"""A request from ``profkit capture`` read in a running fit: the steps to record and the lines to print, a refused or
unreadable request told once through ``report``."""

import json
import os

from lightning_profkit.capture_request import MAX_STEPS, REQUEST, LiveRun, request_capture
from lightning_profkit.monitor.profiling.captures import requested_steps


def take(live, now=10.0):
    told = []
    steps, lines = requested_steps(live, now, 3, lambda message, key: told.append(key))
    return steps, lines, told


def test_a_request_gives_its_steps_or_the_windows_length(tmp_path):
    live = LiveRun(str(tmp_path))
    try:
        assert take(live, 1.0) == (None, [], [])  # nothing asked
        request_capture(str(tmp_path), 7)
        assert take(live, 1.5) == (None, [], [])  # asked, but the next poll is not due
        assert take(live, 2.0) == (7, [], [])
        request_capture(str(tmp_path))
        assert take(live, 3.0) == (3, [], [])  # no steps named: the window's length (active)
        request_capture(str(tmp_path), 5000)
        assert take(live, 4.0) == (MAX_STEPS, [f"a capture request asked for 5000 steps; recording at most {MAX_STEPS}"], [])
    finally:
        live.end()


def test_a_refused_request_is_reported_and_records_nothing(tmp_path):
    live = LiveRun(str(tmp_path))
    try:
        (tmp_path / "elsewhere.json").write_text(json.dumps({"steps": 5}))
        os.symlink(tmp_path / "elsewhere.json", tmp_path / REQUEST)
        assert take(live) == (None, [], ["request_refused"])
        assert (tmp_path / "elsewhere.json").exists()
    finally:
        live.end()


def test_a_request_half_written_by_hand_is_still_a_request_for_one_window(tmp_path):
    live = LiveRun(str(tmp_path))
    try:
        (tmp_path / REQUEST).write_text('{"steps": ')
        assert take(live) == (3, [], [])
        assert not (tmp_path / REQUEST).exists()
    finally:
        live.end()


def test_a_trace_folder_that_became_a_file_is_reported_unreadable_once_not_as_a_refusal(tmp_path):
    folder = tmp_path / "runs"
    live = LiveRun(str(folder))
    try:
        for name in os.listdir(folder):
            os.remove(folder / name)
        folder.rmdir()
        folder.write_text("a file now")
        assert take(live) == (None, [], ["request"])
        assert take(live, 20.0) == (None, [], [])  # polling stopped: told once
    finally:
        live.end()
