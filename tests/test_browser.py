"""A real browser (headless Chromium via Selenium) opens TensorBoard's PyTorch Profiler tab on our run."""

import os
import shutil
import time

import pytest

from test_tensorboard import data_bound_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCREENSHOT = os.environ.get("PROFKIT_SCREENSHOT")  # set to write the README's screenshot


def chrome():
    webdriver = pytest.importorskip("selenium.webdriver")
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver):
        pytest.skip("Debian's chromium and chromium-driver are not installed (dev.sh test installs them as root)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))


def test_profiler_tab_shows_our_run_and_its_dataloader_share(tmp_path, tensorboard_server):
    """The plugin's page lists our window as a run with its worker and Overview; the page's own data
    request for that Overview carries a DataLoader share above zero.

    The plugin draws its charts with Google Charts, loaded from gstatic.com at page load; with no internet
    (this machine, CI) the charts themselves never render, so the figure is read from the page's request.
    """
    from selenium.webdriver.common.by import By

    monitor = data_bound_run(tmp_path, steps="10-13")
    run = "profiler/step=000010-000013-epoch=0"
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
