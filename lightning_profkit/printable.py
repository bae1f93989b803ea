"""Text from outside (names in a trace, file names, URLs) made safe to show: no control characters for a terminal,
no credentials. Pure, no dependencies: the command imports it before anything else."""

from __future__ import annotations

import re

# what a name read from a trace must not send to a terminal: C0 and C1 controls (escape sequences, bells, line
# breaks), zero-width and bidirectional marks (text shown in another order than it is), the byte-order mark
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def printable(text: str) -> str:
    """``text`` with every control or invisible formatting character shown as its escape (``\\x1b``, ``\\u202e``):
    a name from a trace or a file name cannot drive the terminal."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)

# the user information of a URL: ``scheme://user:password@`` (found from ``://``, so that the search is linear
# in the text: a scheme matched first would be tried at every letter of a long word)
_CREDENTIALS = re.compile(r"://[^/@\s'\"]{1,1024}@")


def redact(text: str) -> str:
    """``text`` with the user and password of every URL in it shown as ``***`` (``s3://***@bucket/run``)."""
    return _CREDENTIALS.sub("://***@", text)
