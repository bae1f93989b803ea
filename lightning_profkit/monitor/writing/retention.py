"""``keep_last_windows``: the trace files this process wrote in older window folders are deleted, and a folder once
empty (other ranks delete their own)."""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from typing import Callable, Optional

from lightning_profkit.companions import remove_local


def delete_local(folder: str, files: list[str]) -> list[str]:
    """Delete ``files`` (with their companions) and then ``folder`` if that left it empty; returns the files deleted."""
    removed = [f for f in files if remove_local(f)]
    with contextlib.suppress(OSError):
        os.rmdir(folder)  # only when empty: other ranks' files stay
    return removed


class Retention:
    """``delete(folder, files)`` removes a window's files (default: :func:`delete_local`) and returns those removed."""

    def __init__(self, keep_last: int, delete: Optional[Callable[[str, list[str]], list[str]]] = None) -> None:
        self.keep_last = keep_last
        self._delete = delete or delete_local
        self._windows: OrderedDict[str, list[str]] = OrderedDict()  # folder -> our files, oldest first

    def add(self, path: str) -> list[str]:
        """Record a written trace; delete what falls out of the newest ``keep_last`` windows; return those paths."""
        self._windows.setdefault(os.path.dirname(path), []).append(path)
        removed = []
        while len(self._windows) > self.keep_last:
            removed += self._delete(*self._windows.popitem(last=False))
        return removed
