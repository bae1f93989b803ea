"""DataLoader spans re-labelled for torch-tb-profiler: exactly those, nothing else changed."""

from lightning_profkit.trace.tensorboard_compat import relabel_dataloader_events

LOADER = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def test_only_dataloader_spans_recorded_as_annotations_become_operators():
    events = [
        {"ph": "X", "cat": "user_annotation", "name": LOADER, "ts": 1, "dur": 2},
        {"ph": "X", "cat": "user_annotation", "name": "enumerate(DataPipe)#MapperIterDataPipe", "ts": 3, "dur": 1},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "ts": 0, "dur": 9},
        {"ph": "X", "cat": "cpu_op", "name": LOADER, "ts": 5, "dur": 1},  # already an operator
        {"ph": "i", "cat": "user_annotation", "name": LOADER, "ts": 6},  # not a span
        {"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter", "ts": 7},
    ]
    before = [dict(e) for e in events]
    assert relabel_dataloader_events(events) == 2
    assert [e["cat"] for e in events] == ["cpu_op", "cpu_op", "user_annotation", "cpu_op", "user_annotation",
                                          "user_annotation"]
    assert [{k: v for k, v in e.items() if k != "cat"} for e in events] == [
        {k: v for k, v in e.items() if k != "cat"} for e in before]
