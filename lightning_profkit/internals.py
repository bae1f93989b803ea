"""Every private name of Lightning, torch and Python that the package uses, looked up here alone when used: where a
release has moved one, the caller gets None (or False) and takes its fallback. Design notes: docs/how-it-works.md."""

from __future__ import annotations

import sys
from importlib import metadata
from typing import Any, Callable, Optional

FETCH_PAIR = ("_on_before_fetch", "_on_after_fetch")
LOADER_SETUP = "setup_data"


def moved(package: str, name: str, instead: str) -> str:
    """The line that says ``name`` is not in the installed ``package``, and what is done ``instead``."""
    try:
        version = metadata.version(package)
    except metadata.PackageNotFoundError:
        version = "(version unknown)"
    return f"{package} {version} has no `{name}`: {instead}"


def fetch_pair(loop: Any) -> Optional[tuple[Callable[[], None], Callable[[], None]]]:
    """The loop's fetch pair as its fetcher will call it; None where the loop has no such pair."""
    pair = tuple(getattr(loop, name, None) for name in FETCH_PAIR)
    return pair if all(callable(f) for f in pair) else None  # type: ignore[return-value]


def lightnings_fetch_pair(loop: Any) -> bool:
    """Whether the training loop's class has Lightning's own pair (``_TrainingEpochLoop``'s: a subclass may
    override it)."""
    return all(getattr(getattr(type(loop), name, None), "__qualname__", "") == f"_TrainingEpochLoop.{name}"
               for name in FETCH_PAIR)


def has_loader_setup(fit_loop: Any) -> bool:
    """Whether the fit loop's class has :data:`LOADER_SETUP`, the method that makes the training DataLoader."""
    return callable(getattr(type(fit_loop), LOADER_SETUP, None))


def loader_workers(fit_loop: Any) -> list[int]:
    """The pids of the training DataLoaders' workers, from the iterator of each loader in Lightning's CombinedLoader
    (empty where the names are not found)."""
    combined = getattr(getattr(fit_loop, "_combined_loader", None), "_iterator", None)
    return [w.pid for it in getattr(combined, "iterators", None) or () for w in getattr(it, "_workers", ())
            if getattr(w, "pid", None) is not None]


def batches_that_stepped(epoch_loop: Any) -> Optional[int]:
    """The batches that stepped an optimizer (the step Lightning logs ``self.log`` at); None if not found."""
    return getattr(epoch_loop, "_batches_that_stepped", None)


SKIPPED = None  # a hook the callback does not need: Lightning calls a callback's hook only where it is callable


SET_WHILE_NEEDED = ("on_train_batch_end", "on_validation_batch_start", "on_validation_batch_end")


def unhook(callback: Any) -> None:
    """:data:`SKIPPED` again for each of :data:`SET_WHILE_NEEDED`: Lightning calls them only while needed."""
    for hook in SET_WHILE_NEEDED:
        setattr(callback, hook, SKIPPED)


def rehook(callback: Any, *hooks: str) -> None:
    """Lightning calls these hooks of the callback's class again (the instance's :data:`SKIPPED` is removed)."""
    for hook in hooks:
        vars(callback).pop(hook, None)


def kineto_results(prof: Any) -> Optional[Any]:
    """A finished ``torch.profiler.profile``'s results (whose ``save(path)`` writes its JSON); None if not found."""
    return getattr(getattr(prof, "profiler", None), "kineto_results", None)


def start_at(profile: Any, step: int, action: Any) -> None:
    """Number the profile's steps from the global ``step`` (``ProfilerStep#<step>``; torch counts from 0) and make
    ``action`` its current and last scheduled action (torch keeps the schedule's last answer apart from
    ``current_action``, which it overrides after a CUPTI buffer overflow)."""
    profile.step_num = step
    profile.current_action = action
    if hasattr(profile, "_prev_schedule_action"):
        profile._prev_schedule_action = action


def release(profile: Any) -> None:
    """Break the finished profile's cycles (through ``on_trace_ready`` and its ``action_map``'s bound methods), so
    that it and its results are freed as soon as nothing else holds them."""
    profile.on_trace_ready = None
    profile.action_map = {}


def profiler_running() -> bool:
    """Whether a torch.profiler (or autograd profiler) session runs in this process; False where torch does not
    say."""
    import torch.autograd.profiler as autograd_profiler

    return bool(getattr(autograd_profiler, "_is_profiler_enabled", False))


def thread_frame(ident: int) -> Any:
    """The running frame of the thread ``ident`` (Python's ``sys._current_frames``), or None."""
    return sys._current_frames().get(ident)
