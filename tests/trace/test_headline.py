"""The end-of-fit lines over an aggregate, and names cut to fit a line: plain values in, lines out."""

import pytest

from lightning_profkit.trace.headline import fit_line, percent, short_name
from lightning_profkit.trace.vocabulary import STEP_ROLES


def aggregate(step_ms, data_wait, gpu_idle, shares, top):
    """An aggregate as ``trace.summary.aggregate`` makes it, of two traces."""
    figures = {"step_time_ms": step_ms, "data_wait_share": data_wait, "gpu_idle_share": gpu_idle,
               **{f"share/{role}": shares.get(role, 0.0) for role in STEP_ROLES + ("Other",)}}
    return {"traces": 2, "figures": figures, "operators": {"cpu_by_self": top}}


def test_the_lines_say_the_step_its_make_up_and_the_costliest_operator_per_window():
    agg = aggregate(36.5, 0.939, None, {"DataLoader": 0.94, "CpuOp": 0.03, "Other": 0.03, "Kernel": 0.004},
                    [{"name": "aten::mm", "self_us": 5000.0}])
    assert fit_line(agg) == ["a profiled step took 36.5 ms, data wait 93.9%",
                             "its time: DataLoader 94%, Other 3%, CpuOp 3%",  # under 0.5% left out
                             "most CPU self time: aten::mm, 2.5 ms a window"]
    gpu = aggregate(10.0, 0.0, 0.25, {"Kernel": 1.0}, [])
    assert fit_line(gpu) == ["a profiled step took 10.0 ms, data wait 0.0%, GPU idle 25.0%", "its time: Kernel 100%"]
    assert fit_line(aggregate(None, None, None, {}, [])) == ["no step figures: the windows hold no ProfilerStep"]
    assert percent(None) == "-"


@pytest.mark.parametrize("name, width, want", [
    ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 40, "…_SingleProcessDataLoaderIter.__next__"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", 70,
     "void at::native::vectorized_elementwise_kernel<…>(…)"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 25, "…Sum_f32_RING_LL(…)"),
    ("aten::index", 70, "aten::index"),
])
def test_long_names_keep_their_distinctive_end(name, width, want):
    assert short_name(name, width) == want and len(want) <= width
