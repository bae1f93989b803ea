"""Retention keeps the newest windows: real files in real folders, only ours deleted."""

import os

from lightning_profkit.monitor.writing.retention import Retention


def test_retention_deletes_only_our_files(tmp_path):
    keep = Retention(2)
    paths = []
    for i in range(4):
        folder = tmp_path / f"step={i:06d}-epoch=0"
        folder.mkdir()
        (folder / "other_rank1.pt.trace.json.gz").write_text("x") if i == 0 else None
        path = folder / "host_rank0.1.pt.trace.json.gz"
        path.write_text("x")
        paths.append(str(path))
        keep.add(str(path))
    assert sorted(os.listdir(tmp_path)) == ["step=000000-epoch=0", "step=000002-epoch=0", "step=000003-epoch=0"]
    assert os.listdir(tmp_path / "step=000000-epoch=0") == ["other_rank1.pt.trace.json.gz"]  # not ours: kept
