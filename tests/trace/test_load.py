"""A trace read as a stream, in pieces decoded by forked workers, gives exactly the figures of one pass over
its whole text, or falls back to one pass; and it holds a fraction of the text in memory."""

import gc
import gzip
import json
import os
import subprocess
import sys
import threading

import pytest
from conftest import measured_profkit

from lightning_profkit.trace.columns import columns
from lightning_profkit.trace.events import decode_strict
from lightning_profkit.trace.load import decode_json
from lightning_profkit.trace.file import TraceError, read_json
from lightning_profkit.trace.load import load, pieces
from lightning_profkit.trace.summary import summarize_columns

TRACES = sorted(json.loads((GPU_TRACES_REFERENCE := __import__("conftest").GPU_TRACES / "reference.json").read_text()))
SMALL = 16 * 1024  # bytes per piece: every GPU trace but the tiniest is cut


def read(path, **kw):
    loaded = load(str(path), **kw)
    figures = json.dumps(summarize_columns(loaded.rows), sort_keys=True)
    return (figures, loaded.distributed_info, loaded.meta), loaded.pieces


def figures(path, **kw):
    return read(path, **kw)[0]


def one_pass(path):
    """The figures of the whole text decoded at once: the reader before it streamed."""
    doc = decode_json(str(path), read_json(str(path)))
    return json.dumps(summarize_columns(columns(doc.traceEvents)), sort_keys=True), doc.distributedInfo, doc.profkit


@pytest.mark.parametrize("name", TRACES)
def test_pieces_give_the_figures_of_one_pass(gpu_traces, name):
    path = gpu_traces / name
    whole = one_pass(path)
    size = len(read_json(str(path)))
    for jobs in (1, 4):  # decoded here, and by workers
        got, count = read(path, jobs=jobs, piece=SMALL)
        assert got == whole
        assert count <= size // SMALL + 1 and (count > 1 if size > 4 * SMALL else True)
    assert figures(path, jobs=2) == whole  # the default pieces


def test_pieces_are_the_text_cut_between_events():
    events = [json.dumps({"ph": "X", "name": f"e{i}", "ts": i, "args": {"s": [1, 2]}}) for i in range(3000)]
    text = ('{"deviceProperties": [{"id": 0}, {"id": 1}], "traceEvents": [' + ",\n  ".join(events)
            + '], "x": 1}').encode()
    blocks = [text[i:i + 1000] for i in range(0, len(text), 1000)]
    cut = [(buf[start:end], first, last) for buf, start, end, first, last in pieces(blocks, 4096)]
    assert b"".join(p for p, _, _ in cut).replace(b",\n  ", b"") == text.replace(b",\n  ", b"")
    assert [f for _, f, _ in cut] == [True] + [False] * (len(cut) - 1)
    assert [last for _, _, last in cut] == [False] * (len(cut) - 1) + [True]
    assert all(4096 < len(p) < 4096 + 200 for p, _, _ in cut[:-1])
    assert b"deviceProperties" in cut[0][0] and cut[0][0].count(b'"id"') == 2  # no cut before the events
    assert list(pieces([b'{"traceEvents": []}'], 4096)) == [(b'{"traceEvents": []}', 0, 19, True, True)]
    whole = list(pieces([text], 4096))  # one block: every piece is a place in it, nothing copied
    assert len(whole) == len(cut) and all(buf is text for buf, *_ in whole)


def event(i, name):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 2, "ts": 1000 + 10 * i, "dur": 5,
            "args": {"External id": i, "nested": [{"a": "},{"}, {"b": [1, {"c": 2}]}]}}


def write(path, doc, indent=None):
    path.write_text(json.dumps(doc, indent=indent))
    return path


@pytest.mark.parametrize("indent", [None, 2])
def test_boundaries_inside_strings_and_nested_lists(tmp_path, indent):
    events = [event(i, "aten::x },{ y" if i % 2 else f"ProfilerStep#{i}") for i in range(4000)]
    doc = {"traceEvents": events, "after": [{"ph": None}, {"x": 1}], "distributedInfo": {"rank": 5},
           "profkit": {"worker": "w"}}
    path = write(tmp_path / "t.json", doc, indent)
    one = one_pass(path)
    assert one[1] == {"rank": 5} and one[2] == {"worker": "w"}
    for jobs in (1, 2, 3, 7):
        assert figures(path, jobs=jobs, piece=4096) == one


def test_a_bad_second_half_reports_like_one_pass(tmp_path):
    good = json.dumps({"traceEvents": [event(i, "aten::mm") for i in range(4000)]})
    path = tmp_path / "cut.json"
    path.write_text(good[: len(good) * 3 // 4])
    messages = []
    zombies_before = _zombie_children()
    for kw in ({"jobs": 1, "piece": 2**30}, {"jobs": 1, "piece": 4096}, {"jobs": 4, "piece": 4096}):
        with pytest.raises(TraceError) as err:
            load(str(path), **kw)
        messages.append(str(err.value))
    assert messages[0] == messages[1] == messages[2] and "not JSON" in messages[0]
    assert _zombie_children() == zombies_before  # every worker was waited for


def _zombie_children():
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state, parent = f.read().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        if state == "Z" and int(parent) == os.getpid():
            found.add(pid)
    return found


def test_workers_decode_beside_threads_and_whatever_was_imported_first(tmp_path):
    """A trace over WHOLE_FILE is decoded by a process pool, started by forkserver in a process that has a running
    thread and numpy imported before its first read: the figures of one pass, and no process left."""
    path = tmp_path / "large.pt.trace.json"
    repeated_trace(path, 12)
    script = (
        "import os, sys, threading, numpy\n"
        "threading.Thread(target=threading.Event().wait, daemon=True).start()\n"
        "from lightning_profkit.trace.load import load\n"
        "children = set()\n"
        "def progress(done, size):  # while reading: this process's children (the forkserver)\n"
        "    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "        try:\n"
        "            if int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1]) == os.getpid():\n"
        "                children.add(pid)\n"
        "        except (OSError, ValueError):\n"
        "            pass\n"
        f"trace = load({str(path)!r}, jobs=2, piece={SMALL * 16}, progress=progress)\n"
        "print(trace.pieces, len(trace.rows.ts), len(children))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pieces_read, events, children = map(int, out.stdout.split())
    assert pieces_read > 1 and children >= 1  # decoded in pieces, by processes this one started
    assert events == len(load(str(path), jobs=1).rows.ts)


def test_unknown_phases_and_odd_fields_take_the_tolerant_path(tmp_path):
    memory = {"ph": "i", "name": "[memory]", "ts": 1200, "pid": 1, "tid": 2,
              "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": 4096, "Total Reserved": 8192}}
    flow = {"ph": "f", "id": 1, "ts": 1001, "pid": 1, "tid": 2, "cat": "ac2g", "name": "ac2g"}
    clean = [event(i, f"ProfilerStep#{i}" if i % 5 == 0 else "aten::mm") for i in range(50)] + [memory, flow]
    odd = clean + [{"ph": "Q", "name": "a phase no format defines"}, 7,
                   {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": "not a time", "dur": 1, "pid": 1, "tid": 2}]
    path = write(tmp_path / "odd.json", {"traceEvents": odd})
    with pytest.raises(ValueError):
        decode_strict(path.read_bytes())
    got = figures(path, jobs=1, piece=512)
    assert got == figures(write(tmp_path / "clean.json", {"traceEvents": clean}), jobs=1)
    assert json.loads(got[0])["host"]["peak_memory"]  # the [memory] event was read


def repeated_trace(path, json_mb):
    """A valid trace of about ``json_mb`` MB: the events of a real GPU trace written again and again."""
    with gzip.open(GPU_TRACES_REFERENCE.parent / "hta/trace_diff_control/control.json.gz", "rb") as f:
        doc = json.load(f)
    events = json.dumps(doc.pop("traceEvents"))[1:-1].encode()
    copies = max(1, round(json_mb * 1e6 / len(events)))
    with open(path, "wb") as f:
        f.write(b'{"traceEvents": [')
        for k in range(copies):
            f.write(b", " + events if k else events)
        f.write(b"], " + json.dumps(doc)[1:].encode())
    return os.path.getsize(path)


def test_a_large_trace_is_read_in_a_fraction_of_its_size(tmp_path):
    path = tmp_path / "large.pt.trace.json"
    size = repeated_trace(path, 250)
    code, out, err, _, peak_mb = measured_profkit("summary", "--json", "--jobs", "2", path, timeout=300)
    assert code == 0, err
    peak = peak_mb * 2**20
    print(f"{size / 1e6:.0f} MB of JSON read with a peak RSS of {peak / 2**20:.0f} MiB ({peak / size:.2f}x)")
    assert peak < 0.6 * size  # the whole text alone would be 1x; the reader before this one needed 2.5x
    trace = json.loads(out)["traces"][0]
    assert trace["step_breakdown"]["avg"]["Total"] > 0 and trace["temporal"]["idle_us"] >= 0
    assert err == []  # no progress line when stderr is not a terminal


def test_the_collector_is_paused_only_in_a_processs_main_thread():
    """A helper thread (the training process's writer) leaves the process's collector as it is: it is the user's."""
    from lightning_profkit.trace.load import gc_paused

    seen = []

    def helper():
        with gc_paused():
            seen.append(gc.isenabled())

    with gc_paused():
        seen.append(gc.isenabled())
    thread = threading.Thread(target=helper)
    thread.start()
    thread.join()
    assert seen == [False, True] and gc.isenabled()


def _events(n, **fields):
    return [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": i * 10, "dur": 5, "pid": 1, "tid": 1, **fields}
            for i in range(n)]


def _hostile():
    """Traces made to cost a reader hours or gigabytes, by name."""
    real = json.dumps({"traceEvents": _events(2000) + [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "ts": k * 5000, "dur": 5000, "pid": 1,
         "tid": 1} for k in range(4)]}).encode()
    huge_event = b',{"ph":"X","cat":"cpu_op","name":"' + b"y" * (50 * 2**20) + b'","ts":1,"dur":1,"pid":1,"tid":1}]}'
    nested = {"l": [{"a": 1}, {"b": 2}]}  # `},{"` inside an event: a cut there does not decode
    return {
        "many gzip members": gzip.compress(b"", 1) * 100_000 + gzip.compress(real),
        "late traceEvents": gzip.compress(b'{"pad":"' + b"x" * (60 * 2**20) + b'",' + real[1:], 9),
        "no traceEvents": gzip.compress(b'{"pad":"' + b"x" * (63 * 2**20) + b'"}', 9),
        "one huge event": gzip.compress(real[:-2] + huge_event, 9),
        "deep nesting": real[:-2] + b',{"ph":"X","args":{"x":' + b"[" * 200_000 + b"]" * 200_000 + b"}}]}",
        "mixed types": gzip.compress(json.dumps({"traceEvents": [
            {"ph": "X", "name": f"op{i % 50}", "ts": str(i) if i % 3 else i, "dur": [5] if i % 7 == 0 else 5,
             "pid": "a" if i % 2 else 1} for i in range(400_000)]}).encode(), 6),
        "braces in names": gzip.compress(json.dumps({"traceEvents": _events(300_000, name='a},{"b' * 10)}).encode()),
        "nested objects": gzip.compress(json.dumps({"traceEvents": _events(300_000, args=nested)}).encode()),
    }


@pytest.mark.parametrize("name", [
    "many gzip members", "late traceEvents", "no traceEvents", "one huge event", "deep nesting", "mixed types",
    "braces in names", "nested objects", "a pipe beside it", "a link"])
def test_a_hostile_trace_is_summarised_or_left_out_in_seconds_and_bounded_memory(tmp_path, name):
    """Each is read or left out with one line, by ``profkit summary`` in a process of its own whose CPU time and
    peak memory the test reads from the OS (os.wait4): under 5 s of CPU and 300 MB."""
    folder = tmp_path / "run"
    folder.mkdir()
    trace = folder / "t.pt.trace.json.gz"
    if name == "a pipe beside it":  # a sidecar that is a FIFO: opening it to read would wait for a writer
        trace.write_bytes(gzip.compress(json.dumps({"traceEvents": _events(100)}).encode()))
        os.mkfifo(str(trace) + ".profkit")
    elif name == "a link":  # a trace that is a link to a file we did not make: never followed
        os.symlink("/etc/hostname" if os.path.exists("/etc/hostname") else sys.executable, trace)
    else:
        trace.write_bytes(_hostile()[name])
    code, out, lines, cpu_s, peak_mb = measured_profkit("summary", folder, "--json")
    assert code in (0, 1), (code, lines[-20:])
    if code == 0:  # summarised
        assert json.loads(out)["traces"][0]["path"].endswith("t.pt.trace.json.gz")
    else:  # left out: one line naming the file
        assert len(lines) == 1 and "t.pt.trace.json.gz" in lines[0] and "Traceback" not in lines[0], lines
    assert cpu_s < 5 and peak_mb < 300, (cpu_s, peak_mb)
