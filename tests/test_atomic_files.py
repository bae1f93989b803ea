"""A file others may read is written under a hidden temporary name and renamed whole, never through a link."""

import glob
import os

import pytest

from lightning_profkit.atomic_files import atomic_writer, temporary_pattern, write_atomic


def test_a_reader_sees_the_whole_file_or_none_and_a_failure_leaves_nothing(tmp_path):
    path = str(tmp_path / "w.pt.trace.json.gz")
    with atomic_writer(path) as f:
        f.write(b"half")
        assert not os.path.exists(path) and len(glob.glob(temporary_pattern(path))) == 1  # hidden until complete
        f.write(b" and half")
    assert open(path, "rb").read() == b"half and half" and glob.glob(temporary_pattern(path)) == []
    with pytest.raises(RuntimeError):
        with atomic_writer(path) as f:
            f.write(b"partial")
            raise RuntimeError("the disk filled")
    assert open(path, "rb").read() == b"half and half" and glob.glob(temporary_pattern(path)) == []


def test_the_temporary_name_is_new_and_no_link_is_followed(tmp_path):
    target = tmp_path / "elsewhere"
    path = str(tmp_path / "capture.request")
    write_atomic(path, b"1")
    os.remove(path)
    os.symlink(target, path)  # a link left where the file goes is replaced, its target never written
    write_atomic(path, b"2")
    assert not target.exists() and not os.path.islink(path) and open(path, "rb").read() == b"2"
    names = {os.path.basename(p) for p in glob.glob(str(tmp_path / ".*"))}
    assert names == set()  # nothing left beside it
