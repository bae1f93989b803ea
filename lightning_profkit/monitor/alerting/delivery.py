"""Alerts on their way to the user: a :class:`~lightning_profkit.alerts.DataWaitWarning` and ``on_alert`` on
rank zero, held back while the window captured after the alert is still being recorded, so that the alert
can name its trace."""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

from lightning_profkit.alerts import DataWaitAlert, DataWaitWarning
from lightning_profkit.notices import warn


class AlertDelivery:
    """``report(message, key)`` is told when ``on_alert`` or ``to_loggers`` (the alert written where the run's
    loggers show text) fails (training goes on)."""

    def __init__(self, on_alert: Optional[Callable[[DataWaitAlert], Any]], report: Callable[[str, str], None],
                 to_loggers: Optional[Callable[[DataWaitAlert], None]] = None) -> None:
        self.on_alert = on_alert
        self.report = report
        self.to_loggers = to_loggers
        self.to_user = True  # rank zero delivers; the other ranks only decide alike
        self.held: list[DataWaitAlert] = []  # waiting for their capture window

    def send(self, alert: DataWaitAlert) -> None:
        if not self.to_user:
            return
        warn(f"PerformanceMonitor: {alert.message}", DataWaitWarning, stacklevel=2)
        if self.to_loggers is not None:
            try:
                self.to_loggers(alert)
            except Exception as err:
                self.report(f"writing the alert to the loggers failed: {err!r}; training continues", "to_loggers")
        if self.on_alert is not None:
            try:
                self.on_alert(alert)
            except Exception as err:
                self.report(f"`on_alert` raised {err!r}; training continues", "on_alert")

    def hold(self, alert: DataWaitAlert) -> None:
        self.held.append(alert)

    def window_written(self, path: Optional[str] = None, first_step: Optional[int] = None) -> None:
        """Send the held alerts whose capture window starts at ``first_step`` (written to ``path``), or all."""
        keep = []
        for alert in self.held:
            if first_step is None or alert.step < first_step:  # the first window wholly after the alert
                alert.trace_dir = os.path.dirname(path) if path else None
                self.send(alert)
            else:
                keep.append(alert)
        self.held = keep
