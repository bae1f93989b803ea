"""The trace words: step markers and their numbers, DataLoader spans as torch-tb-profiler tells them."""

from lightning_profkit.trace.vocabulary import is_dataloader_event, is_step, step_number


def test_step_markers_and_their_numbers():
    assert is_step("ProfilerStep#12") and step_number("ProfilerStep#12") == 12
    assert is_step("ProfilerStep#x") and step_number("ProfilerStep#x") is None
    assert not is_step("aten::mm") and not is_step("profilerStep#1")


def test_dataloader_spans_as_the_plugin_tells_them():
    assert is_dataloader_event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    assert is_dataloader_event("enumerate(DataPipe)#MapperIterDataPipe")
    assert not is_dataloader_event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__iter__")
    assert not is_dataloader_event("DataLoader.__next__")
