"""A trace decoded in pieces by forked workers gives exactly the figures of one pass, or falls back to one pass."""

import json
import math
import os
import subprocess
import sys
import threading

import pytest

from conftest import GPU_TRACES
from lightning_profkit.trace.events import decode_strict, from_dicts
from lightning_profkit.trace.file import TraceError, read_json
from lightning_profkit.trace.columns import join
from lightning_profkit.trace.load import MIN_PIECE, MIN_PIECES, _pieces, _workers, start_loading
from lightning_profkit.trace.rows import rows
from lightning_profkit.trace.summary import summarize_columns

TRACES = sorted(json.loads((GPU_TRACES / "reference.json").read_text()))
SMALL = 16 * 1024  # bytes per piece: every GPU trace but the tiniest is cut


def load(path, **kw):
    loaded = start_loading(str(path), **kw).result()
    figures = json.dumps(summarize_columns(join(loaded.parts)), sort_keys=True)
    return (figures, loaded.distributed_info, loaded.meta), loaded.pieces


def figures(path, **kw):
    return load(path, **kw)[0]


@pytest.mark.parametrize("name", TRACES)
def test_pieces_give_the_figures_of_one_pass(gpu_traces, name):
    path = gpu_traces / name
    got, pieces = load(path, jobs=4, min_piece=SMALL)
    size = len(read_json(str(path)))
    assert pieces == (min(size // SMALL, 255) if size >= MIN_PIECES * SMALL else 1)
    assert got == figures(path, jobs=1)


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
    one = figures(path, jobs=1)
    assert one[1] == {"rank": 5} and one[2] == {"worker": "w"}
    for jobs in (2, 3, 7):
        assert figures(path, jobs=jobs, min_piece=4096) == one


def test_a_bad_second_half_reports_like_one_pass(tmp_path):
    good = json.dumps({"traceEvents": [event(i, "aten::mm") for i in range(4000)]})
    path = tmp_path / "cut.json"
    path.write_text(good[: len(good) * 3 // 4])
    messages = []
    zombies_before = _zombie_children()
    for kw in ({"jobs": 1}, {"jobs": 4, "min_piece": 4096}):
        with pytest.raises(TraceError) as err:
            start_loading(str(path), **kw).result()
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "not JSON" in messages[0]
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


def test_one_pass_in_a_process_with_threads_or_for_small_text():
    assert _pieces(10 * MIN_PIECE, min_piece=MIN_PIECE) == 10
    assert _pieces((MIN_PIECES - 1) * MIN_PIECE, min_piece=MIN_PIECE) == 1  # a fork would cost more than it saves
    assert _workers(4) == 3
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
    got = figures(path, jobs=1)
    assert got == figures(write(tmp_path / "clean.json", {"traceEvents": clean}), jobs=1)
    assert json.loads(got[0])["host"]["peak_memory"]  # the [memory] event was read


def test_decoding_workers_start_before_numpy_is_imported(gpu_traces):
    # profkit forks its decoders, then imports numpy while they work: nothing on that path may import it.
    path = gpu_traces / "hta/trace_diff_control/control.json.gz"
    script = (
        "import sys\n"
        "import lightning_profkit.cli\n"
        "assert 'msgspec' not in sys.modules and 'numpy' not in sys.modules  # the first read starts before both\n"
        "from lightning_profkit.trace.load import start_loading\n"
        f"loading = start_loading({str(path)!r}, jobs=2, min_piece={SMALL})\n"
        "assert loading.children and 'numpy' not in sys.modules\n"
        "trace = loading.result()\n"
        "assert 'numpy' not in sys.modules\n"
        "print(trace.pieces)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) > 1


def test_rows_turn_odd_numbers_into_minus_one_and_a_missing_duration_into_nan():
    events = from_dicts([
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": None, "pid": 0, "tid": 7,
         "args": {"stream": "7", "correlation": 1.5, "External id": 2**70}},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 2.5, "dur": 3, "pid": 0, "tid": 7, "args": {"stream": 8}},
    ])
    r = rows(events)
    assert list(r.stream) == [7, 8] and list(r.corr) == [1, -1] and list(r.ext) == [-1, -1]
    assert math.isnan(r.dur[0]) and r.dur[1] == 3.0 and list(r.ts) == [1.0, 2.5] and r.fractional
    assert r.names == ["k"] and list(r.name) == [0, 0] and r.threads == [(0, 7)]
