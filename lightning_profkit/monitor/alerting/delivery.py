"""Alerts on their way to the user: a warning, the loggers' text and ``on_alert`` on rank zero, then a warning line
naming their trace once written (docs/alerts.md)."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Callable, Optional

from lightning_profkit.alerts import DataWaitAlert, DataWaitWarning
from lightning_profkit.notices import warn


class AlertDelivery:
    """``report(message, key)`` is told when ``on_alert`` or ``to_loggers`` (the loggers' text) fails."""

    def __init__(self, on_alert: Optional[Callable[[DataWaitAlert], Any]], report: Callable[[str, str], None],
                 to_loggers: Optional[Callable[[DataWaitAlert], None]] = None, to_user: bool = True) -> None:
        self.on_alert = on_alert
        self.report = report
        self.to_loggers = to_loggers
        self.to_user = to_user  # rank zero delivers; the other ranks only decide alike
        self.recording: list[DataWaitAlert] = []  # sent, the window recorded for them not yet written

    def send(self, alert: DataWaitAlert) -> None:
        if alert.recording:
            self.recording.append(alert)
        if not self.to_user:
            return
        warn(alert.message, DataWaitWarning)
        for deliver, failed, key in ((self.to_loggers, "writing the alert to the loggers failed", "to_loggers"),
                                     (self.on_alert, "`on_alert` raised", "on_alert")):
            if deliver is not None:
                try:
                    deliver(alert)
                except Exception as err:
                    self.report(f"{failed}; training continues:\n  {err!r}", key)

    def window_written(self, path: str, first_step: int) -> list[tuple[DataWaitAlert, DataWaitAlert]]:
        """The trace of the window from ``first_step``, at ``path``, is that of the alerts before it: each of them and
        its copy with its ``trace_dir``."""
        named = [alert for alert in self.recording if alert.step < first_step]
        self.recording = [alert for alert in self.recording if alert.step >= first_step]
        folder = os.path.dirname(path)
        if self.to_user:
            for alert in named:
                warn(f"trace of the steps after the alert ({alert.checked}):\n  {folder}", DataWaitWarning)
        return [(alert, replace(alert, trace_dir=folder)) for alert in named]
