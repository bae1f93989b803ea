"""The words of a torch.profiler (Kineto) trace that the figures read, written once: step markers, event
categories (the 2021 format's and today's), DataLoader spans and the CUDA calls that block the host."""

from __future__ import annotations

from typing import Optional

from lightning_profkit.printable import number_in

STEP_PREFIX = "ProfilerStep#"  # torch.profiler's span of one step: ProfilerStep#<step>

# event categories, lower-cased; each pair is (today's name, the 2021 format's) where they differ
KERNEL = ("kernel",)
MEMCPY = ("memcpy", "gpu_memcpy")
MEMSET = ("memset", "gpu_memset")
DEVICE = KERNEL + MEMCPY + MEMSET  # activity on a GPU stream
RUNTIME = ("runtime", "cuda_runtime")  # CUDA runtime calls on the host (torch-tb-profiler's "Runtime")
DRIVER = ("cuda_driver",)
HOST_CUDA = RUNTIME + DRIVER  # every host call into CUDA
OPERATOR = ("cpu_op", "operator")
ANNOTATION = ("user_annotation", "gpu_user_annotation")
PYTHON = ("python",)
GPU_PREFIX = "gpu_"  # categories of events on the device side (gpu_memcpy, gpu_user_annotation, ...)
USER_ANNOTATION = "user_annotation"  # what torch records DataLoader spans under today
CPU_OP = "cpu_op"
NO_CATEGORY = "Trace"  # the raw category of the trace's own span (HTA leaves it out)

# DataLoader spans, as torch-tb-profiler recognises them
DATALOADER_PREFIX = "enumerate(DataLoader)#"
DATALOADER_SUFFIX = ".__next__"
DATAPIPE_PREFIX = "enumerate(DataPipe)#"

# torch-tb-profiler's step time breakdown: the roles time is handed out to, in priority order, then what is left
STEP_ROLES = ("Kernel", "Memcpy", "Memset", "Communication", "Runtime", "DataLoader", "CpuOp")
STEP_PARTS = STEP_ROLES + ("Other",)
STEP_COLUMNS = STEP_PARTS + ("Total",)

# runtime calls during which the host waits for the device (cudaEventQuery only polls: not one of them)
BLOCKING_SYNC_CALLS = (
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpyAsync",
    "cudaStreamSynchronize",
)


def is_step(name: str) -> bool:
    return name.startswith(STEP_PREFIX)


def step_number(name: str) -> Optional[int]:
    """The ``N`` of ``ProfilerStep#N`` (None if it is not a number)."""
    return number_in(name[len(STEP_PREFIX):])


def is_dataloader_event(name: str) -> bool:
    """torch-tb-profiler's own test for a DataLoader span."""
    return (name.startswith(DATALOADER_PREFIX) and name.endswith(DATALOADER_SUFFIX)) or name.startswith(DATAPIPE_PREFIX)
