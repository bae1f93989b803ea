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

from lightning_profkit.trace.columns import from_rows
from lightning_profkit.trace.events import decode_json, decode_strict
from lightning_profkit.trace.file import TraceError, read_json
from lightning_profkit.trace.load import _workers, load, pieces
from lightning_profkit.trace.rows import rows
from lightning_profkit.trace.summary import summarize_columns

TRACES = sorted(json.loads((GPU_TRACES_REFERENCE := __import__("conftest").GPU_TRACES / "reference.json").read_text()))
SMALL = 16 * 1024  # bytes per piece: every GPU trace but the tiniest is cut
PROFKIT = os.path.join(os.path.dirname(sys.executable), "profkit")


def read(path, **kw):
    loaded = load(str(path), **kw)
    figures = json.dumps(summarize_columns(from_rows(loaded.rows)), sort_keys=True)
    return (figures, loaded.distributed_info, loaded.meta), loaded.pieces


def figures(path, **kw):
    return read(path, **kw)[0]


def one_pass(path):
    """The figures of the whole text decoded at once: the reader before it streamed."""
    doc = decode_json(str(path), read_json(str(path)))
    return json.dumps(summarize_columns(from_rows(rows(doc.traceEvents))), sort_keys=True), doc.distributedInfo, doc.profkit


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
    text = ('{"deviceProperties": [{"id": 0}, {"id": 1}], "traceEvents": [' + ",\n  ".join(events) + '], "x": 1}').encode()
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


def test_no_workers_in_a_process_with_threads_or_for_one_job():
    assert _workers(4) == 4 and _workers(1) == 0
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert _workers(4) == 0  # forking beside a thread can deadlock
    finally:
        stop.set()
        thread.join()


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


def test_decoding_workers_start_before_numpy_is_imported(gpu_traces):
    # profkit forks its decoders, then imports numpy while they work: nothing before the fork may import it.
    path = gpu_traces / "hta/trace_diff_control/control.json.gz"
    script = (
        "import os, sys\n"
        "import lightning_profkit.cli\n"
        "assert 'msgspec' not in sys.modules and 'numpy' not in sys.modules\n"
        "from lightning_profkit.trace.load import load\n"
        "forked, fork = [], os.fork\n"
        "def counted():\n"
        "    forked.append('numpy' in sys.modules)\n"
        "    return fork()\n"
        "os.fork = counted\n"
        f"trace = load({str(path)!r}, jobs=2, piece={SMALL})\n"
        "print(trace.pieces, forked)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    count, forked = out.stdout.split(" ", 1)
    assert int(count) > 1 and forked.strip() == "[False, False]"


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
    # Run from a small launcher: a child's peak RSS counts the memory of the process it was forked from,
    # and pytest's is large. The launcher prints the largest of its children (profkit and its workers).
    launcher = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True); "
                "sys.stderr.buffer.write(done.stderr); sys.stdout.buffer.write(done.stdout); "
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(done.returncode)")
    done = subprocess.run([sys.executable, "-c", launcher, PROFKIT, "summary", "--json", "--jobs", "2", str(path)],
                          capture_output=True, timeout=300)
    *err, maxrss = done.stderr.decode().splitlines()
    assert done.returncode == 0, err
    out = done.stdout
    peak = int(maxrss) * 1024
    print(f"{size / 1e6:.0f} MB of JSON read with a peak RSS of {peak / 2**20:.0f} MiB ({peak / size:.2f}x)")
    assert peak < 0.6 * size  # the whole text alone would be 1x; the reader before this one needed 2.5x
    trace = json.loads(out)["traces"][0]
    assert trace["step_breakdown"]["avg"]["Total"] > 0 and trace["temporal"]["idle_us"] >= 0
    assert err == []  # no progress line when stderr is not a terminal


def test_the_collector_is_paused_only_in_a_processs_main_thread():
    """A helper thread (the training process's writer) leaves the process's collector as it is: it is the user's."""
    from lightning_profkit.trace.load import _gc_paused

    seen = []

    def helper():
        with _gc_paused():
            seen.append(gc.isenabled())

    with _gc_paused():
        seen.append(gc.isenabled())
    thread = threading.Thread(target=helper)
    thread.start()
    thread.join()
    assert seen == [False, True] and gc.isenabled()
