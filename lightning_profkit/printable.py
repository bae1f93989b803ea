"""Text from outside (names in a trace, file names, URLs) made safe to show: no terminal controls, no credentials."""

from __future__ import annotations

import re

# what a name read from a trace must not send to a terminal: C0 and C1 controls (escape sequences, bells, line
# breaks), zero-width and bidirectional marks (text shown in another order than it is), the byte-order mark
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def printable(text: str) -> str:
    """``text`` with every control or invisible formatting character shown as its escape (``\\x1b``, ``\\u202e``)."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)

# a URL's ``user:password@``, found from ``://`` (a scheme matched first would be tried at every letter of a word)
_CREDENTIALS = re.compile(r"://[^/@\s'\"]{1,1024}@")


def redact(text: str) -> str:
    """``text`` with the user and password of every URL in it shown as ``***`` (``s3://***@bucket/run``)."""
    return _CREDENTIALS.sub("://***@", text)


def number_in(text: str) -> "int | None":
    """The whole number ``text`` is in at most 18 ASCII digits, or None (a name may hold ``²`` or a million digits)."""
    return int(text) if 0 < len(text) <= 18 and text.isascii() and text.isdigit() else None


def name_text(name: str) -> str:
    """A file name as text any writer takes: its bytes that are not UTF-8 (held as surrogates) as escapes (``\\xff``)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
