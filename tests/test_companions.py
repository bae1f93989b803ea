"""What travels with a trace: its companions first, then the trace; removed together, each where it is."""

from lightning_profkit.companions import remove_local, with_companions


def test_companions_come_before_their_trace_and_go_with_it(tmp_path):
    trace = str(tmp_path / "w.pt.trace.json.gz")
    assert with_companions(trace) == [trace + ".profkit", trace + ".parquet", trace]
    for path in (trace, trace + ".profkit"):
        open(path, "w").close()
    assert remove_local(trace) is True and list(tmp_path.iterdir()) == []
    assert remove_local(trace) is False  # gone already
