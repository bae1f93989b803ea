"""The CUDA check script keeps working: here, without a GPU, it refuses plainly or runs its CPU path."""

import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".ci", "check_cuda.py")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=300)


def skip_on_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA machine: run .ci/check_cuda.py itself (bash dev.sh check-cuda)")


def test_without_cuda_it_says_not_checked():
    skip_on_cuda()
    done = run()
    assert done.returncode == 3 and "NOT CHECKED" in done.stdout


def test_dev_sh_check_cuda_runs_the_cpu_path_with_no_network_and_no_virtual_environment(tmp_path):
    """A GPU machine is often offline: the command runs the machine's python3 as it is, installs nothing; every
    check passes on the CPU path (30 steps an epoch: on CPU NVML's few seconds an epoch are not needed)."""
    skip_on_cuda()
    root = os.path.dirname(os.path.dirname(SCRIPT))
    env = dict(os.environ, PYTHON=sys.executable, PROFKIT_VENV=str(tmp_path / "venv"), PIP_NO_INDEX="1")
    done = subprocess.run(["bash", os.path.join(root, "dev.sh"), "check-cuda", "--allow-cpu", "--steps", "30"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and "ALL PASSED" in done.stdout, done.stdout + done.stderr
    assert not (tmp_path / "venv").exists()
    assert "USDT" not in done.stdout + done.stderr
    table = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    for setting in ("unset", "=0", "=1"):  # the after-window ratio of each TEARDOWN_CUPTI setting, 3 epochs
        (row,) = [line for line in table if line.startswith(f"| TEARDOWN_CUPTI{' ' if setting == 'unset' else ''}{setting}")]
        assert len(row.split("|")[2].split(";")[0].split(",")) == 3, row
    assert any(line.startswith("| default windows, wall time") for line in table)
    assert any(line.startswith("| torch-tb-profiler loader | 1 profile(s)") for line in table)
