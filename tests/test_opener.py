"""The one opener: a regular file of at most its cap, never a link, never a wait on a pipe; what it opened stays what
is read, whatever becomes of the name."""

import os
import threading

import pytest

from lightning_profkit.opener import FileRefused, fd_path, open_regular, read_regular, size_words


def within(seconds, work):
    """``work()``'s result, or a failure if it has not returned in ``seconds`` (a blocking open would hang)."""
    done = {}
    thread = threading.Thread(target=lambda: done.update(result=work()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "it waited"
    return done["result"]


def refusal(path, limit=100):
    try:
        read_regular(str(path), limit)
    except FileRefused as err:
        return str(err)
    return None


def test_a_regular_file_within_its_cap_is_read(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 100)
    assert read_regular(str(tmp_path / "a"), 100) == b"x" * 100


def test_what_is_not_a_regular_file_is_refused_without_waiting_and_named(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"secret")
    os.symlink(victim, tmp_path / "link")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    (tmp_path / "big").write_bytes(b"x" * 101)
    says = {name: within(5, lambda name=name: refusal(tmp_path / name))
            for name in ("link", "dangling", "fifo", "folder", "big", "absent")}
    assert says == {
        "link": f"{tmp_path}/link: a symbolic link, not read (link its folder, or copy the file)",
        "dangling": f"{tmp_path}/dangling: a symbolic link to nothing ({tmp_path}/nowhere)",
        "fifo": f"{tmp_path}/fifo: a pipe, not a file: not read",
        "folder": f"{tmp_path}/folder: a folder, not a file: not read",
        "big": f"{tmp_path}/big: 101 bytes, over the 100 bytes such a file may be: not read",
        "absent": f"{tmp_path}/absent: no such file or folder",
    }
    assert victim.read_bytes() == b"secret"
    assert within(5, lambda: refusal("/dev/zero")) == "/dev/zero: a device, not a file: not read"


def test_a_file_that_grows_past_its_cap_while_read_is_refused(tmp_path):
    path = tmp_path / "growing"
    path.write_bytes(b"x" * 10)
    with open_regular(str(path), 10) as f:
        path.write_bytes(b"x" * 50)
        assert len(f.read(11)) == 11  # what read_regular would find: more than the cap
    with pytest.raises(FileRefused, match="over the"):
        read_regular(str(path), 10)


def test_the_path_of_an_opened_file_is_that_file_whatever_its_name_becomes(tmp_path):
    path = tmp_path / "table"
    path.write_bytes(b"mine")
    with open_regular(str(path)) as f:
        os.remove(path)
        os.symlink("/etc/hostname" if os.path.exists("/etc/hostname") else "/dev/null", path)
        with open(fd_path(f), "rb") as again:
            assert again.read() == b"mine"


def test_sizes_are_said_in_megabytes_kilobytes_or_bytes():
    """Two figures at least, so that a disk's 1.6 MB free and a window's 2.4 MB needed read apart."""
    sizes = (64e6, 2.54e6, 9.96e6, 4e4, 1.6e3, 100)
    assert [size_words(size) for size in sizes] == ["64 MB", "2.5 MB", "10 MB", "40 kB", "1.6 kB", "100 bytes"]
