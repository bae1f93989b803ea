"""The report page from plain run data, without a Trainer or a browser: what each section shows, and that every
name from the run is escaped."""

from lightning_profkit.report.page import page
from lightning_profkit.report.run_data import Alert, Epoch, RunData


def test_epochs_alerts_and_the_empty_sections():
    data = RunData("metrics.csv", [Epoch(0, 9, 0.41, None, 12.5, 20.0, 1.0), Epoch(1, 19, 0.12, None, 10.0, 11.0, 0.0)],
                   [Alert(9, "**41% of the training time ... waiting for the DataLoader**")])
    html = page("/runs/r1", data, [], "/runs", "/runs/r1")
    assert "<h1>Run report: r1</h1>" in html and "0 trace(s) in 0 window(s)" in html
    assert "41.0%" in html and "12.0%" in html and "waiting for the DataLoader" in html
    assert "No profiled window in this run." in html and "tensorboard --logdir /runs/r1" in html
    assert "<script" not in html and "http://" not in html


def test_names_from_the_run_are_escaped():
    data = RunData("<b>metrics</b>.csv", [], [Alert(3, "<img src=x onerror=alert(1)>")])
    html = page("/runs/<script>x</script>", data, [], "/runs", "/runs/<script>x</script>")
    assert "<script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html
    assert "<img" not in html and "<b>metrics" not in html


def test_several_ranks_show_the_mean_and_the_worst_rank_the_alert_read():
    """DDP: the mean data wait over ranks beside the worst rank's, which the alert used, each labelled."""
    data = RunData("metrics.csv", [Epoch(0, 9, 0.169, None, 12.5, 20.0, 1.0, data_wait_ratio_max=0.41,
                                         data_wait_worst_rank=1.0)])
    html = page("/runs/r1", data, [], "/runs", "/runs/r1")
    assert "data-wait ratio, mean over ranks" in html and "data-wait ratio, worst rank (what alerts read)" in html
    assert "<td>16.9%</td><td>41.0%</td><td>1</td>" in html


def test_an_alerts_text_is_shown_as_written():
    """The alert's Markdown (written for TensorBoard, every text escaped) reads on the page as the console's."""
    import html
    import re

    from lightning_profkit.alerts import DataWaitAlert
    from lightning_profkit.report.page import markdown

    advice = "num_workers=0: `Dataset.__getitem__` took *most* <b>x</b> & [a](b)"
    shown = markdown(DataWaitAlert(0.4, 0.2, 0, 9, "epoch 0", advice=[advice], trace_dir="/r/a_b/step=[1]").markdown)
    text = html.unescape(re.sub(r"<[^>]+>", "", shown))
    assert advice in text and "/r/a_b/step=[1]" in text and "<b>" not in shown and "<code>" not in shown


def test_a_forged_sidecar_cannot_put_markup_on_the_page(tmp_path, gpu_traces):
    """A sidecar is believed once its trace's size, time and the code's hash match and its figures have their types:
    one written by hand with markup where names go (an operator's) is shown as text by `profkit report` (markup
    where a number goes makes the sidecar unread: tests/trace/test_sidecar.py)."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    from lightning_profkit.companions import SIDECAR
    from lightning_profkit.trace.folder import read_folder

    window = tmp_path / "run" / "profiler" / "step=000001-000002-epoch=0"
    window.mkdir(parents=True)
    for rank in (0, 1):
        shutil.copy(gpu_traces / "hta" / "trace_filter" / f"sampled_rank-{rank}.json.gz",
                    window / f"host_rank{rank}.1.pt.trace.json.gz")
    read_folder(str(window), 1)  # the sidecars, as profkit keeps them
    bad = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    for trace in sorted(window.glob("*.pt.trace.json.gz")):
        doc = json.loads(open(str(trace) + SIDECAR, "rb").read())
        ops = doc["summary"]["operators"]["cpu"]
        assert ops, "the real trace has CPU operators to forge"
        ops[0]["name"] = bad
        with open(str(trace) + SIDECAR, "w") as f:
            json.dump(doc, f)
    out = tmp_path / "report.html"
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "profkit"), "report", str(tmp_path / "run"),
                           "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    html = out.read_text()
    assert "&lt;script&gt;" in html  # the forged values were shown, as text
    assert "<script" not in html and "<img" not in html
