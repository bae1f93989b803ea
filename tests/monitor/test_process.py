"""The finalizing process: found wherever the package is, its CPU read from the OS while it runs."""

import os
import subprocess
import sys

from lightning_profkit.machine import cpu_seconds_of
from lightning_profkit.monitor.writing.process import child_env, python_running


def test_the_finalizing_process_finds_this_package_wherever_it_is(tmp_path):
    """Its PYTHONPATH leads to this checkout's package, also where the package is not installed."""
    first = child_env()["PYTHONPATH"].split(os.pathsep)[0]
    assert os.path.isfile(os.path.join(first, "lightning_profkit", "monitor", "writing", "child.py"))
    done = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path[:0] = sys.argv[1:]; import lightning_profkit.monitor.writing.child as c; print(c.__file__)", first],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith(first), done.stderr


def test_a_running_processs_cpu_is_read_from_the_os_and_matches_its_own_and_the_reaped_figure():
    """What ``helper_cpu_s`` reads of the finalizing process between its replies: a child that burns 0.3 s of
    CPU is read while it still runs, between what it says it used and what the kernel reports once it is reaped."""
    burn = ("import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\n"
            "print(time.process_time(), flush=True)\nsys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    said = float(proc.stdout.readline())
    live = cpu_seconds_of(proc.pid)
    proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    reaped = usage.ru_utime + usage.ru_stime
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert said >= 0.3 and said - 2 * tick <= live <= reaped + tick, (said, live, reaped)  # user and system: a tick each
    assert cpu_seconds_of(proc.pid) is None  # gone


def test_the_finalizing_process_imports_nothing_from_its_working_folder(tmp_path):
    """A module named like one the finalizing process imports, in the folder the user runs from, is never imported
    by it."""
    (tmp_path / "json.py").write_text("open('imported', 'w').close()\n")
    (tmp_path / "runpy.py").write_text("open('imported', 'w').close()\n")
    done = subprocess.run(python_running("json.tool"), cwd=tmp_path, input='{"a": 1}', capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and '"a": 1' in done.stdout, done.stderr  # the standard library's json
    assert not (tmp_path / "imported").exists()
    unsafe = subprocess.run([sys.executable, "-m", "json.tool"], cwd=tmp_path, input="{}",
                            capture_output=True, text=True, timeout=120)
    assert (tmp_path / "imported").exists(), unsafe.stderr  # what `python -m` would have done
