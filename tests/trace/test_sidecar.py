"""The sidecar beside a trace: fresh only for the trace it was made from, by this code."""

import json
import os

from lightning_profkit.companions import with_companions
from lightning_profkit.trace import sidecar

SUMMARY = {"path": "/elsewhere/a.pt.trace.json.gz", "window": "old", "worker": "w_rank3", "rank": 3, "host": {"steps": 2}}


def made(tmp_path, text=b"x" * 100):
    trace = tmp_path / "step=000001-000002-epoch=0" / "w_rank3.1.pt.trace.json.gz"
    trace.parent.mkdir()
    trace.write_bytes(text)
    return str(trace)


def test_a_sidecar_is_read_back_for_its_trace_and_placed_where_the_trace_is(tmp_path):
    trace = made(tmp_path)
    with open(sidecar.sidecar_of(trace), "wb") as f:
        f.write(sidecar.dumps(SUMMARY, os.stat(trace)))
    assert json.loads(open(sidecar.sidecar_of(trace), "rb").read())["summary"] == {
        "worker": "w_rank3", "rank": 3, "host": {"steps": 2}}  # not where the trace was
    assert sidecar.with_place(trace, sidecar.read(trace)) == {
        "path": trace, "window": "step=000001-000002-epoch=0", "worker": "w_rank3", "rank": 3, "host": {"steps": 2}}


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
    os.symlink(elsewhere, sidecar.sidecar_of(trace))
    assert sidecar.read(trace) is None
    os.remove(sidecar.sidecar_of(trace))
    os.rename(elsewhere, sidecar.sidecar_of(trace))
    assert sidecar.read(trace) is not None
