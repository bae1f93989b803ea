"""Files another user could write into a shared run folder, each made by the test: every ``profkit`` command on the
folder finishes or refuses in at most 5 s of CPU and 300 MB (read from the OS), names what it left out, shows the
good trace beside it, and reads or uploads nothing outside the folder."""

import base64
import gzip
import json
import os
import random
import shutil
import struct
import zlib

import pytest
from conftest import GPU_TRACES, S3Server, measured_profkit, stop_fsspec_io

from lightning_profkit.report import run_data
from lightning_profkit.trace import sidecar
from lightning_profkit.trace.load import load
from lightning_profkit.trace.summary import summarize_trace

GOOD = GPU_TRACES / "hta/amd_mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz"  # a real trace, 6.7 kB
CANARY = "canary_outside_the_folder"  # an operator's name in a file outside the folder: never shown, never uploaded
WINDOW = "profiler/step=000001-000002-epoch=0"
N = 150_000


def step(k=0, ts=0, dur=10**9):
    return {"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{k}", "ts": ts, "dur": dur, "pid": 1, "tid": 1}


def trace(events):
    return gzip.compress(json.dumps({"traceEvents": events}).encode(), 6)


def shared_correlation():
    """12,000 launches and 12,000 kernels of one correlation id: a join of each launch with each kernel was 3.4 GB."""
    calls = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 10 * i, "dur": 5, "pid": 1,
              "tid": 1, "args": {"correlation": 7}} for i in range(12_000)]
    kernels = [{"ph": "X", "cat": "kernel", "name": "k", "ts": 10 * i + 2, "dur": 5, "pid": 0, "tid": 7,
                "args": {"correlation": 7, "stream": 7}} for i in range(12_000)]
    return {"t.pt.trace.json.gz": trace([step()] + calls + kernels)}


def many_threads():
    return {"t.pt.trace.json.gz": trace([step()] + [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": i, "dur": 1, "pid": 1, "tid": i} for i in range(N)])}


def deep_nesting():
    return {"t.pt.trace.json.gz": trace([step(dur=4 * N)] + [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "ts": i, "dur": 2 * N - 2 * i, "pid": 1, "tid": 1}
        for i in range(N)])}


def many_memory_devices():
    return {"t.pt.trace.json.gz": trace([step()] + [
        {"ph": "i", "name": "[memory]", "ts": i, "pid": 1, "tid": 1,
         "args": {"Device Type": 1, "Device Id": i, "Total Allocated": i, "Total Reserved": i}} for i in range(N)])}


def many_gpus():
    return {"t.pt.trace.json.gz": trace([step()] + [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": i, "dur": 1, "pid": i, "tid": 7, "args": {"stream": 7}}
        for i in range(N)])}


def numbers_msgspec_refuses():
    """68 kB of gzip, 64 MB of numbers where events go: the whole-text fallback of the standard library was 1.6 GB."""
    return {"t.pt.trace.json.gz": gzip.compress(b'{"traceEvents": [' + b"0," * (32 * 2**20 - 16) + b"0]}", 9)}


def four_mb_read_whole():
    """A gzip file under the 4 MB read whole, inflating to 300 MB (91x: under the ratio of a bomb)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(b'{"pad": "' + base64.b64encode(os.urandom(3 * 2**20)) + b'", "traceEvents": [')]
    block = b"0," * 2**20
    parts += [packer.compress(block) for _ in range(150)]
    parts.append(packer.compress(b"0]}") + packer.flush())
    return {"t.pt.trace.json.gz": b"".join(parts)}


def flood_of_events():
    """2.7 million events of a few bytes each (their times random, so that the gzip is 56x, under a bomb's ratio):
    each one's row costs what a real event's does (a 2.5 MB file of them was 15 s and 629 MB)."""
    times = random.Random(7).choices(range(10_000, 100_000), k=2_700_000)
    text = b'{"traceEvents": [' + b",".join(b'{"ph":"X","ts":%d}' % t for t in times) + b"]}"
    return {"t.pt.trace.json.gz": gzip.compress(text, 6)}


def deep_folders(window):
    """A thousand folders one in another beside the traces: a recursive walk ended every command (and would end
    pytest's own clean-up of old temporary folders: :func:`made` removes them)."""
    deep = window
    for _ in range(1000):
        deep = deep / "a"
        deep.mkdir()
    return {}


def remove_deep(folder):
    """Remove a chain of folders one in another, the deepest first, in a loop."""
    chain = [folder]
    while chain:
        below = [e.path for e in os.scandir(chain[-1]) if e.is_dir(follow_symlinks=False)]
        if below:
            chain.append(below[0])
        else:
            os.rmdir(chain.pop())


def linked_profiler(window):
    """The run's profiler/ folder a link to another user's run: nothing of it read, shown or written."""
    run = window.parents[1]
    outside = run.parent / "outside_profiler"
    (outside / "step=000001-000002-epoch=0").mkdir(parents=True)
    doc = {"traceEvents": [step(), {"ph": "X", "cat": "cpu_op", "name": CANARY, "ts": 1, "dur": 1, "pid": 1, "tid": 1}]}
    (outside / "step=000001-000002-epoch=0" / "secret.pt.trace.json").write_text(json.dumps(doc))
    shutil.move(run / "profiler", run / "kept_profiler")
    os.symlink(outside, run / "profiler")
    return {}


def socket_companion(window):
    """A socket where a trace's summary goes: opening it fails at once (ENXIO), never waits."""
    import socket

    here = os.getcwd()
    os.chdir(window)  # a socket's path is at most 107 bytes: bound by its name here
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind("g.pt.trace.json.gz.profkit")
        sock.close()
    finally:
        os.chdir(here)
    return {}


def name_not_utf8(window):
    """A trace whose name is not UTF-8 (and holds an escape and a line break)."""
    shutil.copy(GOOD, os.path.join(os.fsencode(window), b"\xff\x1b[31mred\nx.pt.trace.json.gz"))
    return {}


def absurd_sidecar(doc):
    """A summary fresh for its trace, of the schema's types, with figures no trace has."""
    doc["summary"]["operators"]["cpu"][0].update(calls=-2**63, total_us=1.7e308)
    doc["summary"]["rank"] = 2**64 - 1
    return json.dumps(doc).encode()


def good_with_sidecar(text_of):
    """The good trace, and beside it a sidecar of ``text_of(a real sidecar's JSON, as a dict)``."""
    def made(window):
        shutil.copy(GOOD, window / "g2.pt.trace.json.gz")
        path = str(window / "g2.pt.trace.json.gz")
        doc = json.loads(sidecar.dumps(summarize_trace(path, load(path)), os.stat(path)))
        return {"g2.pt.trace.json.gz.profkit": text_of(doc)}
    return made


def sidecar_60_mb(doc):
    doc["summary"]["operators"]["cpu"] = [{"name": f"op{i}", "calls": 1, "total_us": 1.0, "self_us": 1.0}
                                          for i in range(900_000)]
    return json.dumps(doc).encode()


def forged_fresh_sidecar(doc):
    """Fresh by size, time and the code's hash, and just under the cap: 200,000 operators."""
    doc["summary"]["operators"]["cpu"] = [{"name": f"op{i}", "calls": 1, "total_us": 1.0, "self_us": 1.0}
                                          for i in range(200_000)]
    text = json.dumps(doc).encode()
    assert len(text) < sidecar.MAX_BYTES
    return text


def nested_sidecar(doc):
    return json.dumps(doc)[:-2].encode() + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"


def odd_name():
    """A name whose digits int() refuses (``²``) in the natural sort of every command."""
    return {"1²2.pt.trace.json": gzip.decompress(GOOD.read_bytes())}


def long_step_number():
    return {"t.pt.trace.json.gz": trace([step(k="9" * 5000)])}


def fifo_tfevents(window):
    os.mkfifo(window.parents[1] / "events.out.tfevents.0")
    return {}


def fifo_events_table(window):
    os.mkfifo(window / "g.pt.trace.json.gz.parquet")
    return {}


def bogus_events_table(window):
    """An events table whose footer claims 4 GB."""
    return {"g.pt.trace.json.gz.parquet": b"PAR1" + b"\0" * 100 + (2**32 - 1).to_bytes(4, "little") + b"PAR1"}


def links_outside(window):
    """A trace and a sidecar that are links to the user's own files outside the folder."""
    outside = window.parents[2] / "outside"
    outside.mkdir()
    doc = {"traceEvents": [step(), {"ph": "X", "cat": "cpu_op", "name": CANARY, "ts": 1, "dur": 1, "pid": 1, "tid": 1}]}
    (outside / "secret.pt.trace.json").write_text(json.dumps(doc))
    os.symlink(outside / "secret.pt.trace.json", window / "s.pt.trace.json")
    os.symlink(outside / "secret.pt.trace.json", window / "g.pt.trace.json.gz.profkit")
    return {}


def big_metrics_csv(window):
    (window.parents[1] / "metrics.csv").write_bytes(b"epoch,step,profkit/data_wait_ratio\n" + b"0,9,0.5\n" * 2_500_000)
    return {}


def many_epochs_csv(window):
    """A metrics.csv just under its cap, every row an epoch of ours."""
    head = b"epoch,step,profkit/data_wait_ratio,profkit/gpu_idle_ratio,profkit/step_time_ms_mean\n"
    rows = head + b"".join(b"%d,%d,0.5,0.1,12.5\n" % (i, i) for i in range(600_000))
    assert len(rows) < run_data.METRICS_BYTES
    (window.parents[1] / "metrics.csv").write_bytes(rows)
    return {}


def many_events(window):
    """A TensorBoard event file just under its cap, every record a figure of ours at a step of its own."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    def framed(step):
        record = Event(step=step, wall_time=1.0, summary=Summary(value=[
            Summary.Value(tag="profkit/data_wait_ratio", simple_value=0.5)])).SerializeToString()
        return struct.pack("<Q", len(record)) + b"\0" * 4 + record + b"\0" * 4

    count = run_data.EVENTS_BYTES // len(framed(2**40))
    (window.parents[1] / "events.out.tfevents.1").write_bytes(b"".join(map(framed, range(count))))
    return {}


CASES = {
    "one correlation id for 12,000 launches and kernels": shared_correlation,
    "150,000 events on as many threads": many_threads,
    "150,000 events nested 150,000 deep": deep_nesting,
    "150,000 memory devices": many_memory_devices,
    "150,000 GPUs": many_gpus,
    "64 MB of numbers where events go": numbers_msgspec_refuses,
    "a 3 MB gzip file of 300 MB": four_mb_read_whole,
    "a sidecar of 60 MB": good_with_sidecar(sidecar_60_mb),
    "a forged fresh sidecar of 200,000 operators": good_with_sidecar(forged_fresh_sidecar),
    "a sidecar of 100,000 nested brackets": good_with_sidecar(nested_sidecar),
    "a name with a digit int() refuses": odd_name,
    "a step number of 5,000 digits": long_step_number,
    "a pipe named events.out.tfevents.0": fifo_tfevents,
    "a pipe in an events table's place": fifo_events_table,
    "an events table whose footer claims 4 GB": bogus_events_table,
    "links to files outside the folder": links_outside,
    "a metrics.csv over its cap": big_metrics_csv,
    "a metrics.csv of 600,000 epochs": many_epochs_csv,
    "a flood of 2.7 million tiny events": flood_of_events,
    "a thousand folders deep": deep_folders,
    "profiler/ a link to another run": linked_profiler,
    "a socket where a summary goes": socket_companion,
    "a name that is not UTF-8": name_not_utf8,
    "a summary of absurd figures": good_with_sidecar(absurd_sidecar),
    "an event file of a million epochs": many_events,
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    import s3fs

    server = S3Server(tmp_path_factory.mktemp("s3") / "moto.log")
    with pytest.MonkeyPatch.context() as env:
        for name, value in server.env().items():
            env.setenv(name, value)
        s3fs.S3FileSystem.clear_instance_cache()
        server.fs.mkdir(server.bucket)
        yield server
        server.stop()
        stop_fsspec_io()


def made(tmp_path, case):
    """The run folder of ``case``: a window of the good trace, and the hostile files."""
    run = tmp_path / "run"
    window = run / WINDOW
    window.mkdir(parents=True)
    shutil.copy(GOOD, window / "g.pt.trace.json.gz")
    build = CASES[case]
    files = build(window) if build.__code__.co_argcount else build()
    for name, data in files.items():
        (window / name).write_bytes(data)
    return run


@pytest.fixture
def made_run(tmp_path, case):
    run = made(tmp_path, case)
    yield run
    if (run / WINDOW / "a").is_dir():
        remove_deep(run / WINDOW / "a")


@pytest.mark.parametrize("case", CASES)
def test_every_command_on_a_hostile_file_is_bounded_and_leaves_only_it_out(tmp_path, store, case, made_run):
    run = made_run
    url = f"s3://{store.bucket}/case{list(CASES).index(case)}"
    commands = {
        "summary": ["summary", run, "--json"],
        "report": ["report", run, "-o", tmp_path / "report.html"],
        "sql": ["sql", run, "SELECT count(*) AS n FROM events"],
        "export": ["export", run],
        # the folder a user would give (a linked profiler/ given by name is the user's own choice: not this test's)
        "upload": ["upload", next(p for p in (run / "profiler", run / "kept_profiler") if not p.is_symlink()), url],
    }
    seen = {}
    for command, args in commands.items():
        code, out, err, cpu_s, peak_mb = measured_profkit(*args, env=store.env())
        seen[command] = (code, cpu_s, peak_mb)
        assert code in (0, 1, 3) and not any("Traceback" in line for line in err), (command, code, err[-5:])
        assert cpu_s < 5 and peak_mb < 300, (command, cpu_s, peak_mb)
        assert CANARY.encode() not in out, command
        if command == "summary":  # the good trace is shown, whatever lies beside it
            assert code in (0, 3) and "g.pt.trace.json.gz" in out.decode(), (code, err)
            assert (code == 3) == bool(json.loads(out)["left_out"]) and len(err) == len(set(err)), err
        if code == 3:  # each file left out named on a line of its own
            assert err and all(line.startswith("profkit: ") for line in err), err
    html = (tmp_path / "report.html").read_text() if (tmp_path / "report.html").exists() else ""
    assert CANARY not in html
    uploaded = store.keys(url.split("/", 3)[3])
    assert all(CANARY.encode() not in store.read(key) for key in uploaded)
    assert any(key.endswith("/g.pt.trace.json.gz") for key in uploaded), uploaded
    print(case, {c: f"exit {code}, {cpu:.2f} s CPU, {mb:.0f} MiB" for c, (code, cpu, mb) in seen.items()})
