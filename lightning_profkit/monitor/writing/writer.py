"""The writer thread: saves a finished window's profiler results off the training thread and finalizes its trace, or has
the fit's finalizing process do it and the uploads (docs/traces-and-storage.md). Design notes: docs/how-it-works.md."""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import queue
import shutil
import stat
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

from lightning_profkit.atomic_files import temporary_pattern
from lightning_profkit.companions import remove_local
from lightning_profkit.monitor.writing.process import FinalizingProcess
from lightning_profkit.opener import size_words


@dataclass
class WindowJob:
    """One finished window: the profiler results and where its trace goes."""

    results: Any  # torch's _ProfilerResult (kineto results), saved once
    path: str  # final trace path (local; the staging copy when ``url`` is set)
    meta: dict[str, Any] = field(default_factory=dict)
    url: Optional[str] = None  # where the trace goes on object storage


IN_THREAD_BYTES = 10**6  # the JSON of a local window finalized in the writer thread, at most
UPLOAD_BACKOFF_S = (2.0, 60.0)  # the wait after a first failed upload, and the longest: doubled at each failure


class DiskFull(OSError):
    """A trace that did not fit on its disk, in words: where, how much was free, how much it needed."""

    def __init__(self, folder: str, needed_mb: Optional[float]) -> None:
        self.free_mb, self.needed_mb = free_mb(folder), needed_mb
        need = f", the window needed about {size_words(needed_mb * 1e6)} of JSON" if needed_mb else ""
        super().__init__(errno.ENOSPC, f"disk full at {folder}: {size_words(self.free_mb * 1e6)} free{need}\n  - its "
                                       "partial files were removed; training goes on\n  - windows are skipped until "
                                       "there is room, looked for at each planned window")


def free_mb(folder: str) -> float:
    """Free space where ``folder`` is (or its nearest existing parent), in MB."""
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return shutil.disk_usage(folder).free / 1e6


class FolderTaken(OSError):
    """A window's folder name already taken by something this fit may not write into."""


def window_folder(folder: str) -> bool:
    """Make a window's ``folder`` (and its parents) and say whether it was made here; one already there is written
    into only where it is this user's folder, not a link (another rank made it): else :class:`FolderTaken`."""
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    try:
        os.mkdir(folder)
        return True
    except FileExistsError:
        st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode):
        raise FolderTaken(f"{folder} is already there and is a symbolic link: the window is not written there, nor "
                          "anywhere")
    if st.st_uid != os.getuid():
        raise FolderTaken(f"{folder} is already there and is another user's (user id {st.st_uid}): the window is not "
                          "written there, nor anywhere")
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", folder)
    return False


class TraceWriter:
    """The writer thread; ``on_error(message, key)`` is told from it of a window not written, uploaded or deleted, and
    ``on_written(window)`` of each written. Waits are on events and locks: no patched ``time.sleep`` changes them."""

    def __init__(self, on_error: Callable[[str, str], None],
                 on_written: Callable[[dict[str, Any]], None] = lambda window: None,
                 storage_options: Optional[dict[str, Any]] = None) -> None:
        self._on_error, self._on_written = on_error, on_written
        self._jobs: "queue.Queue[Union[WindowJob, dict[str, Any], None]]" = queue.Queue()  # None: end the thread
        self._waiting: list[str] = []  # the paths of the windows submitted and not yet written or dropped
        self._finalizer = FinalizingProcess(storage_options)  # started with the first job, ended with the thread
        self.unsent: list[list[str]] = []  # [local, url]: traces written here and not uploaded yet, oldest first
        self._backoff = 0.0  # seconds to wait after the latest failed upload before the next try (0: none failed)
        self._retry_at = 0.0  # perf_counter seconds: no upload is tried before then
        self._deadline = float("inf")  # set by close: no store work is started after it
        self.full: Optional[DiskFull] = None  # the latest window that did not fit on its disk
        self._cpu_lock = threading.Lock()  # the thread's clock is read only while the thread runs
        self._thread_cpu_s: Optional[float] = None  # the thread's CPU seconds, once it ended
        self._thread = threading.Thread(target=self._run, name="profkit-writer", daemon=True)
        self._thread.start()
        self._thread_clock = time.pthread_getcpuclockid(self._thread.ident)

    @property
    def cpu_s(self) -> float:
        """CPU seconds this writer's thread and finalizing process have used so far, read now."""
        with self._cpu_lock:
            thread = self._thread_cpu_s
            if thread is None:
                thread = time.clock_gettime(self._thread_clock)
        return thread + self._finalizer.cpu_s

    @property
    def pending(self) -> int:
        """Windows submitted and not yet written or dropped."""
        return len(self._waiting)

    def submit(self, job: WindowJob) -> None:
        """Queue a window."""
        self._waiting.append(job.path)
        self._jobs.put(job)

    def watch(self, url: str, local: str, marker: dict[str, Any]) -> None:
        """Start the finalizing process now, with a :class:`~lightning_profkit.monitor.writing.child.RequestMirror`."""
        self._finalizer.watch = {"url": url, "local": local, "marker": marker}
        self._jobs.put({})

    def close(self, timeout: float) -> list[str]:
        """Wait for the windows submitted, a last try of the uploads that wait, then end the thread and the finalizing
        process, all within ``timeout`` seconds; returns the paths of the windows not written by then (data lost)."""
        self._deadline = time.perf_counter() + timeout  # not time.monotonic: a test or a user may patch it
        self._jobs.put(None)
        self._thread.join(timeout)
        left = list(self._waiting)
        if self._thread.is_alive():  # busy past the deadline: the finalizing process ends with the fit
            self._finalizer.kill()
            self._thread.join(5.0)
        return left

    def _run(self) -> None:
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    if self.unsent:  # a last try for the uploads that wait, backoff or not
                        self._guarded(lambda _: self._store(last=True), None)
                    self._finalizer.close(timeout=max(min(self._deadline - time.perf_counter(), 5.0), 0.0))
                    return
                self._guarded(self._write if isinstance(job, WindowJob) else self._finalizer.run, job)
        finally:
            with self._cpu_lock:
                self._thread_cpu_s = time.thread_time()

    def _guarded(self, work: Callable[[Any], None], job: Any) -> None:
        """Do a job (a window's: then no longer waited for); an error is reported, never raised."""
        try:
            work(job)
        except DiskFull as full:
            self.full = full  # read by the training thread before the next window
            self._on_error(full.strerror, "disk_full")
        except FolderTaken as taken:
            self._on_error(f"a profiler trace was not written; training continues:\n  {taken}", "folder_taken")
        except Exception as err:  # never let the thread die: report and go on
            self._on_error(f"a profiler trace could not be written; training continues:\n  {type(err).__name__}: {err}",
                           "write")
        finally:
            if isinstance(job, WindowJob):
                self._waiting.remove(job.path)

    def _write(self, job: WindowJob) -> None:
        folder, name = os.path.split(job.path)
        raw = os.path.join(folder, f".{name}.raw")
        made = window_folder(folder)
        try:
            job.results.save(raw)  # kineto writes <raw>.tmp, then renames it; on a full disk it says nothing
            job.results = None
            if not os.path.exists(raw):
                # under 1 MB free, the write failed for room
                raise OSError(errno.ENOSPC if free_mb(folder) < 1.0 else 0, f"torch.profiler wrote no trace at {raw}")
            if job.url is None and os.path.getsize(raw) <= IN_THREAD_BYTES:
                from lightning_profkit.monitor.writing.child import finalize_trace  # the analysis side, once a fit

                done = finalize_trace(raw, job.path, job.meta)
            else:
                done = self._finalizer.run({"raw": raw, "final": job.path, "meta": job.meta, "url": job.url})["done"]
        except BaseException as err:
            for leftover in [*glob.glob(glob.escape(raw) + "*"), *glob.glob(temporary_pattern(job.path))]:
                if os.path.lexists(leftover):
                    os.remove(leftover)
            if made:
                with contextlib.suppress(OSError):
                    os.rmdir(folder)  # the window's folder, made for this trace and empty
            if isinstance(err, OSError) and err.errno == errno.ENOSPC:
                raise DiskFull(folder, job.meta.get("estimated_mb")) from None
            raise
        self._on_written(done)
        if job.url:  # written here in full: uploaded once no other window waits to be written, or kept until then
            self.unsent.append([job.path, job.url])
            if self._jobs.empty():
                self._store()

    def remove(self, urls: list[str]) -> list[str]:
        """On this writer's thread: delete ``urls`` from the store (not uploaded yet: the local copy); returns them."""
        local_only = [u for u in self.unsent if u[1] in urls]
        for local, url in local_only:
            self.unsent.remove([local, url])
            remove_local(local)
        never_sent = {url for _, url in local_only}
        self._store([u for u in urls if u not in never_sent])
        return urls

    def _store(self, removals: Sequence[str] = (), last: bool = False) -> None:
        """Upload the traces that wait and delete ``removals``, in the finalizing process: never after the deadline,
        nor (but for the ``last`` try) before the backoff after a failed upload has passed."""
        now = time.perf_counter()
        uploads = self.unsent if self.unsent and (last or now >= self._retry_at) else []
        if (not uploads and not removals) or now >= self._deadline:
            return
        try:
            reply = self._finalizer.run({"uploads": uploads, "removals": list(removals)})
        except OSError:
            if time.perf_counter() >= self._deadline:
                return  # ended with the fit: what waits stays here, and the end lists it
            raise
        unsent = reply.get("unsent", [])
        if unsent:
            local, url, why = unsent[0]
            if self._backoff == 0.0:
                self._on_error(f"a profiler trace could not be uploaded; training continues and the upload is tried "
                               f"again with a later window ({UPLOAD_BACKOFF_S[0]:.0f} s apart at least, then up to "
                               f"{UPLOAD_BACKOFF_S[1]:.0f} s) and at the end\n  - to: {url}\n  - why: {why}\n"
                               f"  - kept at: {local}", "upload")
            self._backoff = min(max(2 * self._backoff, UPLOAD_BACKOFF_S[0]), UPLOAD_BACKOFF_S[1])
            self._retry_at = time.perf_counter() + self._backoff
        elif uploads:
            self._backoff = 0.0
        sent = {url for _, url in uploads} - {url for _, url, _ in unsent}
        self.unsent = [u for u in self.unsent if u[1] not in sent]
        for why in reply.get("failed", []):
            self._on_error(f"an old profiler trace could not be deleted (keep_last_windows; {why})", "retention")
