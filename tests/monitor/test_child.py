"""What the finalizing process runs on a raw dump: the problems it marks, the companions it writes."""

import gzip
import json
import os
import subprocess
import sys
import time

from conftest import options, recorded

from lightning_profkit.monitor.writing.output import TraceOutput


def test_a_trace_that_lacks_what_its_window_recorded_is_marked_and_shown(tmp_path):
    """A raw dump whose window recorded steps 10-12 but holds ProfilerStep#10 and #12 only, with an event left
    open, from a CUDA window without GPU activity: the finalizing child marks the trace with each problem (the
    steps counted over its raw events), and ``profkit summary`` shows them."""
    from lightning_profkit.monitor.writing.child import finalize_trace

    events = [{"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": 100 * n, "dur": 90}
              for n in (10, 12)] + [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1005}]
    raw = tmp_path / "w" / ".t.raw"
    raw.parent.mkdir()
    raw.write_text(json.dumps({"traceEvents": events}))
    missing = [n for n in range(10, 13) if not any(e["name"] == f"ProfilerStep#{n}" for e in events)]
    final = tmp_path / "w" / "h_rank0.1.pt.trace.json.gz"
    meta = {"epoch": 0, "steps": [10, 12], "batch_idx": [10, 12], "rank": 0, "world_size": 1, "gpu": True}
    done = finalize_trace(str(raw), str(final), meta)
    with gzip.open(final, "rt") as f:
        marked = json.load(f)["profkit"]["problems"]
    assert marked == done["meta"]["problems"] == [
        f"{len(missing)} of the 3 recorded steps have no ProfilerStep span in the trace (11)",
        "1 complete event(s) have no duration",
        "no GPU activity although CUDA was profiled on a CUDA model (CUPTI may have failed to attach; "
        "see pytorch/pytorch#192021)"]
    shown = subprocess.run([os.path.join(os.path.dirname(sys.executable), "profkit"), "summary", str(final)],
                           capture_output=True, text=True, timeout=120).stdout
    assert all(f"incomplete trace: {p}" in shown for p in marked), shown
    whole = dict(meta, gpu=False, steps=[10, 10], batch_idx=[10, 10])
    raw.write_text(json.dumps({"traceEvents": events[:1]}))
    assert "problems" not in finalize_trace(str(raw), str(final), whole)["meta"]


def test_a_companion_that_cannot_be_written_never_costs_the_trace(tmp_path):
    """The finalizing process writes the sidecar beside the trace (the events table waits for a first query); where it
    cannot be written (here its name is taken by a folder) the trace stays and why is returned, for one warning."""
    from lightning_profkit.monitor.writing.child import companions
    from lightning_profkit.trace.load import load
    from lightning_profkit.trace.summary import summarize_trace

    done = []
    output = TraceOutput(str(tmp_path), 0, 1, options(), lambda message, key: done.append(message))
    path = output.submit(recorded(2), 0, 0, 1, 0)
    written, deadline = [], time.monotonic() + 120
    while not written and time.monotonic() < deadline:
        written += output.take()[0]
        time.sleep(0.01)
    output.close(timeout=120)
    assert sorted(os.listdir(os.path.dirname(path))) == sorted(os.path.basename(p) for p in [
        path, path + ".profkit"])
    os.remove(path + ".profkit")
    os.mkdir(path + ".profkit")
    why = companions(path, summarize_trace(path, load(path)))
    assert why.startswith("IsADirectoryError") and os.path.isfile(path)
    assert done == []
