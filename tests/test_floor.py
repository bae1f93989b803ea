"""The floor pyproject.toml declares is the one `bash dev.sh floor` installs and runs (CI runs it)."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_declared_floors_are_the_tested_ones():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        block = f.read().split("dependencies = [", 1)[1].split("]", 1)[0]
    declared = dict(re.findall(r'"([A-Za-z0-9_.-]+)>=([0-9.]+)', block))
    with open(os.path.join(ROOT, "constraints-floor.txt")) as f:
        tested = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([0-9.]+)", f.read(), re.M))
    assert set(declared) == set(tested)
    for name, floor in declared.items():
        assert tested[name].split(".")[:len(floor.split("."))] == floor.split("."), (name, floor, tested[name])
