"""The floors pyproject.toml declares are the ones `bash dev.sh floor` installs and tests (CI runs it)."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_declared_floors_are_the_tested_ones():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        block = f.read().split("dependencies = [", 1)[1].split("]", 1)[0]
    declared = dict(re.findall(r'"([A-Za-z0-9_.-]+)>=([0-9.]+)', block))
    with open(os.path.join(ROOT, "constraints-floor.txt")) as f:
        tested = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([0-9.]+)", f.read(), re.M))
    assert set(declared) <= set(tested)  # and pytorch-lightning, for the `pytorch_lightning` namespace's test
    for name, floor in declared.items():
        assert tested[name].split(".")[:len(floor.split("."))] == floor.split("."), (name, floor, tested[name])


def test_the_declared_python_floor_is_the_one_the_floor_job_runs_on():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        declared = re.search(r'requires-python = ">=([0-9.]+)"', f.read()).group(1)
    with open(os.path.join(ROOT, "dev.sh")) as f:
        job = re.search(r"^FLOOR_PYTHON=([0-9.]+)", f.read(), re.M).group(1)
    assert job == declared
