"""The few edits a raw profiler dump needs to become our trace, made on its JSON text a piece at a time. Design notes:
docs/how-it-works.md."""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable, Iterator, Optional, Union

from lightning_profkit.trace.load import EVENTS_KEY, PieceError
from lightning_profkit.trace.vocabulary import (
    CPU_OP,
    DATALOADER_PREFIX,
    DATAPIPE_PREFIX,
    STEP_PREFIX,
    USER_ANNOTATION,
    is_dataloader_event,
    is_step,
    step_number,
)

# the events that may change, by their name's start, each ending in "#": found at each "#" (memchr; a pattern tried at
# every "name" or a search per start reads the text several times slower)
_STARTS = tuple(start[:-1].encode() for start in (DATALOADER_PREFIX, DATAPIPE_PREFIX, STEP_PREFIX))
_NAME_KEY = re.compile(rb'"name"\s*:\s*"\Z')  # what a name's start follows (searched up to it)
_CATEGORY = re.compile(rb'"cat"\s*:\s*"' + USER_ANNOTATION.encode() + rb'"')
_BEFORE = re.compile(rb",\s*$")  # the comma before an event cut out
_AFTER = re.compile(rb"\s*,\s*(?=\{)")  # or the one after it, before an event, where it is the first left
_EVENT_START = re.compile(rb"\s*\{")
_EVENT_BYTES = 1 << 12  # the text first decoded for an event; doubled until the event fits
_DECODER = json.JSONDecoder()
Text = Union[bytes, memoryview]  # a view where a piece is passed on as written


def edit(text: bytes, last_step: Optional[int], start: int, end: int) -> Text:
    """``text[start:end]`` (whole events of a ``traceEvents`` list, with the document's head or end where it holds
    them) with its DataLoader spans re-labelled and, where ``last_step`` is given, the step markers past it cut out:
    a view into ``text`` where nothing changes (no copy)."""
    if next(_candidates(text, start, end), None) is None:
        return memoryview(text)[start:end]
    return _edited(text[start:end], last_step)


def _edited(text: bytes, last_step: Optional[int]) -> bytes:
    out, at = [], 0
    for name_at in _candidates(text, 0, len(text)):
        if name_at < at:
            continue  # inside an event already cut out
        start, end, event = _event_at(text, name_at)
        name = event.get("name")
        if event.get("ph") != "X" or not isinstance(name, str):
            continue
        if is_step(name):
            number = step_number(name)
            if last_step is None or number is None or number <= last_step:
                continue
            before = _BEFORE.search(text, at, start)  # the comma before it, else the one after it
            if before is not None:
                start = before.start()
            elif after := _AFTER.match(text, end):
                end = after.end()
            out.append(text[at:start])
            at = end
        elif event.get("cat") == USER_ANNOTATION and is_dataloader_event(name):
            out += [text[at:start], _relabelled(text[start:end], event)]
            at = end
    out.append(text[at:])
    return b"".join(out)


def _candidates(text: bytes, begin: int, end: int) -> Iterator[int]:
    """Where the ``"name"`` key of each event that may change starts in ``text[begin:end]``, in order."""
    at = text.find(b"#", begin, end)
    while at >= 0:
        for start in _STARTS:
            if text.endswith(start, begin, at):
                name_at = at - len(start)
                key = _NAME_KEY.search(text, max(begin, name_at - 16), name_at)
                if key is not None:
                    yield key.start()
        at = text.find(b"#", at + 1, end)


def _event_at(text: bytes, inside: int) -> tuple[int, int, dict[str, Any]]:
    """The event whose ``"name"`` key is at ``inside``: its start, end and (ASCII-exact) fields. The event's
    ``{`` is the nearest before its name (a profiler writes ``ph`` and ``cat`` before it, never an object)."""
    start = text.rfind(b"{", 0, inside)
    size = _EVENT_BYTES
    while start >= 0:
        window = text[start:start + size]
        try:  # latin-1: one character a byte, so the decoder's end is a byte offset
            event, length = _DECODER.raw_decode(window.decode("latin-1"))
        except ValueError:
            if start + size >= len(text):
                break
            size *= 2
            continue
        if isinstance(event, dict) and start + length > inside:
            return start, start + length, event
        break
    raise PieceError(f"an event at byte {inside} of a piece does not decode alone")


def _relabelled(event_text: bytes, event: dict[str, Any]) -> bytes:
    """The event's text with its category ``cpu_op``, as written but for that: checked by decoding it again."""
    changed = _CATEGORY.sub(b'"cat": "' + CPU_OP.encode() + b'"', event_text, count=1)
    if json.loads(changed.decode("latin-1")) != {**event, "cat": CPU_OP}:
        raise PieceError("a DataLoader span whose category could not be changed in place")
    return changed


def joined(pieces: Iterable[tuple[Text, bool, bool]], keys: Callable[[], dict[str, Any]]) -> Iterator[Text]:
    """The edited ``pieces`` (``(text, first, last)``, in order) as one document's text: a comma between two that
    hold events, and the keys that ``keys()`` gives (asked after the last piece) before its closing brace."""
    previous_held = False
    for text, first, last in pieces:
        held = _holds_events(text, first)
        if held and previous_held:
            yield b","
        previous_held = previous_held or held
        if not last:
            yield text
            continue
        body = bytes(text).rstrip()
        if not body.endswith(b"}"):
            raise PieceError("the document does not end with '}'")
        added = keys()
        # default separators: HolisticTraceAnalysis finds the rank with '"rank":\s+(\d+)'
        spliced = "".join(f', {json.dumps(k)}: {json.dumps(v)}' for k, v in added.items())
        yield body[:-1] + spliced.encode() + b"}\n"


def _holds_events(text: Text, first: bool) -> bool:
    """Whether an edited piece still holds an event: its list (past the document's head) starts with one."""
    if first:
        head = EVENTS_KEY.search(text)
        return head is not None and _EVENT_START.match(text, head.end()) is not None
    return _EVENT_START.match(text) is not None
