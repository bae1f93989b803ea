"""Finding trace files and reading their text: gzip of several members, bombs, damaged and missing files, each a
one-line TraceError; the natural order of windows."""

import gzip
import json
import os

import pytest

from lightning_profkit.trace.file import ALWAYS_INFLATED, TraceError, find_traces, json_blocks, natural, read_json


def test_blocks_inflate_a_gzip_file_of_several_members(tmp_path):
    text = json.dumps({"traceEvents": [{"ph": "X", "ts": i} for i in range(20000)]}).encode()
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text[:100000]) + gzip.compress(text[100000:]))
    got = list(json_blocks(str(path), 8192))
    assert b"".join(b for b, _ in got) == text and max(len(b) for b, _ in got) <= 8192
    assert got[-1][1] == path.stat().st_size  # bytes of the file read, for the progress line
    assert read_json(str(path)) == text
    path.write_bytes(gzip.compress(text)[:-20])
    for read in (lambda p: list(json_blocks(p, 8192)), read_json):
        with pytest.raises(TraceError, match="not a complete gzip file"):
            read(str(path))


def test_a_gzip_bomb_is_refused_before_its_text_is_held(tmp_path, monkeypatch):
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(b" " * (ALWAYS_INFLATED + 2**20), compresslevel=9))  # about 1000x
    for read in (lambda p: list(json_blocks(p, 2**20)), read_json):
        with pytest.raises(TraceError, match="refused as a gzip bomb, unread; PROFKIT_MAX_INFLATION"):
            read(str(path))
    monkeypatch.setenv("PROFKIT_MAX_INFLATION", "2000")
    assert len(read_json(str(path))) == ALWAYS_INFLATED + 2**20


def test_empty_missing_and_dangling_paths_say_which(tmp_path):
    (tmp_path / "empty.json").write_bytes(b"")
    os.symlink(tmp_path / "nowhere", tmp_path / "link.json")
    for read in (lambda p: list(json_blocks(p, 1024)), read_json):
        with pytest.raises(TraceError, match="empty.json: empty file"):
            read(str(tmp_path / "empty.json"))
        with pytest.raises(TraceError, match="absent.json: no such file or folder"):
            read(str(tmp_path / "absent.json"))
        with pytest.raises(TraceError, match=r"link.json: a symbolic link to nothing \("):
            read(str(tmp_path / "link.json"))


def test_traces_are_found_in_natural_order_and_temporary_files_are_left_out(tmp_path):
    for step in (101, 75, 9):
        folder = tmp_path / f"step={step}"
        folder.mkdir()
        (folder / "w.pt.trace.json.gz").write_bytes(b"x")
        (folder / ".w.pt.trace.json.gz.tmp-1.pt.trace.json.gz").write_bytes(b"partial")
    (tmp_path / "other.json").write_text("{}")
    assert [os.path.relpath(p, tmp_path) for p in find_traces(str(tmp_path))] == [
        f"step={s}/w.pt.trace.json.gz" for s in (9, 75, 101)]
    assert find_traces(str(tmp_path / "other.json")) == [str(tmp_path / "other.json")]
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "b.json").write_text("{}")
    assert find_traces(str(tmp_path / "plain")) == [str(tmp_path / "plain" / "b.json")]  # no *.pt.trace.json: any JSON
    (tmp_path / "none").mkdir()
    with pytest.raises(TraceError, match="no trace files"):
        find_traces(str(tmp_path / "none"))
    assert sorted(["a10", "a9", "a100"], key=natural) == ["a9", "a10", "a100"]
