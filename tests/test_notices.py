"""Our warnings: each problem said once, printed as its category and text (not our file's path)."""

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


def test_a_warning_prints_as_its_category_and_text_and_others_keep_their_format():
    code = ("import warnings; from lightning_profkit.notices import warn; warnings.simplefilter('always')\n"
            "warn('steps 0-99: data wait was 77%', UserWarning)\nwarnings.warn('theirs', UserWarning)")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stderr.splitlines()
    assert err[0] == "UserWarning: steps 0-99: data wait was 77%"
    assert err[1].endswith("UserWarning: theirs") and err[1] != "UserWarning: theirs"  # the file and line first
