"""lightning_profkit: profile selected Lightning training steps and say where the time went."""

from typing import Any

from lightning_profkit.alerts import DataWaitAlert, DataWaitAlertError, DataWaitWarning

__version__ = "0.1.0"
__all__ = ["PerformanceMonitor", "DataWaitAlert", "DataWaitAlertError", "DataWaitWarning"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `python -m lightning_profkit.monitor.writing.child` and the CLI start without importing torch.
    if name == "PerformanceMonitor":
        from lightning_profkit.callback import PerformanceMonitor

        return PerformanceMonitor
    raise AttributeError(f"module 'lightning_profkit' has no attribute {name!r}")
