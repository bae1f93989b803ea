"""The rewrite of a raw dump edits its text in place: the same document as editing it as Python objects, every byte
outside the edited events as written, whatever the pieces it is cut into."""

import gzip
import json

import pytest

from lightning_profkit.monitor.writing import child
from lightning_profkit.trace.load import PieceError, pieces
from lightning_profkit.trace.rewrite import edit, joined

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def kineto_text(events, head='"schemaVersion": 1,\n  "traceEvents": [', tail='\n  ],\n  "traceName": "raw.json"\n}'):
    """Events laid out as torch.profiler saves them: one key a line, indented."""
    body = ",\n".join("  {\n" + ",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in e.items()) + "\n  }"
                      for e in events)
    return ("{\n  " + head + "\n" + body + tail).encode()


def step(n, ts, cat="user_annotation"):
    return {"ph": "X", "cat": cat, "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": ts, "dur": 90,
            "args": {"Op count": 0}}


def events():
    out = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    for n in range(3, 7):
        out += [step(n, 100 * n),
                {"ph": "X", "cat": "user_annotation", "name": LOADER, "pid": 1, "tid": 1, "ts": 100 * n + 1, "dur": 5,
                 "args": {"name": "ProfilerStep#99", "nested": {"a": [1, 2]}}},
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm ✓", "pid": 1, "tid": 1, "ts": 100 * n + 10, "dur": 7}]
    return out + [step(7, 700, "gpu_user_annotation"), {"ph": "i", "s": "g", "name": "Record Window End", "ts": 800}]


def expected(text, last):
    """The same edits made here on the whole document as Python objects."""
    doc = json.loads(text)
    for e in doc["traceEvents"]:  # a DataLoader span recorded as an annotation becomes an operator, as in the plugin
        name = e.get("name") or ""
        if e.get("cat") == "user_annotation" and e.get("ph") == "X" and (
                name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")
                or name.startswith("enumerate(DataPipe)#")):
            e["cat"] = "cpu_op"
    if last is not None:
        doc["traceEvents"] = [e for e in doc["traceEvents"]
                              if not e["name"].startswith("ProfilerStep#") or int(e["name"][13:]) <= last]
    return doc


def rewritten(text, piece, last, keys=None):
    parts = ((edit(buf, last, a, b), first, end) for buf, a, b, first, end in pieces([text], piece))
    return b"".join(joined(parts, lambda: keys or {}))


@pytest.mark.parametrize("layout", ["kineto", "compact"])
@pytest.mark.parametrize("last", [None, 4, 2])
@pytest.mark.parametrize("piece", [64, 300, 1 << 20])
def test_the_edited_text_is_the_document_edited_as_objects(layout, last, piece):
    text = kineto_text(events()) if layout == "kineto" else json.dumps({"traceEvents": events()}).encode()
    out = rewritten(text, piece, last, {"profkit": {"rank": 0}})
    assert json.loads(out) == {**expected(text, last), "profkit": {"rank": 0}}
    if last is None and layout == "kineto" and piece > len(text):  # as written but the DataLoader categories
        changed = [(a, b) for a, b in zip(text.splitlines(), out.splitlines()) if a != b]
        assert changed == ([(b'    "cat": "user_annotation",', b'    "cat": "cpu_op",')] * 4
                           + [(b"}", b', "profkit": {"rank": 0}}')])


def test_cutting_out_every_step_marker_leaves_a_valid_list():
    only_steps = kineto_text([step(n, 100 * n) for n in range(5)])
    for piece in (16, 200, 1 << 20):
        assert json.loads(rewritten(only_steps, piece, -1))["traceEvents"] == []
        assert json.loads(rewritten(only_steps, piece, 2))["traceEvents"] == [step(n, 100 * n) for n in range(3)]


def test_a_piece_with_nothing_to_change_is_passed_on_uncopied():
    text = kineto_text(events())
    plain = text.index(b'"aten::mm')  # from an operator to the next step marker: nothing to edit
    end = text.index(b"{", text.index(b"}", plain))
    out = edit(text, 4, plain, end)
    assert isinstance(out, memoryview) and out.obj is text and out == text[plain:end]
    assert isinstance(edit(text, 4, 0, len(text)), bytes)  # the DataLoader spans and ProfilerStep#5 and #6 change


def test_an_event_that_does_not_decode_alone_is_refused_not_guessed():
    text = b'{"traceEvents": [{"ph": "X", "cat": "user_annotation", "args": {"x": "{"}, "name": "' + LOADER.encode() + \
        b'", "ts": 1, "dur": 2}]}'
    with pytest.raises(PieceError):
        edit(text, None, 0, len(text))


def test_finalize_trace_streams_the_document_edited_as_objects(tmp_path, gpu_traces, monkeypatch):
    """A real A100 trace (DataLoader spans under user_annotation) cut into 64 kB pieces gives the document edited as
    Python objects, with the figures of that document; a dump the edits cannot read is kept as written."""
    with gzip.open(gpu_traces / "hta" / "trace_diff_control" / "control.json.gz", "rb") as f:
        text = f.read()
    meta = {"rank": 3, "world_size": 8, "epoch": 0, "steps": [1009, 1012]}  # the trace has 1009-1014
    monkeypatch.setattr(child, "FINALIZE_PIECE", 1 << 16)
    done = {}
    for way in ("edited", "as written"):
        (tmp_path / "raw").write_bytes(text)
        final = tmp_path / way / "w.pt.trace.json.gz"
        final.parent.mkdir()
        loaded, _ = child._rewrite_streaming(str(tmp_path / "raw"), str(final), meta, 1012, way == "as written")
        done[way] = json.loads(gzip.decompress(final.read_bytes())), child.summarize_trace(str(final), loaded)
    (streamed, figures), (kept, kept_figures) = done["edited"], done["as written"]
    assert streamed == {**expected(text, 1012), "profkit": meta} and "distributedInfo" in streamed
    assert kept == {**json.loads(text), "profkit": meta}
    assert figures["host"]["steps"] == 4 and kept_figures["host"]["steps"] == 6