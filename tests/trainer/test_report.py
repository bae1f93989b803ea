"""`profkit report`: one HTML page of a real run, opened by a real headless Chromium from a file with the
network cut off; and the page of runs without alerts or without windows."""

import json
import os
import shutil
import subprocess
import sys
import urllib.parse

from conftest import SleepDataset, TinyModel, chrome, make_trainer
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from test_alerts import Busy, fit
from torch.utils.data import DataLoader

from lightning_profkit import PerformanceMonitor

PROFKIT = os.path.join(os.path.dirname(sys.executable), "profkit")
SCREENSHOT = os.environ.get("PROFKIT_REPORT_SCREENSHOT")  # set to write docs/report.png


def report(run_dir, out):
    done = subprocess.run([PROFKIT, "report", str(run_dir), "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stderr, out.read_text()


def test_a_data_bound_run_in_a_browser_offline(tmp_path):
    monitor = PerformanceMonitor(alert_window=10, steps="2-3")
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    fit(tmp_path, monitor, Busy(SleepDataset(60, delay=0.004), work=0.002), logger=logger, max_epochs=3)
    assert monitor.alerts and len(os.listdir(monitor.trace_dir)) >= 2
    said, page = report(logger.log_dir, tmp_path / "report.html")
    assert "3 epoch(s)" in said and "alert(s)" in said
    assert "data wait was" in page and "num_workers=0" in page  # the alert's advice
    assert "http://" not in page and "https://" not in page and "<script" not in page  # nothing to fetch

    browser = chrome(offline=True)
    try:
        browser.get((tmp_path / "report.html").as_uri())
        drawn = browser.execute_script("""
            const box = (sel) => [...document.querySelectorAll(sel)].map((e) => e.getBBox()).filter((b) => b.width > 0 || b.height > 0).length;
            return {lines: box('svg.chart polyline.series'), points: box('svg.chart circle'),
                    bars: box('svg.bar rect'), windows: document.querySelectorAll('.window').length};""")
        failed = [e for e in browser.get_log("performance") if "Network.loadingFailed" in e["message"]]
        requested = [json.loads(e["message"])["message"]["params"]["request"]["url"]
                     for e in browser.get_log("performance") if "Network.requestWillBeSent" in e["message"]]
        browser.save_screenshot(str(tmp_path / "report.png"))
        if SCREENSHOT:
            browser.set_window_size(1100, 2400)  # the whole page
            browser.save_screenshot(SCREENSHOT)
    finally:
        browser.quit()
    assert not failed and all(u.startswith(("file:", "data:")) for u in requested), (failed, requested)
    assert drawn["lines"] >= 2 and drawn["points"] >= 6  # data wait and step time (mean, p90) over 3 epochs
    assert drawn["windows"] >= 2 and drawn["bars"] >= 2 * drawn["windows"]  # each window's step cut in parts
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_runs_without_alerts_or_windows_still_render(tmp_path):
    monitor = PerformanceMonitor(profile=False, capture_on_alert=False, alert_threshold=None)
    logger = CSVLogger(str(tmp_path), name="csv")
    fit(tmp_path, monitor, Busy(SleepDataset(20, delay=0.001)), logger=logger, max_epochs=2)
    said, page = report(logger.log_dir, tmp_path / "plain.html")
    assert "2 epoch(s), 0 trace(s), 0 alert(s)" in said
    assert "No profiled window" in page and "No data-wait alert" in page and page.count("<polyline class='series'") >= 2

    monitor = PerformanceMonitor(steps="1-2", alert_threshold=None)
    logger = CSVLogger(str(tmp_path), name="windows")
    fit(tmp_path, monitor, Busy(SleepDataset(20, delay=0.001)), logger=logger)
    said, page = report(monitor.trace_dir, tmp_path / "from-profiler.html")  # given the profiler/ folder
    assert "1 epoch(s), 1 trace(s)" in said and "class='window'" in page and "epoch=0000-batch=000001-000002" in page
    link = page.split("Trace: <a href='")[1].split("'")[0]
    assert (tmp_path / urllib.parse.unquote(link)).is_file()  # relative to the page, percent-encoded
    # a page that cannot be written is named as the user gave it (it named the temporary file written first)
    out = tmp_path / "missing" / "r.html"
    done = subprocess.run([PROFKIT, "report", monitor.trace_dir, "-o", str(out)], capture_output=True, text=True,
                          timeout=300)
    assert (done.returncode, done.stderr) == (1, f"profkit: {out}: cannot write the report: No such file or directory\n")


def test_an_empty_folder_and_a_url_get_a_clear_error(tmp_path):
    done = subprocess.run([PROFKIT, "report", str(tmp_path), "-o", str(tmp_path / "empty.html")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1 and "nothing to report" in done.stderr and not (tmp_path / "empty.html").exists()
    done = subprocess.run([PROFKIT, "report", "s3://bucket/run"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "reads a local run folder" in done.stderr


class Tested(TinyModel):
    def test_step(self, batch, batch_idx):
        self.log("test_loss", self.layer(batch).pow(2).mean())


def test_a_test_run_after_the_fit_leaves_the_fits_epochs_as_they_were(tmp_path):
    """``trainer.test`` after ``fit`` logs ``epoch`` at the fit's last step too: the report still shows epochs 0,
    1 and 2 of the 3-epoch fit (it showed 0, 1, 3)."""
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    trainer = make_trainer(tmp_path, [PerformanceMonitor(profile=False, alert_threshold=None)], max_epochs=3,
                           logger=logger)
    model = Tested(SleepDataset(20))
    trainer.fit(model)
    trainer.test(model, dataloaders=DataLoader(SleepDataset(4), batch_size=2), verbose=False)
    said, page = report(logger.log_dir, tmp_path / "r.html")
    assert "3 epoch(s)" in said
    rows = [row.split("</td>")[0] for row in page.split("<tr><td>")[1:4]]
    assert rows == ["0", "1", "2"], rows


HOSTILE = ["javascript:alert(1);x.pt.trace.json.gz", "data:text,html<script>alert(2)<%2fscript>.pt.trace.json.gz",
           "x' onclick='alert(3).pt.trace.json.gz", "?q=1#frag.pt.trace.json.gz", "%2e%2e.pt.trace.json.gz"]


def test_every_link_of_a_report_from_hostile_file_names_opens_its_own_file(tmp_path, gpu_traces):
    """Trace files named like URLs, scripts and queries, and the report written beside them: every link on the page
    is a file of the run, and clicking it runs nothing (a bare ``javascript:…`` name ran its script)."""
    from selenium.webdriver.common.by import By

    trace = gpu_traces / "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    window = tmp_path / "run" / "profiler" / "epoch=0000-batch=000001-000002"
    window.mkdir(parents=True)
    for name in HOSTILE:
        shutil.copy(trace, window / name)
    page = window / "report.html"
    said, _ = report(tmp_path / "run", page)
    assert f"{len(HOSTILE)} trace(s)" in said
    browser = chrome(offline=True)
    hook = "window.__alerts = 0; window.alert = () => { window.__alerts += 1; };"
    alerts = []
    try:
        browser.get(page.as_uri())
        hrefs = browser.execute_script("return [...document.querySelectorAll('a')].map((a) => a.href);")
        for i in range(len(hrefs)):
            browser.get(page.as_uri())
            browser.execute_script(hook)
            browser.find_elements(By.TAG_NAME, "a")[i].click()
            if browser.current_url == page.as_uri():  # a download, or a script run: the page stays
                alerts.append(browser.execute_script("return window.__alerts;"))
    finally:
        browser.quit()
    opened = sorted(urllib.parse.unquote(urllib.parse.urlsplit(h).path) for h in hrefs)
    assert all(h.startswith("file:///") for h in hrefs) and opened == sorted(str(window / n) for n in HOSTILE), hrefs
    assert not any(alerts), alerts
