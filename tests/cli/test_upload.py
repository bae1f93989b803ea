"""``profkit upload LOCAL URL`` against a real S3 server: the kept traces and their sidecars put under the same
paths, each local copy removed once it is up where the folder is a fit's staging folder; a wrong argument is one line naming it."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

PROFKIT = os.path.join(os.path.dirname(sys.executable), "profkit")


def upload(*args, env=None):
    return subprocess.run([PROFKIT, "upload", *map(str, args)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


STEPS = ("step=000005-000006-epoch=0", "step=000010-000011-epoch=0")


def kept_in(folder):
    for step in STEPS:
        (folder / step).mkdir(parents=True)
        (folder / step / "w.pt.trace.json.gz").write_bytes(b"trace of " + step.encode())
        (folder / step / "w.pt.trace.json.gz.profkit").write_text("{}")
    return folder


def test_kept_traces_go_up_under_the_same_paths_and_leave_here(tmp_path, s3_server):
    from lightning_profkit.monitor.writing.output import staging_folder

    tempfile.tempdir = str(tmp_path)  # where the fit would make its staging folder
    try:
        kept = kept_in(Path(staging_folder()))
    finally:
        tempfile.tempdir = None
    done = upload(kept, "s3://runs/one/profiler", env=s3_server.env())
    assert done.returncode == 0 and done.stderr == "profkit: uploaded 2 trace(s) to s3://runs/one/profiler\n"
    assert s3_server.keys("one") == [f"one/profiler/{step}/w.pt.trace.json.gz{suffix}"
                                     for step in STEPS for suffix in ("", ".profkit")]
    assert list(kept.iterdir()) == []  # each window's folder too, once empty


def test_the_files_of_any_other_folder_stay(tmp_path, s3_server):
    """A folder no fit kept (a user's run folder given by mistake): uploaded, and nothing of it removed."""
    other = kept_in(tmp_path / "my_run")
    before = sorted(p.relative_to(other) for p in other.rglob("*"))
    done = upload(other, "s3://runs/two/profiler", env=s3_server.env())
    assert done.returncode == 0 and "their files stay in" in done.stderr, done.stderr
    assert len(s3_server.keys("two")) == 4 and sorted(p.relative_to(other) for p in other.rglob("*")) == before


def test_wrong_arguments_are_one_line_each(tmp_path):
    (tmp_path / "empty").mkdir()
    for args, says in (((tmp_path, "/local/folder"), "/local/folder: not an object-store URL"),
                       ((tmp_path / "nope", "s3://runs/x"), "nope: no such file or folder"),
                       ((tmp_path / "empty", "s3://runs/x"), "empty: no trace files")):
        done = upload(*args)
        assert done.returncode == 1 and says in done.stderr and done.stderr.count("\n") == 1, done.stderr
