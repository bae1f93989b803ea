"""A real browser (headless Chromium via Selenium) opens TensorBoard's PyTorch Profiler tab and its Scalars page on
our run."""

import os
import time
import urllib.parse

import pytest
from lightning.pytorch.loggers import TensorBoardLogger

from conftest import SleepDataset, TinyModel, chrome, make_trainer
from lightning_profkit import PerformanceMonitor
from test_tensorboard import data_bound_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCREENSHOT = os.environ.get("PROFKIT_SCREENSHOT")  # set to write docs/tensorboard-offline.png
SCALARS_SCREENSHOT = os.environ.get("PROFKIT_SCALARS_SCREENSHOT")  # docs/tensorboard-scalars.png
TAGS = ("profkit/data_wait_ratio", "profkit/rolling/data_wait_ratio", "profkit/step_time_ms_mean")  # on that page


def test_profiler_tab_shows_our_run_and_its_dataloader_share(tmp_path, tensorboard_server):
    """The plugin's page lists our window as a run with its worker and Overview; the page's own data
    request for that Overview carries a DataLoader share above zero.

    The plugin draws its charts with Google Charts, loaded from gstatic.com at page load; with no internet
    (this machine, CI) the charts themselves never render, so the figure is read from the page's request.
    """
    from selenium.webdriver.common.by import By

    monitor = data_bound_run(tmp_path, steps="10-13")
    run = f"{os.path.basename(monitor.trace_dir)}/epoch=0000-batch=000010-000013"  # no logger: profiler/run=.../
    server = tensorboard_server(os.path.dirname(monitor.trace_dir))
    server.wait_for(lambda: run in server.get("runs")["runs"])
    browser = chrome()
    try:
        browser.get(f"{server.base}/#pytorch_profiler")
        deadline, text = time.monotonic() + 60, ""
        while time.monotonic() < deadline and not (run in text and "Overview" in text and "_rank0" in text):
            time.sleep(1)
            browser.switch_to.default_content()
            frames = browser.find_elements(By.TAG_NAME, "iframe")
            if frames:
                browser.switch_to.frame(frames[0])
                text = browser.find_element(By.TAG_NAME, "body").text
        assert run in text and "Overview" in text and "_rank0" in text, text[-2000:]
        worker = next(line for line in text.splitlines() if line.endswith("_rank0"))
        overview = browser.execute_async_script(
            """
            const [run, worker, done] = arguments;
            const q = (p) => fetch(`/data/plugin/pytorch_profiler/${p}`).then((r) => r.json());
            q(`spans?run=${run}&worker=${worker}`)
              .then((spans) => q(`overview?run=${run}&worker=${worker}&span=${spans[0]}`))
              .then(done, (e) => done(String(e)));
            """,
            run,
            worker,
        )
        summary = {row["name"]: row["extra"] for row in overview["performance"][0]["children"]}
        share = next(row for row in overview["performance"][0]["children"] if row["name"] == "DataLoader")
        assert share["extra"] > 0, summary
        if SCREENSHOT:
            browser.switch_to.default_content()
            browser.save_screenshot(SCREENSHOT)
    finally:
        browser.quit()


def test_scalars_dashboard_draws_the_profkit_curves_offline(tmp_path, tensorboard_server):
    """TensorBoard's own Time Series (Scalars) page, with the network cut off: the profkit/ cards are there and
    their lines are drawn (pixels in the chart's canvas, or paths where it draws SVG)."""
    from selenium.webdriver.common.by import By

    logger = TensorBoardLogger(str(tmp_path), name="tb")
    make_trainer(tmp_path, [PerformanceMonitor(steps="2-3", alert_window=8)], max_epochs=3, logger=logger).fit(
        TinyModel(SleepDataset(48, delay=0.002), batch_size=2))
    server = tensorboard_server(logger.log_dir)
    server.wait_for(lambda: any("profkit/data_wait_ratio" in tags for tags in server.get("tags", plugin="scalars").values()))
    browser = chrome(offline=True)
    try:
        wanted = urllib.parse.quote("profkit/(data_wait_ratio|rolling/data_wait_ratio|step_time_ms_mean)$", safe="")
        browser.get(f"{server.base}/?tagFilter={wanted}#timeseries")
        deadline, drawn, text = time.monotonic() + 90, {}, ""
        while time.monotonic() < deadline:
            time.sleep(1)
            drawn = browser.execute_script("""
                let pixels = 0, paths = 0;
                for (const c of document.querySelectorAll('card-view canvas')) {
                  if (!c.width || !c.height) continue;
                  const copy = document.createElement('canvas');
                  copy.width = c.width; copy.height = c.height;
                  const g = copy.getContext('2d'); g.drawImage(c, 0, 0);
                  const d = g.getImageData(0, 0, c.width, c.height).data;
                  for (let i = 3; i < d.length; i += 4) if (d[i] > 0) pixels++;
                }
                paths = [...document.querySelectorAll('card-view svg path')].filter((p) => (p.getAttribute('d') || '').length > 20).length;
                return {cards: document.querySelectorAll('card-view').length, pixels, paths};""")
            text = browser.find_element(By.TAG_NAME, "body").text.replace("\n", "")  # titles wrap at the slash
            if all(tag in text for tag in TAGS) and (drawn["pixels"] > 500 or drawn["paths"] >= 3):
                break
        failed = [e for e in browser.get_log("performance") if "Network.loadingFailed" in e["message"]
                  and "net::ERR_ABORTED" not in e["message"]]
        if SCALARS_SCREENSHOT:
            browser.save_screenshot(SCALARS_SCREENSHOT)
    finally:
        browser.quit()
    assert all(tag in text for tag in TAGS), text[-1500:]
    assert drawn["pixels"] > 500 or drawn["paths"] >= 3, drawn
    assert not failed, failed
