"""Keep the newest K window folders of ours: older trace files we wrote are deleted, and their folder once empty.

Only files this process wrote are removed (other ranks delete their own; the last one removes the folder).
"""

from __future__ import annotations

import os
from collections import OrderedDict


class Retention:
    def __init__(self, keep_last: int) -> None:
        self.keep_last = keep_last
        self._windows: OrderedDict[str, list[str]] = OrderedDict()  # folder -> our files, oldest first

    def add(self, path: str) -> list[str]:
        """Record a written trace; delete what falls out of the newest ``keep_last`` windows; return those paths."""
        folder = os.path.dirname(path)
        self._windows.setdefault(folder, []).append(path)
        removed = []
        while len(self._windows) > self.keep_last:
            old_folder, files = self._windows.popitem(last=False)
            for f in files:
                try:
                    os.remove(f)
                    removed.append(f)
                except FileNotFoundError:
                    pass
            try:
                os.rmdir(old_folder)  # only when empty: other ranks' files stay
            except OSError:
                pass
        return removed
