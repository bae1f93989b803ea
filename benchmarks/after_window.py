"""Does a torch.profiler window leave a per-step cost behind in torch itself? The benchmark's model
(``overhead.MLP``) stepped by hand, without Lightning or our callback, counted by callgrind over the steps after
a window (warm-up 1, record 3, the trace saved) against the same steps with no window before them: instructions
a step from fits of two lengths, as ``instructions.py`` counts them.

    python benchmarks/after_window.py [--short 50] [--long 150]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def child(mode: str, switch: str, steps: int, folder: str) -> None:
    import torch

    sys.path.insert(0, HERE)
    from overhead import MLP

    torch.set_num_threads(1)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 128), torch.randn(32, 1)

    def step() -> None:
        opt.zero_grad()
        model.training_step((x, y), 0).backward()
        opt.step()

    for _ in range(20):
        step()
    if mode == "window":
        done = []
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      schedule=torch.profiler.schedule(wait=0, warmup=1, active=3, repeat=1),
                                      on_trace_ready=lambda p: done.append(p.profiler.kineto_results))
        prof.start()
        for _ in range(4):
            step()
            prof.step()
        prof.stop()
        done[0].save(os.path.join(folder, "window.json"))
        del done, prof
    else:
        for _ in range(4):
            step()
    for _ in range(20):
        step()
    lib = ctypes.CDLL(switch)
    lib.collect_on()
    for _ in range(steps):
        step()
    lib.collect_off()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--short", type=int, default=50)
    parser.add_argument("--long", type=int, default=150)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, switch, steps, folder = args.child
        return child(mode, switch, int(steps), folder)
    sys.path.insert(0, HERE)
    from instructions import build_switch, totals

    folder = tempfile.mkdtemp(prefix="profkit-after-window-")
    switch = build_switch(folder)
    fixed = ["setarch", os.uname().machine, "--addr-no-randomize"] if shutil.which("setarch") else []
    per_step = {}
    for mode in ("none", "window"):
        counts = []
        for steps in (args.short, args.long):
            out = os.path.join(folder, f"{mode}.{steps}.out")
            subprocess.run([*fixed, "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                            sys.executable, os.path.abspath(__file__), "--child", mode, switch, str(steps), folder],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            counts.append(totals(out)["Ir"])
        per_step[mode] = (counts[1] - counts[0]) / (args.long - args.short)
    print("| steps counted | instructions a step |\n|---|---|")
    print(f"| no window before them | {per_step['none']:,.0f} |")
    print(f"| after a window (warm-up 1, record 3, saved) | {per_step['window']:,.0f} |")
    print(f"\nafter / without: {per_step['window'] / per_step['none']:.4f}")
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
