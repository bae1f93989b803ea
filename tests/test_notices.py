"""Our warnings: each problem said once, shown at the user's line with its category and text (not at our file's)."""

import subprocess
import sys
import warnings

from lightning_profkit.notices import Notices


def test_a_problem_is_said_once_by_its_key_or_its_text():
    notices = Notices()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        notices("disk full at /data", "disk_full")
        notices("disk full at /other", "disk_full")  # the same problem: said already
        notices("a store is down")
        notices("a store is down")
    assert [(w.category, str(w.message)) for w in caught] == [
        (RuntimeWarning, "PerformanceMonitor: disk full at /data"), (RuntimeWarning, "PerformanceMonitor: a store is down")]


def test_a_warning_is_shown_at_the_users_line_and_changes_nothing_of_the_warnings_module(tmp_path):
    """From the user's code, Lightning's hooks between: shown at the user's line with its category (Lightning's
    format of a warning from a "lightning" path drops the category); from a helper thread, at the main thread's
    line; the module's format and other warnings are left as they are."""
    script = tmp_path / "train.py"
    script.write_text(
        "import threading, warnings\n"
        "import lightning.pytorch  # its format of warnings is in place\n"
        "from lightning_profkit.notices import warn\n"
        "warnings.simplefilter('always')\n"
        "before = warnings.formatwarning\n"
        "warn('steps 0-99: data wait was 77%', UserWarning)\n"
        "thread = threading.Thread(target=warn, args=('from the writer', RuntimeWarning))\n"
        "thread.start(); thread.join()\n"
        "warnings.warn('theirs', UserWarning)\n"
        "assert warnings.formatwarning is before\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"{script}:6: UserWarning: steps 0-99: data wait was 77%", "  warn('steps 0-99: data wait was 77%', UserWarning)",
        f"{script}:8: RuntimeWarning: from the writer", "  thread.start(); thread.join()",
        f"{script}:9: UserWarning: theirs", "  warnings.warn('theirs', UserWarning)"]
