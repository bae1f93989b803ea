"""The real GPU traces travel with the suite: every file the reference names is here, as its provenance says."""

import hashlib
import json
import re

from conftest import GPU_TRACES

ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+) \|.*\| `([0-9a-f]{64})` \|", re.M)


def test_every_trace_is_here_with_its_licence_and_checksum():
    table = {name: (source.strip(), sha) for name, source, sha in ROW.findall((GPU_TRACES / "README.md").read_text())}
    named = set(json.loads((GPU_TRACES / "reference.json").read_text()))
    assert named | {"reference.json"} == set(table)
    for name, (source, sha) in table.items():
        assert hashlib.sha256((GPU_TRACES / name).read_bytes()).hexdigest() == sha, name
        if name in named:
            assert (GPU_TRACES / name.split("/")[0] / "LICENSE").read_text().split()[0] in ("BSD", "MIT"), name
    assert {path.relative_to(GPU_TRACES).as_posix() for path in GPU_TRACES.rglob("*.gz")} == named


def test_the_h200_traces_are_here_as_their_readme_says():
    folder = GPU_TRACES.parent / "h200"
    table = {name: sha for name, sha in re.findall(r"^\| `([^`]+)` \| `([0-9a-f]{64})` \|", (folder / "README.md").read_text(), re.M)}
    assert set(table) == {path.name for path in folder.glob("*.gz")} and table
    for name, sha in table.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == sha, name
