"""The cross-rank verdict: per-rank figures from real multi-rank GPU traces, and the verdict's rules."""

import json
import os
import shutil
import subprocess
import sys

import re
from dataclasses import asdict

import pytest

from lightning_profkit.report.page import _ranks
from lightning_profkit.trace.ranks import RankFigures, ranks_to_show, verdict


def summary_json(path):
    exe = os.path.join(os.path.dirname(sys.executable), "profkit")
    done = subprocess.run([exe, "summary", "--json", str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("layout", ["as shipped", "a window folder per rank pair"])
def test_per_rank_figures_of_real_gpu_traces(tmp_path, gpu_traces, layout):
    folder = gpu_traces / "hta" / "trace_filter"
    if layout != "as shipped":  # a run's layout: profiler/<window>/<worker>.pt.trace.json.gz
        for window in ("step=000001-000002-epoch=0", "step=000011-000012-epoch=0"):
            os.makedirs(tmp_path / "profiler" / window)
            for rank in (0, 1):
                shutil.copy(folder / f"sampled_rank-{rank}.json.gz",
                            tmp_path / "profiler" / window / f"host_rank{rank}.1.pt.trace.json.gz")
        folder = tmp_path / "profiler"
    out = summary_json(folder)
    ranks = out["ranks"]
    traces = {t["rank"]: t for t in out["traces"]}
    assert [r["rank"] for r in ranks["per_rank"]] == [0, 1]
    for row in ranks["per_rank"]:
        avg = traces[row["rank"]]["step_breakdown"]["avg"]  # microseconds
        assert row["traces"] == (1 if layout == "as shipped" else 2)
        assert row["step_time_ms"] == pytest.approx(avg["Total"] / 1000)
        assert row["own_ms_per_step"] == pytest.approx((avg["Total"] - avg["Communication"]) / 1000)
        assert row["data_ms_per_step"] == pytest.approx(avg["DataLoader"] / 1000)
        assert row["compute_ms_per_step"] == pytest.approx((avg["Kernel"] + avg["Memcpy"] + avg["Memset"]) / 1000)
        assert row["gpu_idle_share"] == pytest.approx(traces[row["rank"]]["host"]["gpu_idle_share"])
    found = ranks["verdict"]
    # the two ranks of this DLRM window take 615 and 619 ms a step with almost no communication: balanced
    assert found["reason"] is None and found["line"].startswith("no straggler") and found["slowest"] == 1
    assert found["step_time_spread"] == pytest.approx(619.27 / 615.12, abs=1e-3)


def test_one_rank_has_no_ranks_section(gpu_traces):
    assert summary_json(gpu_traces / "hta" / "trace_filter" / "sampled_rank-0.json.gz")["ranks"] is None


def rank(n, data=1.0, host=2.0, compute=5.0, communication=1.0, gpu_idle=None):
    own = data + host + compute
    return RankFigures(n, 1, own + communication, own, data, host, compute, communication, gpu_idle, None)


@pytest.mark.parametrize("slow, reason", [
    (dict(data=6.0, communication=0.5), "data"),
    (dict(host=7.0, communication=0.5), "host"),
    (dict(compute=10.0, communication=0.5), "compute"),
])
def test_the_verdict_names_the_rank_and_its_reason(slow, reason):
    ranks = [rank(0, communication=6.0), rank(1, **slow), rank(2, communication=6.0), rank(3, communication=0.8)]
    found = verdict(ranks)
    assert (found.slowest, found.reason) == (1, reason)
    assert found.excess_ms_per_step == pytest.approx(ranks[1].part(reason) - ranks[0].part(reason))
    assert set(found.waiting) == {0, 2} and found.waiting[0] == pytest.approx(5.5)  # rank 3 does not wait
    assert found.line.startswith("rank 1 is the slowest") and "ranks 0 (+5.50 ms), 2 (+5.50 ms)" in found.line


def test_the_verdict_line_of_a_thousand_ranks_is_a_line():
    """1,024 ranks, one slow: the line listed every waiting rank (16,506 characters); it names the 5 that wait most
    and counts the others, and the JSON keeps every one."""
    ranks = [rank(n, communication=6.0 + n / 1000) for n in range(1024)]
    ranks[7] = rank(7, data=6.0, communication=0.5)
    found = verdict(ranks)
    assert found.slowest == 7 and len(found.waiting) == 1023 and len(found.line) < 500, len(found.line)
    assert found.own_ms_per_step == {"median": 8.0, "p90": 8.0, "max": 13.0} and found.outliers == {7: 5.0}
    assert "own work per step over 1024 ranks: median 8.00, p90 8.00, max 13.00 ms; above the median by more than " \
           "5% of the step: rank 7 (+5.00 ms)" in found.line, found.line
    assert "ranks 1023 (+6.52 ms), 1022 (+6.52 ms), 1021 (+6.52 ms), 1020 (+6.52 ms), 1019 (+6.52 ms) and 1018 more " \
           "(+5.50 to +6.52 ms)" in found.line, found.line


def test_the_ranks_outside_the_distribution_are_named_most_first():
    """A thousand ranks with a tail: median, p90 and max, and the ranks beyond the balance named."""
    ranks = [rank(n, host=2.0 + (n >= 900) * 0.1 + (n >= 1000) * (n - 999) * 0.5) for n in range(1024)]
    found = verdict(ranks)
    assert found.own_ms_per_step == {"median": 8.0, "p90": pytest.approx(8.1), "max": pytest.approx(20.1)}
    # more than 5% of the slowest's 21.1 ms step (1.055 ms) over the median: ranks 1001 to 1023
    assert sorted(found.outliers) == list(range(1001, 1024)) and found.outliers[1023] == pytest.approx(12.1)
    assert "rank 1023 is the slowest" in found.line
    assert "ranks 1023 (+12.10 ms), 1022 (+11.60 ms), 1021 (+11.10 ms), 1020 (+10.60 ms), 1019 (+10.10 ms) and 18 " \
           "more (+1.10 to +9.60 ms)" in found.line, found.line


def test_balanced_ranks_and_a_single_rank():
    assert verdict([rank(0)]) is None
    found = verdict([rank(0), rank(1, compute=5.2)])
    assert found.reason is None and found.waiting == {} and found.line.startswith("no straggler")


def test_rank_figures_travel_by_name():
    from lightning_profkit.monitor.exchange import exchange_named, figures_of, made_from, names_of

    figures = rank(3, gpu_idle=0.25)
    sent = figures_of(figures)
    assert all(isinstance(v, float) for v in sent.values()) and "blocking_sync_ms_per_step" not in sent
    (row,) = exchange_named(None, sent, names_of(RankFigures))
    assert made_from(RankFigures, row) == figures and made_from(RankFigures, {}) is None


def test_a_thousand_ranks_show_a_few_rows_and_the_report_draws_them_all():
    ranks = [rank(n, host=2.0 + (n >= 1000) * (n - 999) * 0.5) for n in range(1024)]
    section = {"per_rank": [asdict(r) for r in ranks], "verdict": verdict(ranks).to_json()}
    picked, left = ranks_to_show(section)
    # the slowest, the 5 outliers named (1023 is both), the median rank and the fastest
    assert [r["rank"] for r in picked] == [1023, 1022, 1021, 1020, 1019, 0, 512] and left == 1017
    html = _ranks(section)
    assert html.count("<tr>") == 1 + 7 and "7 of 1024 ranks" in html
    assert "rank 1023</text>" in html and "(1024 ranks)</text>" in html
    assert re.search(r"<title>1000 rank\(s\), 8\.00-8\.\d\d ms</title>", html)  # every rank is in a bar
    few = [rank(n) for n in range(4)]
    assert ranks_to_show({"per_rank": [asdict(r) for r in few], "verdict": verdict(few).to_json()}) == (
        [asdict(r) for r in few], 0)
