"""A trace's events as plain columns: codes first seen first, odd numbers -1, a missing duration NaN, memory apart."""

import math

from conftest import records

from lightning_profkit.trace.rows import rows


def test_rows_turn_odd_numbers_into_minus_one_and_a_missing_duration_into_nan():
    events = records([
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": None, "pid": 0, "tid": 7,
         "args": {"stream": "7", "correlation": 1.5, "External id": 2**70}},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 2.5, "dur": 3, "pid": 0, "tid": 7, "args": {"stream": 8}},
    ])
    r = rows(events)
    assert list(r.stream) == [7, 8] and list(r.corr) == [1, -1] and list(r.ext) == [-1, -1]
    assert math.isnan(r.dur[0]) and r.dur[1] == 3.0 and list(r.ts) == [1.0, 2.5] and r.fractional
    assert r.names == ["k"] and list(r.name) == [0, 0] and r.threads == [(0, 7)]


def test_codes_are_first_seen_first_and_memory_events_are_kept_apart():
    memory = {"ph": "i", "name": "[memory]", "ts": 5, "pid": 0, "tid": 1,
              "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": 4096, "Total Reserved": 8192}}
    r = rows(records([
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
    assert r.memory_devices == [(1, 0)] and list(r.memory_allocated) == [4096] and list(r.memory_reserved) == [8192]
