"""A progress line for long trace reads: drawn on a terminal only, once a read has lasted a second."""

from __future__ import annotations

import os
import time
from typing import Callable, Optional, TextIO

from lightning_profkit.printable import printable

WIDTH = 30  # characters of the bar


def bar(name: str, done: int, total: int) -> str:
    """``name  [######.......]  45%  310 of 690 MB``: the share of the file read (bytes as stored)."""
    share = done / total if total else 1.0
    filled = round(WIDTH * share)
    return f"{name}  [{'#' * filled}{'.' * (WIDTH - filled)}]  {100 * share:3.0f}%  {done / 1e6:.0f} of {total / 1e6:.0f} MB"


class Progress:
    """Draws :func:`bar` on ``stream`` when it is a terminal, at most ten times a second, from ``after_s``
    seconds into a read (short reads draw nothing); :meth:`done` clears the line."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.after_s, self.shown = stream, 1.0, False

    @staticmethod
    def on(stream: TextIO) -> Optional["Progress"]:
        """A Progress for ``stream`` if it is a terminal, else None."""
        try:
            return Progress(stream) if stream.isatty() else None
        except ValueError:  # closed
            return None

    def reading(self, path: str) -> Callable[[int, int], None]:
        """The callback for one file's read: ``(bytes read, file size)``."""
        start, last = time.monotonic(), [0.0]
        name = printable(os.path.basename(path))

        def update(done: int, total: int) -> None:
            now = time.monotonic()
            if now - start < self.after_s or now - last[0] < 0.1:
                return
            last[0] = now
            self.stream.write(f"\r\x1b[Kprofkit: reading {bar(name, done, total)}")
            self.stream.flush()
            self.shown = True

        return update

    def done(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False
