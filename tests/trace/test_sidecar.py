"""The sidecar beside a trace: fresh only for the trace it was made from, by this code."""

import json
import os
import time

import pytest

from lightning_profkit.companions import SIDECAR, with_companions
from lightning_profkit.trace import sidecar
from lightning_profkit.trace.load import load
from lightning_profkit.trace.summary import summarize_trace

TRACE = __import__("conftest").GPU_TRACES / "hta/amd_mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
# a real trace's summary, as if it had been read elsewhere
SUMMARY = {**summarize_trace(str(TRACE), load(str(TRACE))), "path": "/elsewhere/a.pt.trace.json.gz", "window": "old",
           "worker": "w_rank3", "rank": 3}
KEPT = {k: v for k, v in SUMMARY.items() if k not in ("path", "window")}


def made(tmp_path, text=b"x" * 100):
    trace = tmp_path / "step=000001-000002-epoch=0" / "w_rank3.1.pt.trace.json.gz"
    trace.parent.mkdir()
    trace.write_bytes(text)
    return str(trace)


def test_a_sidecar_is_read_back_for_its_trace_and_placed_where_the_trace_is(tmp_path):
    trace = made(tmp_path)
    with open(trace + SIDECAR, "wb") as f:
        f.write(sidecar.dumps(SUMMARY, os.stat(trace)))
    assert json.loads(open(trace + SIDECAR, "rb").read())["summary"] == KEPT  # not where the trace was
    assert sidecar.with_place(trace, sidecar.read(trace)) == {
        "path": trace, "window": "step=000001-000002-epoch=0", **KEPT}


def test_a_changed_trace_or_other_code_makes_it_stale(tmp_path):
    trace = made(tmp_path)
    status = os.stat(trace)
    text = sidecar.dumps(SUMMARY, status)
    assert sidecar.loads(text, status.st_size, status.st_mtime_ns) is not None
    assert sidecar.loads(text, status.st_size) is not None  # on a store: the size alone
    assert sidecar.loads(text, status.st_size + 1) is None
    assert sidecar.loads(text, status.st_size, status.st_mtime_ns + 1) is None
    other = json.loads(text)
    other["version"] = "0" * 16
    assert sidecar.loads(json.dumps(other).encode(), status.st_size) is None
    for damaged in (b"", b"{", b"[]", b'{"version": 1}', text[:-5]):
        assert sidecar.loads(damaged, status.st_size) is None
    assert sidecar.loads(b" " * (sidecar.MAX_BYTES + 1), status.st_size) is None  # not read: not ours


def test_companions_are_named_after_their_trace():
    assert with_companions("a.pt.trace.json.gz") == [
        "a.pt.trace.json.gz.profkit", "a.pt.trace.json.gz.parquet", "a.pt.trace.json.gz"]


def test_a_sidecar_made_on_a_store_is_fresh_there_by_size_alone(tmp_path):
    text = sidecar.dumps(SUMMARY, 100)
    assert sidecar.loads(text, 100) is not None and sidecar.loads(text, 101) is None
    assert sidecar.loads(text, 100, 12345) is None  # a local file's time: not the one it was made from


def test_a_link_in_a_sidecars_place_is_not_followed(tmp_path):
    trace = made(tmp_path)
    elsewhere = tmp_path / "elsewhere.profkit"
    elsewhere.write_bytes(sidecar.dumps(SUMMARY, os.stat(trace)))
    os.symlink(elsewhere, trace + SIDECAR)
    assert sidecar.read(trace) is None
    os.remove(trace + SIDECAR)
    os.rename(elsewhere, trace + SIDECAR)
    assert sidecar.read(trace) is not None


def _with(summary_change):
    doc = json.loads(sidecar.dumps(SUMMARY, 100))
    summary_change(doc["summary"])
    return json.dumps(doc).encode()


@pytest.mark.parametrize("change", [
    lambda s: s.pop("operators"),  # a key missing
    lambda s: s["step_breakdown"]["avg"].pop("Total"),  # a figure missing
    lambda s: s["host"].update(steps="2"),  # a number that is a string
    lambda s: s["operators"]["cpu"].append({"name": 7, "calls": 1, "total_us": 1, "self_us": 1}),
    lambda s: s.update(notes=[[[[[]]]]]),
])
def test_a_sidecar_of_another_shape_is_not_believed(change):
    """Each summary a reader would trip on (a KeyError, a TypeError in HostFigures) makes the sidecar stale."""
    assert sidecar.loads(_with(lambda s: None), 100) is not None
    assert sidecar.loads(_with(change), 100) is None


def test_what_a_sidecar_holds_beyond_the_summary_is_dropped():
    loaded = sidecar.loads(_with(lambda s: s.update(surprise=1) or s["host"].update(surprise=1)), 100)
    assert loaded == KEPT


def test_a_hostile_sidecar_costs_its_size_at_most():
    """Deep nesting is refused by the decoder's own limit (no RecursionError escapes), and a sidecar of rows upon
    rows is decoded in time that grows with its size."""
    deep = b'{"version": "' + sidecar.version().encode() + b'", "summary": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert sidecar.loads(deep, 100) is None
    rows = [{"name": f"op{i}", "calls": 1, "total_us": 1.0, "self_us": 1.0} for i in range(100_000)]
    big = _with(lambda s: s["operators"].update(cpu=rows))
    assert len(big) < sidecar.MAX_BYTES
    start = time.process_time()
    assert len(sidecar.loads(big, 100)["operators"]["cpu"]) == 100_000
    assert sidecar.loads(big + b" " * sidecar.MAX_BYTES, 100) is None  # over the cap: not decoded
    print(f"{len(big) / 1e6:.1f} MB of sidecar decoded in {time.process_time() - start:.2f} s of CPU")


def test_the_version_covers_the_analysis_code_wherever_the_package_lies(tmp_path):
    """The hash changes with any module of trace/, also under a folder whose name holds glob characters."""
    import shutil
    import subprocess
    import sys

    package = os.path.dirname(os.path.dirname(os.path.abspath(sidecar.__file__)))
    root = tmp_path / "site[1]*?"
    shutil.copytree(package, root / "lightning_profkit", ignore=shutil.ignore_patterns("__pycache__"))

    def version() -> str:
        code = "from lightning_profkit.trace import sidecar; print(sidecar.version())"
        return subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(root)}, cwd=tmp_path,
                              capture_output=True, text=True, check=True).stdout.strip()

    before = version()
    with open(root / "lightning_profkit" / "trace" / "intervals.py", "a") as f:
        f.write("\n# changed\n")
    assert version() != before
