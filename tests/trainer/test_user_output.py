"""What a user reads, from real runs: the demo's lines in the order things happen, the alert printed as a
warning of its category, names cut between words, window folders in step order, and `profkit`'s JSON and
tables (ranks, integer steps, units, one name per figure, absent figures, pp, call counts)."""

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import warnings

import pytest

from conftest import SleepDataset, TinyModel, make_trainer, trace_files
from lightning_profkit import PerformanceMonitor
from lightning_profkit.alerts import DataWaitWarning
from lightning_profkit.trace.headline import short_name as _short
from lightning_profkit.notices import warn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFKIT = os.path.join(os.path.dirname(sys.executable), "profkit")
WINDOW = re.compile(r"^epoch=(\d{4})-batch=(\d{6})(?:-(\d{6}))?$")


def profkit(*args):
    done = subprocess.run([PROFKIT, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def unactivated_env() -> dict[str, str]:
    """The environment of a user who ran `bash dev.sh demo` without activating its virtual environment."""
    scripts = os.path.dirname(sys.executable)
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if os.path.realpath(d) != os.path.realpath(scripts)]
    return {**os.environ, "PATH": os.pathsep.join(path)}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo as the README runs it (2 epochs of 64 steps), stdout and stderr as one stream, in order."""
    out = tmp_path_factory.mktemp("demo")
    done = subprocess.run([sys.executable, "-u", os.path.join(ROOT, "examples", "data_bound.py"), "--out", str(out)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300, cwd=out,
                          env=unactivated_env())
    assert done.returncode == 0, done.stdout[-3000:]
    return out, done.stdout


def test_demo_prints_plan_and_paths_without_usdt_noise(demo):
    out, text = demo
    assert "USDT:" not in text
    assert text.count("lightning_profkit: profiling batches 11-13 of every epoch") == 1
    assert "tensorboard --logdir" in text
    assert all(path in text for path in trace_files(out))


def test_the_printed_commands_run_as_printed(demo):
    out, text = demo
    activate = re.search(r"run `(source \S+)` first", text).group(1)
    report = re.search(r"(profkit report \S+ -o report\.html)", text).group(1)
    done = subprocess.run(["bash", "-c", f"{activate} && {report} && tensorboard --version"], cwd=out,
                          env=unactivated_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (out / "report.html").stat().st_size > 0


def test_the_alert_reads_like_a_warning_in_the_order_things_happen(demo):
    _, text = demo
    lines = text.splitlines()
    (alert,) = [i for i, line in enumerate(lines) if "data wait was" in line]
    where, said = lines[alert].split(": ", 1)  # shown at the user's line (the demo's fit), with its category
    assert where.startswith(os.path.join(ROOT, "examples", "data_bound.py") + ":") and "lightning_profkit" not in said
    # a check of 100 steps over epochs of 64 steps names both epochs, and where in them it began and ended
    assert said.startswith(CATEGORY + "epoch 0 batch 0 to epoch 1 batch 35: data wait was ")
    # as Python shows it (Lightning's format, where it leaves the category out, leaves out the line too)
    assert not CATEGORY or any(line.strip().startswith("trainer.fit(") for line in lines[alert:alert + 8])
    # it says which steps it records, and one more line names their trace once written
    recording = [line.strip() for line in lines[alert:alert + 6] if line.strip().startswith("Recording")]
    assert recording == ["Recording 3 steps after it; their trace is named when written"]
    (named,) = [i for i, line in enumerate(lines) if "trace of the steps after the alert (epoch 0 batch 0 to epoch 1 batch 35)" in line]
    assert named > alert and lines[named + 1].endswith("profiler/epoch=0001-batch=000037-000039")  # steps 101-103


def test_the_alert_can_still_be_filtered_by_its_category(tmp_path):
    code = ("import warnings\nfrom lightning_profkit.alerts import DataWaitWarning\nfrom lightning_profkit.notices import warn\n"
            "warn('PerformanceMonitor: slow', DataWaitWarning)\n"
            "warnings.filterwarnings('ignore', category=DataWaitWarning)\nwarn('PerformanceMonitor: hidden', DataWaitWarning)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    # shown at the user's line (Python 3.13 also prints a `-c` program's line under it); the filtered one not at all
    assert done.stderr.splitlines()[0] == "<string>:4: DataWaitWarning: PerformanceMonitor: slow"
    assert "hidden" not in done.stderr and done.stderr.count("DataWaitWarning:") == 1
    before = warnings.formatwarning
    with pytest.warns(DataWaitWarning, match="slow"):
        warn("PerformanceMonitor: slow", DataWaitWarning)
    assert warnings.formatwarning is before  # other warnings keep their format


def test_window_folders_sort_in_time_order_everywhere(demo):
    out, _ = demo
    folder = os.path.dirname(os.path.dirname(trace_files(out)[0]))
    names = sorted(os.listdir(folder))  # what `ls`, TensorBoard's run list and HTA see
    steps = [64 * int(WINDOW.match(n).group(1)) + int(WINDOW.match(n).group(2)) for n in names]  # 64 batches an epoch
    assert steps == sorted(steps) and steps == [11, 75, 101]
    listed = [t["window"] for t in json.loads(profkit("summary", "--json", folder))["traces"]]
    assert listed == names


def test_the_end_of_fit_line_cuts_names_between_words(demo):
    """The end of the fit names the costliest operator of the run's windows as `profkit summary` finds it (the
    DataLoader's on an idle machine; on a busy one another may cost more), cut between words where it is long."""
    out, text = demo
    lines = text.splitlines()
    (first,) = [i for i, line in enumerate(lines) if "windows of rank 0" in line]
    assert "CpuOp" in lines[first + 1] and "CPU Exec" not in lines[first + 1]  # the names of `profkit summary`
    folder = os.path.dirname(os.path.dirname(trace_files(out)[0]))
    top = json.loads(profkit("summary", "--json", folder))["aggregate"]["operators"]["cpu_by_self"][0]["name"]
    assert lines[first + 2].startswith(f"lightning_profkit: most CPU self time: {_short(top, 60)}, "), (top, lines)


def test_summary_json_says_rank_steps_and_units(tmp_path):
    monitor = PerformanceMonitor(steps="2-3", alert_threshold=None)
    make_trainer(tmp_path, [monitor]).fit(TinyModel(SleepDataset(20, delay=0.001)))
    got = json.loads(profkit("summary", "--json", tmp_path))
    (trace,) = got["traces"]
    assert trace["worker"].endswith("_rank0") and trace["rank"] == 0
    assert trace["step_breakdown"]["steps"] == [2, 3]
    assert {"*_us, step_breakdown.per_step.*, step_breakdown.avg.*", "*_share, *_frac, share/*", "*_ms"} <= set(got["units"])
    # the rank comes from the worker name where a trace has no distributedInfo
    from lightning_profkit.trace.summary import rank_of
    assert rank_of(None, "node-3_rank12") == 12 and rank_of({"rank": 5}, "w") == 5 and rank_of(None, "worker0") is None


def test_one_name_per_figure_and_absent_gpu_figures_on_a_cpu_trace(gpu_traces):
    text = profkit("summary", gpu_traces / "hta/cpu_only")
    data = json.loads(profkit("summary", "--json", gpu_traces / "hta/cpu_only"))
    figures = data["aggregate"]["figures"]
    assert figures["blocking_sync_ms_per_step"] is None and figures["gpu_idle_share"] is None
    header = next(line for line in text.splitlines() if line.startswith("trace ") and "data_wait_share" in line)
    row = text.splitlines()[text.splitlines().index(header) + 1]
    cells = dict(zip(header.split(), row.split()))
    assert cells["blocking_sync_ms_per_step"] == "-" and cells["gpu_idle_share"] == "-"
    for key in figures:  # every figure of the JSON under the same name in the text (GPU idle by cause: with a GPU)
        shown = key.split("/", 1)[1] if key.startswith("share/") else key
        by_cause = key.startswith("gpu_idle_") and key != "gpu_idle_share"
        if not key.startswith(("sync_ms_per_step/", "host_step_ms", "peak_memory_mb/")) and not by_cause:
            assert shown in text, key
    assert all(figures[f"gpu_idle_{cause}_share"] is None for cause in ("data_wait", "blocking_sync", "cpu_ops", "other"))
    assert "CPU Exec" not in text.replace('"CPU Exec"', "")  # named once, as torch-tb-profiler's name for CpuOp


def data_wait_share(folder):
    """The DataLoader's share of the host's ProfilerStep time, counted here over the raw events of the one trace in
    ``folder`` (the union of the ``__next__`` spans inside the steps, over the steps' time)."""
    (path,) = folder.glob("*.json.gz")
    events = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X" and "ts" in e]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ProfilerStep#")
             and e.get("cat", "").lower() in ("cpu_instant_event", "user_annotation", "operator", "cpu_op")]
    loader, inside = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith(
        "enumerate(DataLoader)#") and e["name"].endswith(".__next__")), 0.0
    for a, b in steps:
        covered = []  # the loader's spans cut to the step, merged
        for x, y in ((max(x, a), min(y, b)) for x, y in loader if y > a and x < b):
            if covered and x <= covered[-1][1]:
                covered[-1][1] = max(covered[-1][1], y)
            else:
                covered.append([x, y])
        inside += sum(y - x for x, y in covered)
    return inside / sum(b - a for a, b in steps)


def test_compare_prints_percentage_points(gpu_traces):
    before, after = gpu_traces / "kineto/resnet50_num_workers_0", gpu_traces / "kineto/resnet50_num_workers_4"
    text = profkit("compare", before, after)
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith(("data_wait_share", "step_time_ms"))}
    a, b = data_wait_share(before), data_wait_share(after)  # 39.6% and 1.0%
    assert rows["data_wait_share"][1:] == [f"{100 * a:.1f}%", f"{100 * b:.1f}%", f"{100 * (b - a):.1f}", "pp"]
    assert rows["step_time_ms"][-1] == "-36.52"  # not a percentage: its own unit


def test_call_counts_are_never_rounded_away(tmp_path, gpu_traces):
    # 2 traces: an operator that one of them calls once is shown with its 1 call, not a mean of 0.5 -> 0
    for i, name in enumerate(["hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
                              "hta/rank_non_gpu/rank_non_gpu.json.gz"]):
        (tmp_path / f"w{i}").mkdir()
        shutil.copy(gpu_traces / name, tmp_path / f"w{i}" / f"t{i}.pt.trace.json.gz")
    data = json.loads(profkit("summary", "--json", tmp_path))
    calls = {}
    for trace in data["traces"]:
        for row in trace["operators"]["cpu"]:  # whole tables
            calls[row["name"]] = calls.get(row["name"], 0) + row["calls"]
    text = profkit("summary", tmp_path)
    table = text[text.index("Top CPU operators by self"):].split("\n\n")[0].splitlines()
    assert "calls in 2 traces" in table[1]
    for line in table[2:]:
        name, count = re.match(r"^(.*?)\s{2,}(\d+)\s+[\d.]+$", line).groups()
        if name in calls:
            assert int(count) == calls[name], name
    assert any(c == 1 for c in calls.values())


def test_the_metrics_page_lists_every_metric_a_real_fit_logs(tmp_path):
    from lightning.pytorch.loggers import CSVLogger

    logger = CSVLogger(tmp_path, name="csv")
    monitor = PerformanceMonitor(steps="4-6", alert_window=5)
    make_trainer(tmp_path, [monitor], max_epochs=2, logger=[logger]).fit(TinyModel(SleepDataset(40, delay=0.002)))
    header = open(os.path.join(logger.log_dir, "metrics.csv")).readline().strip().split(",")
    logged = {k[len("profkit/"):] for k in header if k.startswith("profkit/")}
    page = open(os.path.join(ROOT, "docs", "metrics.md")).read()
    table = {name for row in page.splitlines() if row.startswith("| `") for name in re.findall(r"`([^`]+)`", row.split("|")[1])}
    assert {"data_wait_ratio", "window/host_step_ms", "window/data_wait_share"} <= logged
    assert logged <= table, logged - table


OURS = ("lightning_profkit:", "DataWaitWarning:", "RuntimeWarning: PerformanceMonitor:", "UserWarning: PerformanceMonitor:")
TABLE_ROW = re.compile(r"\S {2,}\S")  # aligned columns
WHERE = re.compile(r"^\S+:\d+: ")  # Python's place of a warning: the user's file and line, not ours
HERE = os.path.dirname(os.path.abspath(__file__))
# Lightning's warnings format leaves a warning's category out where its file's path holds "lightning" (a clone in
# a folder named lightning_profkit): the user's line then reads "train.py:79: epoch 0 ...", as Lightning shows it
CATEGORY = "" if "lightning" in HERE else "DataWaitWarning: "


def our_lines(text: str, everything: bool = False, source: str = "") -> list[str]:
    """The lines of ours in ``text``: those that start with one of our prefixes (a warning's after the user's file
    and line, which Python puts first) and the indented lines after them (``everything``: every line, as in profkit's
    output), less table rows and the user's line of ``source`` that Python shows under a warning."""
    out, ours = [], False
    code = {line.strip() for line in source.splitlines() if line.strip()}
    for line in text.splitlines():
        placed = WHERE.match(line)
        line = WHERE.sub("", line)
        from_here = not CATEGORY and placed is not None and placed[0].startswith(HERE)  # a test script's warning
        ours = (everything or line.startswith(OURS) or from_here
                or (ours and line.startswith("  ") and line.strip() not in code))
        if ours and not TABLE_ROW.search(line):
            out.append(line)
    return out


def test_every_line_a_fit_and_profkit_print_fits_120_characters(tmp_path):
    """A fit that alerts and whose steps slow after the first window, then `profkit summary`, `compare` and
    `report` on its run: every line ours (the run folder's path written <run>: a user's paths are their own)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "story_script.py")
    fit = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert fit.returncode == 0, fit.stderr[-3000:]
    printed = our_lines(fit.stdout + fit.stderr, source=open(script).read())
    said = "\n".join(printed)
    assert "data wait was" in said and "slower after the windows" in said and "windows of rank 0" in said, said
    profiler = tmp_path / "lightning_logs" / "version_0" / "profiler"
    windows = sorted(p for p in profiler.iterdir() if p.is_dir())
    for args in (["summary", profiler], ["compare", windows[0], windows[-1]],
                 ["report", profiler.parent, "-o", tmp_path / "report.html"]):
        done = subprocess.run([PROFKIT, *map(str, args)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        printed += our_lines(done.stdout + done.stderr, everything=True)
    long = [line for line in (p.replace(str(tmp_path), "<run>") for p in printed) if len(line) > 120]
    assert not long, "\n".join(long)
