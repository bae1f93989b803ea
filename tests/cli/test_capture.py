"""``profkit capture``: a request dropped where the running fit looks (its run folder's ``profiler/``, or the newest
``run=*`` folder whose fit runs), and one line without a traceback where no fit runs or the input is wrong."""

import json
import os
import subprocess
import sys

import pytest

from lightning_profkit.capture_request import REQUEST, LiveRun
from lightning_profkit.cli import main
from lightning_profkit.cli.capture import find_run

PROFKIT = os.path.join(os.path.dirname(sys.executable), "profkit")


def killed_in(folder):
    """A fit's marker left in ``folder`` by its process, killed."""
    code = ("import os; from lightning_profkit.capture_request import LiveRun; "
            f"LiveRun({str(folder)!r}); os.kill(os.getpid(), 9)")
    subprocess.run([sys.executable, "-c", code], timeout=60)
    return str(folder)


def test_a_request_goes_to_the_running_fits_trace_folder(tmp_path, capsys):
    live = LiveRun(str(tmp_path / "version_0" / "profiler"))  # a fit of this process
    try:
        assert main(["capture", str(tmp_path / "version_0"), "--steps", "4"]) == 0
        request = json.loads((tmp_path / "version_0" / "profiler" / REQUEST).read_text())
        assert request["steps"] == 4
        said = capsys.readouterr().out
        assert said.startswith(f"requested a window of 4 steps from the run in {tmp_path / 'version_0' / 'profiler'} "
                               f"(pid {os.getpid()} on ") and said.endswith("it starts within about a second\n")
    finally:
        live.end()


def test_of_runs_of_their_own_the_newest_running_one_gets_the_request(tmp_path):
    lives = [LiveRun(str(tmp_path / f"run={stamp}")) for stamp in ("20261205-1", "20261205-2")]
    lives[1].end()  # the newest has ended: the one before it still runs
    try:
        assert main(["capture", str(tmp_path)]) == 0
        assert json.loads((tmp_path / "run=20261205-1" / REQUEST).read_text())["steps"] is None
    finally:
        lives[0].end()


def test_a_newer_run_killed_with_its_marker_left_does_not_hide_a_running_one(tmp_path):
    killed = tmp_path / "run=20261205-2"  # its process killed: the marker stays, naming a process that is gone
    killed_in(killed)
    live = LiveRun(str(tmp_path / "run=20261205-1"))
    try:
        assert (killed / ".profkit-run").exists()
        assert main(["capture", str(tmp_path)]) == 0
        assert json.loads((tmp_path / "run=20261205-1" / REQUEST).read_text())["steps"] is None
        assert not (killed / REQUEST).exists()
    finally:
        live.end()
    done = subprocess.run([PROFKIT, "capture", str(tmp_path)], capture_output=True, text=True)  # none runs now
    assert done.returncode == 1 and "run=20261205-2: the run that wrote .profkit-run is not running (its process" \
        in done.stderr, done.stderr


def test_a_run_folder_that_is_a_link_is_passed_over(tmp_path):
    """Someone who may write in a shared folder plants the newest ``run=`` name as a link to a folder where another
    fit of the user's runs: the request goes to the run that lies in the folder, never through the link."""
    elsewhere, lives = tmp_path / "elsewhere", [LiveRun(str(tmp_path / "shared" / "run=20261205-1"))]
    lives.append(LiveRun(str(elsewhere)))
    os.symlink(elsewhere, tmp_path / "shared" / "run=20261205-9")
    try:
        assert main(["capture", str(tmp_path / "shared")]) == 0
        assert (tmp_path / "shared" / "run=20261205-1" / REQUEST).exists() and not (elsewhere / REQUEST).exists()
    finally:
        for live in lives:
            live.end()


def test_a_folder_without_a_run_is_one_line_and_exit_status_1(tmp_path):
    done = subprocess.run([PROFKIT, "capture", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "no running PerformanceMonitor" in done.stderr
    done = subprocess.run([PROFKIT, "capture", str(tmp_path / "nope")], capture_output=True, text=True)
    assert done.returncode == 1 and "no such folder" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("steps, says", [("0", "must be at least 1, got 0"), ("101", "must be at most 100"),
                                         ("four", "must be a whole number, got 'four'")])
def test_steps_out_of_range_name_the_argument(tmp_path, capsys, steps, says):
    with pytest.raises(SystemExit) as done:
        main(["capture", str(tmp_path), "--steps", steps])
    assert done.value.code == 2 and f"argument --steps: {says}" in capsys.readouterr().err


def test_a_folder_name_and_a_markers_host_cannot_drive_the_terminal(tmp_path, capsys):
    """A run folder named with an escape sequence, a marker whose host holds one: both shown escaped."""
    folder = tmp_path / "run\x1b[2Jx" / "profiler"
    live = LiveRun(str(folder))
    try:
        assert main(["capture", str(folder.parent)]) == 0
        said = capsys.readouterr().out
        assert "\x1b" not in said and "run\\x1b[2Jx" in said
    finally:
        live.end()


@pytest.mark.parametrize("ended, running", [("profiler/run=20261205-1", ""), ("profiler", "profiler/run=20261205-1")],
                         ids=["an ended run= folder, a fit in the next folder", "an ended folder, a fit in its run="])
def test_a_fit_that_ended_does_not_hide_one_that_runs(tmp_path, ended, running):
    """A store's run is looked for in URL/profiler, then URL, each with its ``run=`` folders: an ended fit's marker is
    said only where no fit runs in any (here on local folders, which take the same path)."""
    ended = killed_in(tmp_path / ended)
    live = LiveRun(str(tmp_path / running))
    folders = [str(tmp_path / "profiler"), str(tmp_path)]
    try:
        assert find_run(folders) == (live.trace_dir, live.run)
    finally:
        live.end()
    assert find_run(folders)[0] == ended
