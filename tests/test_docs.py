"""The README and the documentation site are checked against the code: the site builds offline with warnings as
errors, every metric name they mention is one the code logs (and the Metrics page lists every one), every relative
link resolves, and every code block marked ``<!-- runnable -->`` runs, as does the callback's docstring example."""

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_profkit import PerformanceMonitor
from lightning_profkit.metric_names import METRICS, PREFIX, find, markdown_table
from conftest import chrome, stop_session
from test_metric_names import every_logged_name

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md"] + sorted(DOCS.glob("*.md"))
HERE = Path(__file__).resolve().parent
# names under profkit/ that are not metrics: the alert's text in TensorBoard's TEXT tab (torch's add_text adds the suffix)
NOT_METRICS = {"profkit/alerts/text_summary"}
RUNNABLE = re.compile(r"^<!-- runnable -->\n```(\w+)\n(.*?)^```$", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def prose(page: Path) -> str:
    """The page without its code blocks."""
    return re.sub(r"^```.*?^```$", "", text(page), flags=re.M | re.S)


def test_the_site_builds_offline_with_warnings_as_errors_and_shows_the_callbacks_arguments(tmp_path):
    site = tmp_path / "site"
    env = dict(os.environ, HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="")  # offline
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    # the Arguments table (docs/arguments.py makes it): a row per argument of the signature, in its order
    arguments = api.split('id="arguments"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>\s*<td><code>(\w+)</code></td>", arguments)
    assert rows == list(inspect.signature(PerformanceMonitor).parameters), rows
    assert "consecutive checks over the threshold before an alert" in arguments  # alert_patience's line in the docstring
    assert "<td><code>1000</code></td>" in arguments and 'href="../alerts/#capture-on-demand"' in arguments
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "Quick start" in home and 'href="metrics/"' in home  # the README, its links made the site's
    shown = in_a_browser(site, tmp_path)
    assert shown["api"]["rows"] == len(rows) and shown["api"]["height"] > 20 * len(rows), shown  # drawn, a row each
    assert shown["choosing-steps"]["rows"] > 0 and shown["choosing-steps"]["text"] > 2000, shown


def in_a_browser(site: Path, folder: Path) -> dict:
    """The argument table of the API page and the Choosing steps page as headless Chromium draws them, offline from
    files: rows and height of the first table in the page's content, its text's length; a screenshot of each in
    ``folder`` (and in $PROFKIT_DOCS_SCREENSHOTS where set)."""
    browser = chrome(offline=True)
    shown = {}
    try:
        for page, anchor in (("api", "arguments"), ("choosing-steps", "")):
            browser.get((site / page / "index.html").as_uri() + (anchor and "#" + anchor))
            shown[page] = browser.execute_script("""
                const article = document.querySelector('article');
                const heading = arguments[0] ? document.getElementById(arguments[0]) : article;
                const table = [...article.querySelectorAll('table')].find(
                    (t) => heading.compareDocumentPosition(t) & (Node.DOCUMENT_POSITION_FOLLOWING | Node.DOCUMENT_POSITION_CONTAINED_BY));
                const box = table.getBoundingClientRect();
                return {rows: table.querySelectorAll('tbody tr').length, height: box.height, width: box.width,
                        text: article.innerText.length};""", anchor)
            for where in filter(None, (folder, os.environ.get("PROFKIT_DOCS_SCREENSHOTS"))):
                browser.save_screenshot(str(Path(where) / f"{page}.png"))
    finally:
        browser.quit()
    return shown


def test_the_metrics_page_lists_every_logged_metric_and_nothing_else():
    page = text(DOCS / "metrics.md")
    assert markdown_table() in page, "regenerate: python -c 'from lightning_profkit.metric_names import markdown_table; print(markdown_table())'"
    listed = re.findall(r"^\| `([^`]+)` \|", page, re.M)
    assert sorted(listed) == sorted(m.name for m in METRICS)
    for name in every_logged_name():
        assert any(m.matches(name[len(PREFIX):]) for m in METRICS if m.name in listed), name


def test_the_profkit_page_holds_every_commands_help_and_the_exit_codes():
    from lightning_profkit.cli import reference

    assert reference() in text(DOCS / "profkit.md"), "regenerate: python -c 'from lightning_profkit.cli import reference; print(reference())'"


def test_the_api_pages_arguments_are_the_signatures():
    """The API page's table of arguments (type, default, meaning) is made from the signature and the docstring's Args
    (docs/arguments.py): the docstring names every argument, in order."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("arguments", DOCS / "arguments.py")  # the hook's own reading
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    documented = list(hook.documented(PerformanceMonitor.__doc__))
    assert documented == list(inspect.signature(PerformanceMonitor).parameters)


def mentioned(page: Path) -> list[str]:
    return re.findall(r"(?<![\w/])profkit/[A-Za-z0-9_/<>.-]*[A-Za-z0-9_>/]", text(page))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_metric_name_the_docs_mention_is_one_the_code_logs(page):
    for name in mentioned(page):
        if name in NOT_METRICS:
            continue
        if name.endswith("/") or "<" in name:  # a group: profkit/rolling/, profkit/window/<name>
            group = name[len(PREFIX):].split("<")[0]
            assert any(m.name.startswith(group) for m in METRICS), name
        else:
            find(name)  # KeyError: not a metric


def anchors(page: Path) -> set[str]:
    """The ids of a page's headings, as MkDocs' toc (Python-Markdown's slugify) makes them."""
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(page), re.M):
        slug = re.sub(r"[^\w\s-]", "", re.sub(r"<[^>]+>", "", heading)).strip().lower()
        out.add(re.sub(r"[-\s]+", "-", slug))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    for target in LINK.findall(prose(page)):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        assert where.exists(), f"{page.name}: {target}"
        where = ROOT / "README.md" if where == DOCS / "index.md" else where  # the site's home is the README
        if anchor:
            assert anchor in anchors(where), f"{page.name}: {target}: no such heading"


def runnable_blocks() -> list[tuple[str, str, str]]:
    """(where, language, code) of every marked block: the README's first (its quick start makes the run the
    others read), then the pages'."""
    return [(f"{page.relative_to(ROOT).as_posix()}#{i}", lang, code)
            for page in PAGES for i, (lang, code) in enumerate(RUNNABLE.findall(text(page)))]


def test_every_runnable_block_runs(tmp_path):
    blocks = runnable_blocks()
    assert {lang for _, lang, _ in blocks} == {"python", "bash", "yaml"}
    assert any("TraceAnalysis" in code for _, _, code in blocks)  # the HTA snippet
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    for n, (where, lang, code) in enumerate(blocks):
        if lang == "python":
            (tmp_path / f"block{n}.py").write_text(code)
            command = [sys.executable, f"block{n}.py"]
        elif lang == "bash":
            command = ["bash", "-euo", "pipefail", "-c", code]
        else:  # a LightningCLI config: a fit of the tests' model with it
            (tmp_path / f"block{n}.yaml").write_text(code)
            command = [sys.executable, str(HERE / "trainer" / "cli_script.py"), "fit", "--config", f"block{n}.yaml",
                       "--trainer.max_epochs=1", "--trainer.enable_progress_bar=false",
                       f"--trainer.default_root_dir={tmp_path / 'cli'}"]
        proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)  # what a block starts in the background ends with it
        try:
            out, err = proc.communicate(timeout=300)
        finally:
            stop_session(proc)
        assert proc.returncode == 0, f"{where} ({lang}):\n{out[-2000:]}\n{err[-3000:]}"


def test_the_callbacks_docstring_example_runs(tmp_path):
    """The example the API page shows, from ``PerformanceMonitor``'s docstring."""
    import textwrap

    from lightning_profkit.callback import PerformanceMonitor

    example = textwrap.dedent(PerformanceMonitor.__doc__.split("Example::", 1)[1])
    (tmp_path / "example.py").write_text(example)
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "profiling batches 11-13 of every epoch" in done.stdout + done.stderr
    assert list((tmp_path / "lightning_logs" / "version_0" / "profiler").glob("epoch=0000-batch=000011-000013/*.pt.trace.json.gz"))


def nav_groups() -> dict[str, list[str]]:
    """The site's navigation: each group's pages (mkdocs.yml, read as text: its YAML has a tag PyYAML refuses)."""
    groups: dict[str, list[str]] = {}
    for line in text(ROOT / "mkdocs.yml").split("\nnav:\n", 1)[1].splitlines():
        if not line.startswith("  "):
            break
        if re.match(r"  - [^:]+:$", line):
            groups[line[4:-1]] = []
        elif page := re.search(r": (\S+\.md)$", line):
            groups[list(groups)[-1]].append(page[1])
    return groups


# the project's own story: an issue's number, a session, the time of day of a run, a goal, what a figure or the code
# was before ("the run before", "latest run", "used to", "now ... where it took"): that history is benchmarks/HISTORY.md's
NARRATION = re.compile(r"\bissues? #?\d|\bsession'?s? (changes|work)\b|this session|\b(morning|afternoon|evening)\b"
                       r"|\bgoals?\b|before \d{4}-\d\d-\d\d|\bwe chose\b"
                       r"|\bthe (code|run|reader|writer|callback) before\b|\b(latest|earlier) runs?\b|\bearlier code\b"
                       r"|\bused to\b|\bno longer\b|\bnow\b[^.\n]{0,80}\bwhere (it|they) (was|were|cost|took|read)\b", re.I)


def test_the_site_has_five_groups_and_the_user_pages_tell_no_story_of_the_project():
    groups = nav_groups()
    assert list(groups) == ["Getting started", "User guide", "Reference", "Troubleshooting", "Project"]
    listed = [page for pages in groups.values() for page in pages]
    assert sorted(listed) == sorted(p.name for p in DOCS.glob("*.md"))  # every page in one group
    user = [ROOT / "README.md"] + [DOCS / page for name, pages in groups.items() if name != "Project" for page in pages]
    told = [(page.name, m[0]) for page in user for m in NARRATION.finditer(text(page))]
    assert not told, told


# how the project knows what a user page says (a date, "this machine", a test's name or file, what changed since;
# not Lightning's own test_step, test_dataloader ...):
# Performance (measurements), Development (how it is tested) and the changelog hold that; the user page links there
TOLD_ELSEWHERE = re.compile(r"\b\d{4}-\d\d-\d\d\b|\bthis (shared )?machine\b|\b(changed|not) since\b"
                            r"|\btest_(?!step|dataloader|epoch|batch)\w+|(?<![\w/.-])tests/", re.I)


def test_the_user_pages_leave_dates_machines_and_tests_to_the_project_pages():
    """Outside code blocks (a pasted output may say "this machine"): what a user reads teaches, and links to the
    Project pages for the measurements and the tests."""
    groups = nav_groups()
    user = [ROOT / "README.md"] + [DOCS / page for name, pages in groups.items() if name != "Project" for page in pages]
    told = [(page.name, m[0]) for page in user for m in TOLD_ELSEWHERE.finditer(prose(page))]
    assert not told, told


def test_the_readme_says_what_it_is_how_to_install_use_and_look_in_that_order():
    readme = text(ROOT / "README.md")
    first = "\n".join(readme.splitlines()[:40])
    assert ".png)" in first and "pip install" in first and "callbacks=[PerformanceMonitor()]" in first
    sections = re.findall(r"^## (.+)$", readme, re.M)
    assert sections[:4] == ["Install", "Use it", "Quick start", "Look at a run"], sections
    look = readme.split("## Look at a run", 1)[1].split("\n## ", 1)[0]
    assert "PYTORCH_PROFILER" in look and "profkit summary" in look and len(readme.splitlines()) <= 150


def test_the_plan_lines_the_docs_quote_are_the_codes():
    """Every ``profiling …`` line quoted on a page is one the code prints for some epoch length (the defaults)."""
    printed = {PerformanceMonitor().options.plan("out", length)[0] for length in range(1, 40)}
    quoted = [(page.name, line) for page in PAGES
              for line in re.findall(r"`(profiling (?:batch|step)[^`]*)`", text(page))]
    assert quoted and all(line in printed or "…" in line for _, line in quoted), [q for q in quoted if q[1] not in printed]
