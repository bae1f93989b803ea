"""A window asked for from outside the fit (``profkit capture``): the request read from the run's folder, as the
steps to record and what to say."""

from __future__ import annotations

from typing import Callable, Optional

from lightning_profkit.capture_request import MAX_STEPS, LiveRun


def requested_steps(live: LiveRun, now: float, active: int, report: Callable[..., None]
                    ) -> tuple[Optional[int], list[str]]:
    """The steps a request taken ``now`` asks to record (``active`` where it names none; None without a request
    to act on), and the lines to print; ``report(message, key)`` is told of a request refused or unreadable."""
    try:
        request = live.poll(now)
    except OSError as err:
        report(f"cannot read capture requests:\n  {err!r}", "request")
        return None, []
    if request is None:
        return None, []
    if "refused" in request:
        report(f"a capture request was refused: only the user who runs the fit may ask it for a window\n  "
               f"{request['refused']}", "request_refused")
        return None, []
    lines = [f"a capture request asked for {request['capped']} steps; recording at most {MAX_STEPS}"
             ] if "capped" in request else []
    return request["steps"] or active, lines
