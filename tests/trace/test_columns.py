"""A trace's columns: codes first seen first, odd numbers -1, a missing duration NaN, memory apart; ends, lower-cased
categories and table-lookup masks."""

import math

import numpy as np

from lightning_profkit.trace.columns import code_mask, columns
from conftest import records


def test_columns_derive_ends_and_categories():
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


def test_columns_turn_odd_numbers_into_minus_one_and_a_missing_duration_into_nan():
    events = records([
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": None, "pid": 0, "tid": 7,
         "args": {"stream": "7", "correlation": 1.5, "External id": 2**70}},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 2.5, "dur": 3, "pid": 0, "tid": 7, "args": {"stream": 8}},
    ])
    r = columns(events)
    assert list(r.stream) == [7, 8] and list(r.corr) == [1, -1] and list(r.ext) == [-1, -1]
    assert math.isnan(r.dur[0]) and r.dur[1] == 3.0 and list(r.ts) == [1.0, 2.5] and r.fractional
    assert r.names == ["k"] and list(r.name) == [0, 0] and r.threads == [(0, 7)]


def test_codes_are_first_seen_first_and_memory_events_are_kept_apart():
    memory = {"ph": "i", "name": "[memory]", "ts": 5, "pid": 0, "tid": 1,
              "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": 4096, "Total Reserved": 8192}}
    r = columns(records([
        {"ph": "X", "cat": "cpu_op", "name": "b", "ts": 1, "dur": 1, "pid": 0, "tid": 1, "args": {"external id": 4}},
        memory,
        {"ph": "X", "cat": "kernel", "name": "a", "ts": 2, "dur": 1, "pid": 0, "tid": 2, "args": {"External id": 9}},
        {"ph": "X", "cat": "cpu_op", "name": "b", "ts": 3, "dur": 1, "pid": 0, "tid": 1},
        {"ph": "f", "name": "flow", "ts": 4, "pid": 0, "tid": 1},  # not a complete event: no row
    ]))
    assert r.raw_cats == ["cpu_op", "kernel"] and list(r.cat) == [0, 1, 0]
    assert r.names == ["b", "a"] and list(r.name) == [0, 1, 0]
    assert r.threads == [(0, 1), (0, 2)] and list(r.thread) == [0, 1, 0]
    assert list(r.ext) == [4, 9, -1] and not r.fractional
    assert r.memory_devices == ["1:0"] and list(r.memory_allocated) == [4096] and list(r.memory_reserved) == [8192]
