"""The one finalizing process of a fit: started with the first window, reused for every window, ended at
teardown. It rewrites each raw profiler dump into its trace (:mod:`~lightning_profkit.monitor.writing.child`)
at idle priority (``SCHED_IDLE`` where the OS has it, else the lowest nice), so that it takes a core only
when training leaves one free.

Jobs and replies are JSON lines on the child's stdin and stdout, one reply per job. A child that dies is
started again with the next window; the window in hand is reported as not written, never the training.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Optional

import lightning_profkit

CHILD = "lightning_profkit.monitor.writing.child"  # by name: its analysis imports stay out of the training process


class FinalizingProcess:
    """Parent side of the finalizing process; used by one thread (the trace writer's)."""

    def __init__(self) -> None:
        self._proc: Optional[subprocess.Popen] = None
        self._ended_cpu_s = 0.0  # CPU seconds of the processes that ended, as they last reported it
        self._cpu_s = 0.0  # the current one's
        self.watch: Optional[dict[str, Any]] = None  # a RequestMirror's arguments, for every process started

    @property
    def cpu_s(self) -> float:
        """CPU seconds the finalizing processes of this object have used, as of their last replies."""
        return self._ended_cpu_s + self._cpu_s

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        """Do ``job`` (see :func:`~lightning_profkit.monitor.writing.child.serve`); returns the reply. Raises
        ``OSError`` when it could not."""
        proc = self._proc if self._proc is not None and self._proc.poll() is None else None
        if proc is None:
            proc = self._start()
            if self.watch is not None:
                job = {**job, "watch": self.watch}
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(job) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            self.close(timeout=0)
            raise OSError(f"the finalizing process ended (exit status {proc.poll()}); a new one takes the next window")
        reply = json.loads(line)
        self._cpu_s = reply.get("cpu_s", self._cpu_s)
        if "error" in reply:
            raise OSError(reply["error"])
        return reply

    def _start(self) -> subprocess.Popen:
        self.close(timeout=0)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", CHILD],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1, env=child_env(), close_fds=True,
        )
        return self._proc

    def close(self, timeout: float = 5.0) -> None:
        """End the process: it exits at the end of its input; killed if it has not within ``timeout``."""
        proc, self._proc = self._proc, None
        self._ended_cpu_s, self._cpu_s = self._ended_cpu_s + self._cpu_s, 0.0
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def child_env() -> dict[str, str]:
    """The child imports this package from wherever the parent found it, and uses one thread."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(lightning_profkit.__file__)))  # the folder holding the package
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[threads] = "1"  # one core for the rewrite; the others stay with training
    return env
