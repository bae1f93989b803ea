"""The capture-request protocol's guards: a request is this run's user's own plain file, asks for a bounded number
of steps, and a live-run marker belongs to its fit. Another user is a real second process under another user id
(where the tests run as root, as in CI; skipped elsewhere)."""

import json
import os
import subprocess

import pytest

from lightning_profkit.capture_request import (MAX_STEPS, REQUEST, LiveRun, other_fit, request_capture, requested_steps,
    running, take_request)

NOBODY = 65534


def as_another_user(script, cwd):
    """Run the shell ``script`` in a process of user ``nobody``."""
    if not hasattr(os, "getuid") or os.getuid() != 0:
        pytest.skip("a second user needs root to start its process")
    done = subprocess.run(["/bin/sh", "-c", script], user=NOBODY, group=NOBODY, cwd=cwd, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_request_another_user_made_is_refused(tmp_path):
    """A trace folder made world-writable (``/tmp/runs``, made by someone else first): another user's request for
    100,000 steps was taken (253 of 300 steps profiled); now it is refused, named, and removed."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    as_another_user(f"echo '{{\"steps\": 100000}}' > {REQUEST}", shared)
    taken = take_request(str(shared))
    assert taken == {"refused": f"{shared / REQUEST}: made by user id {NOBODY}, not by this run's user (0)"}
    assert not (shared / REQUEST).exists()


def test_a_request_that_is_a_link_or_not_a_file_is_refused_and_its_target_left_alone(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / REQUEST).symlink_to(victim)
    assert take_request(str(tmp_path)) == {
        "refused": f"{tmp_path / REQUEST}: a symbolic link, not read (link its folder, or copy the file)"}
    assert victim.read_text() == "keep me"
    os.mkfifo(tmp_path / REQUEST)
    assert take_request(str(tmp_path)) == {  # and no hang
        "refused": f"{tmp_path / REQUEST}: a pipe, not a file: not read"}


def test_a_trace_folder_that_became_a_file_is_unreadable_not_a_refused_request(tmp_path):
    (tmp_path / "runs").write_text("not a folder")
    with pytest.raises(NotADirectoryError):
        take_request(str(tmp_path / "runs"))


def test_a_request_asks_for_a_bounded_number_of_steps(tmp_path):
    request_capture(str(tmp_path), 100_000)
    assert take_request(str(tmp_path)) == {"steps": MAX_STEPS, "capped": 100_000}
    request_capture(str(tmp_path), 7)
    assert take_request(str(tmp_path)) == {"steps": 7}
    (tmp_path / REQUEST).write_text('{"steps": true}')
    assert take_request(str(tmp_path)) == {"steps": None}  # the callback's own `active`


def test_a_marker_belongs_to_its_fit(tmp_path):
    """Two fits into one folder: the first to end removed the marker the second still needed, so `profkit capture`
    refused the second; the marker now names its fit, and a fit removes only its own."""
    first = LiveRun(str(tmp_path))
    assert other_fit(str(tmp_path), first.run["fit"]) is None
    second = LiveRun(str(tmp_path))  # a second fit writes its own marker
    assert other_fit(str(tmp_path), first.run["fit"]) == f"pid {os.getpid()} on {os.uname().nodename}"
    first.end()
    assert running(str(tmp_path))["fit"] == second.run["fit"]
    second.end()
    assert running(str(tmp_path)) is None


def test_the_marker_and_requests_never_write_through_a_link(tmp_path):
    """Links pre-made at the names a marker or request might be written under point at a file of the victim's: it
    is never written (the temporary names were ``.<name>.tmp``: known in advance)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    folder = tmp_path / "runs"
    folder.mkdir()
    for name in (".profkit-run.tmp", ".capture.request.tmp", ".profkit-run", REQUEST):
        (folder / name).symlink_to(victim)
    run = LiveRun(str(folder))
    request_capture(str(folder), 3)
    assert victim.read_text() == "keep me"
    assert json.loads((folder / ".profkit-run").read_text())["fit"] == run.run["fit"]  # the link replaced, not followed
    assert take_request(str(folder)) == {"steps": 3}
    run.end()


@pytest.mark.parametrize("pid", [2**70, -1, 0, True, "12", None, [1]])
def test_a_marker_with_an_impossible_pid_is_read_without_raising(tmp_path, pid):
    """A marker naming this host and a pid no process can have (os.kill raised OverflowError for 2**70 and the fit
    failed at setup): not a run that is writing here."""
    import socket

    from lightning_profkit.capture_request import MARKER, not_running

    marker = {"pid": pid, "host": socket.gethostname(), "fit": "planted"}
    (tmp_path / MARKER).write_text(json.dumps(marker))
    assert not_running(marker) is not None and other_fit(str(tmp_path)) is None


def test_a_marker_another_user_made_neither_stops_nor_steers_a_fit(tmp_path):
    """In a world-writable folder another user plants a live marker naming a live process (this one): it is not
    taken for a run writing there."""
    import socket

    from lightning_profkit.capture_request import MARKER

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    marker = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "fit": "planted"})
    as_another_user(f"echo '{marker}' > {MARKER}", shared)
    assert running(str(shared)) is None and other_fit(str(shared)) is None
    (shared / "mine").mkdir()
    (shared / "mine" / MARKER).write_text(marker)  # the same marker made by this user is a run writing there
    assert running(str(shared / "mine"))["fit"] == "planted" and other_fit(str(shared / "mine")) is not None


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
