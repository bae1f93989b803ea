"""The writer thread: a real window's results saved and finished under its final name off the training thread, a
window that cannot be written reported and cleaned up while the next is written, and nothing left running."""

import os
import threading
import time

from conftest import read_trace, recorded, profiler_steps
from lightning_profkit.monitor.writing.writer import TraceWriter, WindowJob

META = {"rank": 0, "world_size": 1, "epoch": 0, "steps": [0, 2]}


def writers():
    return [t for t in threading.enumerate() if t.name == "profkit-writer"]


def test_a_window_is_written_under_its_final_name_and_its_figures_handed_back(tmp_path):
    errors, written = [], []
    before = time.process_time()  # this process's CPU, all its threads: the writer thread's is a part of it
    writer = TraceWriter(lambda message, key: errors.append(key), written.append)
    path = str(tmp_path / "step=000000-000002" / "w.pt.trace.json.gz")
    writer.submit(WindowJob(recorded(3), path, dict(META)))
    assert writer.close(60.0) == [] and errors == [] and writer.pending == 0
    assert profiler_steps(read_trace(path)) == [0, 1, 2]
    assert sorted(os.listdir(os.path.dirname(path))) == ["w.pt.trace.json.gz", "w.pt.trace.json.gz.profkit"]
    assert [w["path"] for w in written] == [path] and written[0]["figures"]["steps"] == 3
    assert 0 < writer.cpu_s <= time.process_time() - before and not writers()


def test_a_window_that_cannot_be_written_is_reported_and_the_next_one_is_written(tmp_path):
    errors = []
    writer = TraceWriter(lambda message, key: errors.append((key, message.splitlines()[0])))
    (tmp_path / "taken").write_text("a file where the window's folder would go")
    writer.submit(WindowJob(recorded(3), str(tmp_path / "taken" / "w.pt.trace.json.gz"), dict(META)))
    good = str(tmp_path / "step=000000-000002" / "w.pt.trace.json.gz")
    writer.submit(WindowJob(recorded(3), good, dict(META)))
    assert writer.close(60.0) == []
    assert errors == [("write", "a profiler trace could not be written; training continues:")]
    assert os.path.exists(good) and sorted(os.listdir(tmp_path)) == ["step=000000-000002", "taken"]
    assert not writers()
