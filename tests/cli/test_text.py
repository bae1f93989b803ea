"""profkit's terminal text: aligned columns made safe for a terminal, figures printed in their units, labels that
tell traces apart, and the cross-rank verdict in words."""

from lightning_profkit.cli.text import compare_text, fmt, table, trace_labels, verdict_lines


def test_a_table_aligns_its_columns_and_escapes_what_a_trace_names():
    text = table(["name", "ms"], [["aten::mm", "1.50"], ["evil\x1b[2J", "12.25"]])
    lines = text.splitlines()
    assert [line.split() for line in lines] == [["name", "ms"], ["aten::mm", "1.50"], ["evil\\x1b[2J", "12.25"]]
    assert len(set(map(len, lines))) == 1  # numbers right-aligned: every line ends at the same column
    assert lines[0].index("ms") > lines[2].index("\\x1b") + len("\\x1b[2J")  # the escaped name is what is measured
    assert table(["a"], [], color=True) == "\x1b[1ma\x1b[0m"


def test_figures_are_printed_in_their_units():
    assert fmt("data_wait_share")(0.4567) == "45.7%"
    assert fmt("host_step_ms")(3.14159) == "3.14"
    assert fmt("peak_memory_mb/cuda:0")(1234.56) == "1234.6"
    assert fmt("gpu_idle_share")(None) == fmt("host_step_ms")(None) == "-"


def test_traces_that_share_a_label_are_told_apart_by_their_file_names():
    summaries = [{"window": "step=10", "worker": "w0", "path": "/r/step=10/w0.1.pt.trace.json.gz"},
                 {"window": "step=10", "worker": "w0", "path": "/r/step=10/w0.2.pt.trace.json.gz"},
                 {"window": "step=20", "worker": "w0", "path": "/r/step=20/w0.1.pt.trace.json.gz"},
                 {"window": None, "worker": "w1", "path": "/r/w1.pt.trace.json.gz"}]
    assert trace_labels(summaries) == ["step=10/w0.1.pt.trace.json.gz", "step=10/w0.2.pt.trace.json.gz",
                                       "step=20/w0", "w1"]


def test_the_verdict_names_the_outliers_and_those_waiting_for_them():
    verdict = {"headline": "rank 3 is the straggler", "own_ms_per_step": {"median": 10.0, "p90": 12.0, "max": 20.0},
               "outliers": [{"rank": 3, "own_ms_per_step_over_median": 10.0}],
               "waiting": [{"rank": 0, "extra_communication_ms_per_step": 9.5}]}
    lines = verdict_lines(verdict)
    assert lines[:2] == ["Verdict: rank 3 is the straggler",
                         "  own work per step: median 10.00, p90 12.00, max 20.00 ms"]
    assert lines[2].startswith("  over the median by more than ") and "3" in lines[3]
    assert lines[4] == "  waiting for it in communication:" and "0" in lines[5]
    assert len(verdict_lines({**verdict, "outliers": [], "waiting": []})) == 2


def test_compare_colours_its_differences_on_a_terminal_and_escapes_only_what_a_trace_names():
    cmp = {"traces": {"a": 1, "b": 1}, "cpu_by_self_per_trace": [],
           "figures": {"data_wait_share": {"a": 0.1, "b": 0.2, "diff": 0.1},
                       "host_step_ms": {"a": 12.0, "b": 10.0, "diff": -2.0},
                       "gpu_idle_share": {"a": 0.3, "b": 0.3, "diff": 0.0}}}
    lines = compare_text(cmp, color=True).splitlines()[2:]
    assert [line.split()[-2:] for line in lines] == [["\x1b[31m+10.0", "pp\x1b[0m"], ["10.00", "\x1b[32m-2.00\x1b[0m"],
                                                    ["0.0", "pp"]]
    plain = compare_text(cmp).splitlines()
    assert "\x1b" not in "".join(plain) and len(set(map(len, plain[1:]))) == 1  # aligned without colour
