"""The CUDA check script keeps working: here, without a GPU, it refuses plainly or runs its CPU path."""

import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".ci", "check_cuda.py")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=300)


def test_without_cuda_it_says_not_checked():
    import torch

    if torch.cuda.is_available():
        return
    done = run()
    assert done.returncode == 3 and "NOT CHECKED" in done.stdout


def test_check_passes_here_cpu_path_without_a_gpu():
    done = run("--allow-cpu", "--steps", "20")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ALL PASSED" in done.stdout
    assert "USDT" not in done.stdout + done.stderr
