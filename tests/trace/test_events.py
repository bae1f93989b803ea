"""Decoding a trace's JSON into typed events: the strict path, the tolerant one for odd fields and unknown phases,
and one-line errors for what is not a trace."""

import json

import pytest

from lightning_profkit.trace.events import Event, Instant, decode, decode_strict
from lightning_profkit.trace.load import decode_json
from lightning_profkit.trace.file import TraceError

STEP = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 10, "dur": 5, "pid": 1, "tid": 2,
        "args": {"External id": 7, "Record function id": 0}}
MEMORY = {"ph": "i", "name": "[memory]", "ts": 12, "pid": 1, "tid": 2,
          "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": 4096, "Total Reserved": 8192}}
FLOW = {"ph": "f", "id": 1, "ts": 11, "pid": 1, "tid": 2, "cat": "ac2g", "name": "ac2g"}


def test_complete_and_memory_events_keep_the_fields_read_and_other_phases_none():
    doc = decode_strict(json.dumps({"traceEvents": [STEP, MEMORY, FLOW], "distributedInfo": {"rank": 3}}).encode())
    step, memory, flow = doc.traceEvents
    assert (step.name, step.ts, step.dur, step.args.external_id, step.args.stream) == ("ProfilerStep#3", 10, 5, 7, -1)
    assert isinstance(memory, Instant) and memory.args.total_allocated == 4096
    assert not isinstance(flow, (Event, Instant)) and doc.distributedInfo == {"rank": 3} and doc.profkit is None


def test_odd_fields_and_unknown_phases_take_the_tolerant_path():
    odd = [STEP, {"ph": "Q", "name": "a phase no format defines"}, 7,
           {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": "12.5", "dur": None, "pid": 1, "tid": [2],
            "args": {"External id": {"a": 1}}}]
    raw = json.dumps({"traceEvents": odd}).encode()
    with pytest.raises(ValueError):
        decode_strict(raw)
    step, add = decode(raw).traceEvents  # the phase nobody defines and the number are left out
    assert step == decode_strict(json.dumps({"traceEvents": [STEP]}).encode()).traceEvents[0]
    assert (add.ts, add.dur, add.tid, add.args.external_id) == (12.5, None, "[2]", "{'a': 1}")
    assert len(decode(json.dumps([STEP, MEMORY]).encode()).traceEvents) == 2  # a bare list of events


@pytest.mark.parametrize("raw, says", [
    (b'{"traceEvents": [{"ph": "X", "ts": NaN}]}',
     "a damaged trace: a number that is not one (NaN or Infinity) at byte"),
    (b'{"events": []}', "JSON without a traceEvents list, not a profiler trace"),
    (b"[" * 100000 + b"]" * 100000, "JSON nested deeper than"),
    (b"\xff\xfe{", "not JSON"),
    (b'{"traceEvents": [', "not JSON ("),
])
def test_what_is_not_a_trace_is_one_line_naming_the_file(raw, says):
    with pytest.raises(TraceError) as caught:
        decode_json("w.json", raw)
    assert str(caught.value).startswith("w.json: ") and says in str(caught.value) and "\n" not in str(caught.value)
