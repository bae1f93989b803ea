"""A call run on a thread while the caller goes on: for work that lets go of the GIL (inflating a trace,
numpy's sorts and searches), which then costs little on a second core."""

from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def soon(fn: Callable[..., T], *args: Any) -> Callable[[], T]:
    """``fn(*args)`` on a thread started now; the function returned, called once, waits for its result
    (and lets go of it) or raises what it raised."""
    box: dict = {}

    def target() -> None:
        try:
            box["result"] = fn(*args)
        except BaseException as err:  # noqa: BLE001 - raised again on the caller's thread
            box["error"] = err

    thread = threading.Thread(target=target, name=f"profkit-{getattr(fn, '__name__', 'call')}", daemon=True)
    thread.start()

    def result() -> T:
        thread.join()
        if "error" in box:
            raise box["error"]
        return box.pop("result")

    return result
