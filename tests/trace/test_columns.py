"""A trace's columns: numpy over the rows' buffers, with ends, lower-cased categories and table-lookup masks."""

import numpy as np

from lightning_profkit.trace.columns import code_mask, columns
from conftest import records


def test_columns_wrap_the_rows_and_derive_ends_and_categories():
    c = columns(records([
        {"ph": "X", "cat": "Kernel", "name": "gemm", "ts": 10, "dur": 5, "pid": 0, "tid": 7, "args": {"stream": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 12, "pid": 1, "tid": 1},
        {"ph": "X", "cat": None, "name": None, "ts": 20, "dur": 1, "pid": 1, "tid": 1},
        {"ph": "i", "name": "[memory]", "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": 64}},
    ]))
    assert c.end.tolist() == [15.0, 12.0, 21.0]  # no duration: it ends where it starts
    assert c.cats == ["kernel", "cpu_op", ""] and c.names == ["gemm", "aten::mm", ""]
    assert c.stream.tolist() == [7, -1, -1] and c.memory_devices == ["1:0"] and c.memory_allocated.tolist() == [64]
    assert c.cat_mask("kernel").tolist() == [True, False, False]
    assert c.name_mask(lambda n: n.startswith("aten::")).tolist() == [False, True, False]
    assert c.spans(c.cat_mask("kernel", "cpu_op"))[0].tolist() == [10.0]  # 10-15 and 12-12 merge


def test_a_code_mask_is_a_lookup_of_the_chosen_codes():
    codes = np.array([0, 2, 1, 2, 3], dtype=np.int32)
    assert code_mask(codes, [2, 3], 4).tolist() == [False, True, False, True, True]
    assert not code_mask(codes, [], 4).any()
