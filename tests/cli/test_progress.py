"""The progress line of a long read: on a terminal (a real pseudo-terminal here) only, after its delay."""

import io
import os
import pty

from conftest import read_terminal
from lightning_profkit.cli.progress import Progress, bar


def test_the_bar_says_the_share_and_the_megabytes_read():
    assert bar("t.json.gz", 45_000_000, 100_000_000) == "t.json.gz  [##############................]   45%  45 of 100 MB"
    assert bar("t.json.gz", 0, 0).endswith("100%  0 of 0 MB")


def test_drawn_on_a_terminal_after_its_delay_and_cleared_when_done():
    main, other = pty.openpty()
    with os.fdopen(other, "w") as terminal:
        progress = Progress.on(terminal)
        assert progress is not None
        progress.after_s = 0.0
        progress.reading("/x/t.json.gz")(5_000_000, 10_000_000)
        progress.done()
    shown = read_terminal(main).decode()
    assert shown == "\r\x1b[Kprofkit: reading t.json.gz  [###############...............]   50%  5 of 10 MB\r\x1b[K"


def test_nothing_when_not_a_terminal_or_for_a_short_read():
    assert Progress.on(io.StringIO()) is None
    main, other = pty.openpty()
    with os.fdopen(other, "w") as terminal:
        progress = Progress.on(terminal)
        progress.reading("t.json")(1, 2)  # within its first second
        progress.done()
    assert read_terminal(main) == b""


def test_a_file_name_is_shown_escaped():
    main, other = pty.openpty()
    with os.fdopen(other, "w") as terminal:
        progress = Progress.on(terminal)
        progress.after_s = 0.0
        progress.reading("/x/t\x1b]0;owned\x07.json.gz")(5_000_000, 10_000_000)
        progress.done()
    shown = read_terminal(main).decode()
    assert "\x1b]" not in shown and "t\\x1b]0;owned\\x07.json.gz" in shown
