"""The fit's one finalizing process, running :mod:`~lightning_profkit.monitor.writing.child` below training
(docs/traces-and-storage.md). Design notes: docs/how-it-works.md."""

from __future__ import annotations

import os
import subprocess
import sys
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any, Optional

import lightning_profkit
from lightning_profkit.machine import cpu_seconds_of

CHILD = "lightning_profkit.monitor.writing.child"  # by name: its analysis imports stay out of the training process


def python_running(module: str) -> list[str]:
    """The command line that runs ``module`` as a script in a fresh interpreter that imports nothing from its
    working folder (``python -m`` looks there first, where any file named like a module it imports would win)."""
    return [sys.executable, "-c", "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
            f"import runpy; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"]


class FinalizingProcess:
    """Parent side of the finalizing process; used by one thread (the trace writer's)."""

    def __init__(self, storage_options: Optional[dict[str, Any]] = None) -> None:
        self.storage_options = storage_options  # sent to each process it starts, through the pipe
        self._proc: Optional[subprocess.Popen] = None
        self._jobs: Optional[Connection] = None  # our ends of the pipes
        self._replies: Optional[Connection] = None
        self._ended_cpu_s = 0.0  # CPU seconds of the processes that ended, as they last reported it
        self._cpu_s = 0.0  # the current one's
        self.watch: Optional[dict[str, Any]] = None  # a RequestMirror's arguments, for every process started

    @property
    def cpu_s(self) -> float:
        """CPU seconds the finalizing processes of this object have used so far (the running one's read now)."""
        proc = self._proc
        live = cpu_seconds_of(proc.pid) if proc is not None else None
        return self._ended_cpu_s + max(self._cpu_s, live or 0.0)

    def run(self, job: dict[str, Any], timeout: Optional[float] = None) -> dict[str, Any]:
        """Do ``job`` (see :func:`~lightning_profkit.monitor.writing.child.serve`); returns the reply. Raises
        ``OSError`` when it could not, ``TimeoutError`` (the process killed) with no reply within ``timeout`` s."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()
            job = {**job, "storage_options": self.storage_options, "watch": self.watch}  # kept by the new process
        assert self._proc is not None and self._jobs is not None and self._replies is not None
        try:
            self._jobs.send(job)
            answered = timeout is None or self._replies.poll(timeout)
            reply = self._replies.recv() if answered else None
        except (EOFError, OSError):
            status = self._proc.poll()
            self.close(timeout=0)
            raise OSError(f"the finalizing process ended (exit status {status}); a new one takes the next window")
        if reply is None:
            self.kill()
            self.close(timeout=0)
            raise TimeoutError(f"no reply within {timeout:g} s")
        self._cpu_s = reply.get("cpu_s", self._cpu_s)
        if "error" in reply:
            raise OSError(reply.get("errno") or 0, reply["error"])
        return reply

    def _start(self) -> None:
        self.close(timeout=0)
        jobs, self._jobs = Pipe(duplex=False)  # (the end that receives, the end that sends)
        self._replies, replies = Pipe(duplex=False)
        ends = (jobs.fileno(), replies.fileno())
        try:
            quiet = subprocess.DEVNULL
            self._proc = subprocess.Popen([*python_running(CHILD), *map(str, ends)], pass_fds=ends, env=child_env(),
                                          stdin=quiet, stdout=quiet, stderr=quiet)
        finally:  # the child's ends: held by the child alone, so that either side sees the other's end
            jobs.close()
            replies.close()

    def kill(self) -> None:
        """End the process now (from any thread: the one waiting for its reply then gets an ``OSError``)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def close(self, timeout: float = 5.0) -> None:
        """End the process: it reports its CPU seconds and exits, or is killed after ``timeout`` seconds."""
        proc, jobs, replies = self._proc, self._jobs, self._replies
        self._proc = self._jobs = self._replies = None
        try:
            if jobs is not None:
                jobs.close()
            if replies is not None and replies.poll(timeout):
                self._cpu_s = replies.recv().get("cpu_s", self._cpu_s)
        except (EOFError, OSError):
            pass
        finally:
            if replies is not None:
                replies.close()
        self._ended_cpu_s, self._cpu_s = self._ended_cpu_s + self._cpu_s, 0.0
        if proc is None:
            return
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def child_env() -> dict[str, str]:
    """The child imports this package from wherever the parent found it, and uses one thread."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(lightning_profkit.__file__)))  # the package's folder
    path = os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))
    # one core for the rewrite; the others stay with training
    one_thread = dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    return {**os.environ, "PYTHONPATH": path, **one_thread}
