"""Trace events as typed records, decoded straight from JSON by msgspec, keeping only the fields we read. Design
notes: docs/how-it-works.md."""

from __future__ import annotations

from typing import Any, Optional, Union

import msgspec

Number = Union[int, float, None]
Scalar = Union[int, float, str, None]


class Args(msgspec.Struct, frozen=True, gc=False):
    # Ids and byte counts default to -1 (absent), so that their columns are built from plain ints.
    correlation: Scalar = -1
    external_id: Scalar = msgspec.field(default=-1, name="External id")
    external_id_lower: Scalar = msgspec.field(default=-1, name="external id")
    stream: Scalar = -1
    device_type: Scalar = msgspec.field(default=None, name="Device Type")
    device_id: Scalar = msgspec.field(default=None, name="Device Id")
    total_allocated: Scalar = msgspec.field(default=-1, name="Total Allocated")
    total_reserved: Scalar = msgspec.field(default=-1, name="Total Reserved")


NO_ARGS = Args()


class Event(msgspec.Struct, gc=False, tag="X", tag_field="ph"):
    """A complete event (``"ph": "X"``): an operator, kernel, runtime call, annotation..."""

    cat: Optional[str] = None
    name: Optional[str] = None
    ts: Number = None
    dur: Number = None
    pid: Scalar = None
    tid: Scalar = None
    args: Args = NO_ARGS


class Instant(msgspec.Struct, gc=False, tag="i", tag_field="ph"):
    """An instant event (``"ph": "i"``): the ``[memory]`` ones record allocations."""

    name: Optional[str] = None
    args: Args = NO_ARGS


# Every other phase of the Chrome trace format decodes to a record without fields: msgspec then skips
# their contents instead of building strings and numbers nobody reads (a fifth of the decoding time on
# traces with flow events). A phase outside this list is read by the tolerant path.
_OTHER_PHASES = "B E I C b n e s t f P O N D M V v R c ( )".split()
_SKIPPED = tuple(
    msgspec.defstruct(f"Phase{i}", [], tag=ph, tag_field="ph", gc=False) for i, ph in enumerate(_OTHER_PHASES)
)
AnyEvent = Union[(Event, Instant) + _SKIPPED]


class TraceDoc(msgspec.Struct):
    traceEvents: list[AnyEvent]
    distributedInfo: Optional[dict[str, Any]] = None
    profkit: Optional[dict[str, Any]] = None


# A trace document from JSON bytes: a ValueError for anything else, and for events whose fields have unexpected types
decode_strict = msgspec.json.Decoder(TraceDoc).decode


# The tolerant path: a document whose events have fields of unexpected types (a time written as a string, an id as
# a list, a phase no format defines, an element that is not an object) is decoded into Python objects and each
# event converted. Those objects cost up to about 40 times their text (`{"":{}},` repeated), so the tolerant path
# takes at most LOOSE_BYTES of text at a time: load.py cuts a larger piece between events first.
LOOSE_BYTES = 10**6


def _tolerant(event: Any) -> Union[Event, Instant, None]:
    """A complete or instant event from a dict with odd field types; None for anything else."""
    if not isinstance(event, dict) or event.get("ph") not in ("X", "i"):
        return None

    def number(v: Any) -> Number:
        try:
            return float(v) if v is not None and not isinstance(v, (int, float)) else v
        except (TypeError, ValueError):
            return None

    def scalar(v: Any) -> Scalar:
        return v if v is None or isinstance(v, (int, float, str)) else str(v)[:_SHOWN]

    raw_args = event.get("args") if isinstance(event.get("args"), dict) else {}
    args = Args(**{f: scalar(raw_args[a]) for f, a in _ARG_NAMES.items() if a in raw_args})
    name = str(event.get("name") or "") or None
    if event["ph"] == "i":
        return Instant(name=name, args=args)
    return Event(
        cat=scalar(event.get("cat")), name=name, ts=number(event.get("ts")), dur=number(event.get("dur")),
        pid=scalar(event.get("pid")), tid=scalar(event.get("tid")), args=args,
    )


_ARG_NAMES = {f.name: f.encode_name for f in msgspec.structs.fields(Args)}
_SHOWN = 256  # characters kept of a field that should be a number or a string and is a list or an object


class TooLoose(ValueError):
    """A text of more than :data:`LOOSE_BYTES` whose events need the tolerant path: to be cut first."""


def decode(raw: bytes) -> TraceDoc:
    """A trace document from JSON bytes; raises ValueError for JSON that is not a trace (:class:`TooLoose` for a
    text over :data:`LOOSE_BYTES` with events of unexpected types)."""
    try:
        return decode_strict(raw)
    except msgspec.ValidationError:  # not JSON: a msgspec.DecodeError, which is a ValueError
        pass
    if len(raw) > LOOSE_BYTES:
        raise TooLoose(f"events of unexpected types in over {LOOSE_BYTES / 1e6:.0f} MB of JSON without a boundary "
                       "between events")
    data = msgspec.json.decode(raw)
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError("JSON without a traceEvents list")
    events = [e for e in map(_tolerant, data["traceEvents"]) if e is not None]
    info = data.get("distributedInfo")
    meta = data.get("profkit")
    return TraceDoc(events, info if isinstance(info, dict) else None, meta if isinstance(meta, dict) else None)
