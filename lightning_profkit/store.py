"""Object storage through fsspec (any protocol it knows), for a run's traces and ``profkit`` reading them back; the
training process never talks to a store. See docs/traces-and-storage.md."""

from __future__ import annotations

import contextlib
import os
import re
import socket
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional, Sequence

from lightning_profkit.companions import SIDECAR, with_companions
from lightning_profkit.opener import fd_path, open_regular
from lightning_profkit.printable import redact

_OPTIONS: dict[str, Any] = {}  # fsspec's storage options (credentials, endpoint) for this process: use_options()

PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs", "abfss": "adlfs"}
STAGING_PREFIX = "profkit-staging-"  # a fit's local folder for the traces of a run on object storage


class StoreError(OSError):
    """A store that cannot be reached or written, or whose package is missing: one line naming the URL."""


def is_url(path: str) -> bool:
    """``s3://…``, ``gs://…``, ``memory://…``: a path with a protocol other than ``file://``."""
    protocol, sep, _ = path.partition("://")
    return bool(sep) and protocol.isidentifier() and protocol != "file"


def join(folder: str, *parts: str) -> str:
    """``parts`` under a URL (joined by ``/``) or a local folder (by the OS's separator)."""
    return "/".join([folder.rstrip("/"), *parts]) if is_url(folder) else os.path.join(folder, *parts)


def use_options(options: Optional[dict[str, Any]]) -> None:
    """fsspec's ``storage_options`` every store call of this process passes on (never set in the training process)."""
    _OPTIONS.clear()
    _OPTIONS.update(options or {})


def filesystem(url: str) -> tuple[Any, str]:
    """fsspec's file system for ``url`` and the path in it (called inside :func:`_opened`)."""
    protocol = url.partition("://")[0]
    if protocol == "memory":  # a store that lives in one process cannot take traces from another
        raise StoreError(f"{url}: {protocol}:// lives inside one process and cannot hold traces, which are written by "
                         "a helper process: use a local folder or an object store (s3://, gs://, az://)")
    package = PACKAGES.get(protocol)
    needs = f"pip install {package}" if package else "pip install fsspec"  # each of these packages brings fsspec
    try:
        import fsspec

        return fsspec.core.url_to_fs(url, **_OPTIONS)
    except ImportError as err:  # fsspec itself (err.name), or the package of the protocol
        raise StoreError(f"{url}: {protocol}:// needs {package or err.name or 'a package fsspec names'}: {needs}") from None
    except ValueError as err:
        raise StoreError(f"{url}: {err}") from None


@contextlib.contextmanager
def _opened(url: str) -> Iterator[tuple[Any, str]]:
    """fsspec's file system for ``url`` and the path in it; any failure inside as one :class:`StoreError` line
    naming ``url``, with no credential in it."""
    try:
        yield filesystem(url)
    except StoreError as err:
        raise StoreError(_without_secrets(str(err), url)) from None
    except Exception as err:
        raise StoreError(_without_secrets(f"{url}: {type(err).__name__}: {err}", url)) from None


def _without_secrets(text: str, url: str) -> str:
    """``text`` with URLs' user information, ``url``'s and the storage options' secrets shown as ``***``."""
    userinfo = url.partition("://")[2].partition("/")[0].rpartition("@")[0]
    secrets = [part for part in userinfo.split(":") if len(part) >= 4]
    secrets += [v for v in _strings(_OPTIONS) if len(v) >= 4]
    text = redact(text)
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


_CREDENTIAL = re.compile(r"secret|password|token|key|credential|sas|connection_string", re.IGNORECASE)


def credential_keys(options: Any, above: str = "") -> list[str]:
    """The keys of ``options`` that name a credential (``key``, ``token``...), nested ones as ``client_kwargs.key``."""
    if not isinstance(options, dict):
        return []
    found = []
    for key, value in options.items():
        name = f"{above}{key}"
        found += credential_keys(value, name + ".") if isinstance(value, dict) else (
            [name] if isinstance(key, str) and _CREDENTIAL.search(key) and value else [])
    return found


def _strings(options: Any) -> Iterator[str]:
    """Every string value in ``options``, nested too, but the endpoint's URL (errors name it to say where)."""
    if isinstance(options, str):
        yield options
    elif isinstance(options, dict):
        for key, value in options.items():
            if key != "endpoint_url":
                yield from _strings(value)
    elif isinstance(options, (list, tuple)):
        for value in options:
            yield from _strings(value)


def upload_with_companions(local: str, url: str) -> None:
    """Put the local trace ``local`` at ``url``, its companions that are there first: each a complete regular file
    (visible only once whole), never read through a link."""
    for path, at in zip(with_companions(local), with_companions(url)):
        if path == local or os.path.lexists(path):
            with open_regular(path) as f, _opened(at) as (fs, key):
                fs.put_file(fd_path(f), key)


def fetch_file(url: str, local: str) -> None:
    """Copy the object at ``url`` to the local path ``local``."""
    with _opened(url) as (fs, path):
        fs.get_file(path, local)


def remove(url: str) -> None:
    """Delete the object at ``url`` (gone already is fine)."""
    with _opened(url) as (fs, path):
        if fs.exists(path):
            fs.rm_file(path)


def read(url: str, limit: Optional[int] = None) -> Optional[bytes]:
    """The object at ``url`` (its first ``limit`` bytes and one more, where given), or None where there is none."""
    with _opened(url) as (fs, path):
        try:
            return fs.cat_file(path, end=None if limit is None else limit + 1)
        except FileNotFoundError:
            return None


def named(paths: Iterable[str], suffixes: tuple[str, ...]) -> list[str]:
    """The ``paths`` whose names end with one of ``suffixes``, our hidden temporary files left out."""
    return [p for p in paths if p.endswith(suffixes) and not p.rsplit("/", 1)[-1].startswith(".")]


def files_under(url: str, suffixes: tuple[str, ...]) -> list[str]:
    """The URLs of the files under ``url`` that :func:`named` keeps."""
    with _opened(url) as (fs, root):
        return [fs.unstrip_protocol(p) for p in named(fs.find(root), suffixes)]


def copy_here(url: str, urls: Sequence[str], into: str, suffix: str) -> list[str]:
    """Copy the objects ``urls`` (under ``url``) into ``into`` as ``000000<suffix>``, ``000001<suffix>``… (names a
    key cannot steer out of ``into``); returns the copies in the order of ``urls``."""
    local = [os.path.join(into, f"{i:06d}{suffix}") for i in range(len(urls))]
    with _opened(url) as (fs, _):
        fs.get(list(urls), local)
    return local


def subfolders(url: str, prefix: str) -> list[str]:
    """The URLs of the folders right under ``url`` whose names start with ``prefix``, sorted."""
    with _opened(url) as (fs, path):
        try:
            entries = fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
    names = [e["name"].rstrip("/") for e in entries if e.get("type") == "directory"]
    return sorted(fs.unstrip_protocol(n) for n in names if n.rsplit("/", 1)[-1].startswith(prefix))


def write(url: str, data: bytes) -> None:
    """Put ``data`` at ``url`` in one call."""
    with _opened(url) as (fs, path):
        fs.pipe_file(path, data)


def write_probe(url: str) -> None:
    """Write a small object under ``url`` and delete it again, or raise :class:`StoreError` saying why."""
    with _opened(url) as (fs, folder):
        key = join(folder, f".profkit-probe-{socket.gethostname()}-{os.getpid()}")
        fs.pipe_file(key, b"profkit")
        fs.rm_file(key)


@dataclass
class Survey:
    """The traces under a URL, as :func:`survey` finds them."""

    fs: Any  # fsspec's file system
    root: str  # the folder they are found under
    found: list[str]  # their paths in ``fs``
    known: dict[str, dict[str, Any]]  # the summaries of those with a fresh sidecar, by path
    unread: Optional[str] = None  # why some sidecars could not be read (their traces are parsed), in words


def survey(url: str, suffixes: tuple[str, ...]) -> Survey:
    """The traces under ``url`` (or the trace ``url``) and the summaries in their fresh sidecars."""
    from lightning_profkit.trace import sidecar

    with _opened(url) as (fs, root):
        if fs.isfile(root):
            listing = {p: fs.info(p) for p in (root, root + SIDECAR) if p == root or fs.isfile(p)}
            root = root.rsplit("/", 2)[0] if root.count("/") >= 2 else ""
        else:
            listing = fs.find(root, detail=True)
        found = named(listing, suffixes)
        beside = [p + SIDECAR for p in found
                  if listing.get(p + SIDECAR, {}).get("size", sidecar.MAX_BYTES + 1) <= sidecar.MAX_BYTES]
        texts = fs.cat(beside, on_error="return") if beside else {}
    failed = {p: t for p, t in texts.items() if isinstance(t, BaseException)}
    read = {p: sidecar.loads(text, listing[p].get("size")) for p in found
            if isinstance(text := texts.get(p + SIDECAR), bytes)}
    known = {p: summary for p, summary in read.items() if summary is not None}
    unread = None
    if failed:
        path, err = next(iter(failed.items()))
        unread = (f"{len(failed)} of {len(beside)} summaries beside the traces could not be read from the store (the "
                  f"first, {redact(fs.unstrip_protocol(path))}: {redact(str(err) or type(err).__name__)}); their "
                  "traces were parsed")
    return Survey(fs, root, found, known, unread)


def download(url: str, suffixes: tuple[str, ...], into: str) -> dict[str, Any]:
    """The traces under ``url`` (see :func:`survey`) without a fresh sidecar copied into ``into`` under their paths
    below ``url``: ``paths`` (the copies), ``known`` (the other summaries, by the path a copy would have), ``unread``
    and ``refused`` (the URLs of traces whose keys would leave ``into``: not copied)."""
    found = survey(url, suffixes)
    parts = {p: p[len(found.root):].strip("/").split("/") for p in found.found}
    # a key whose parts hold "..", "." or nothing would be copied elsewhere than into `into`: never copied
    refused = [p for p, names in parts.items() if any(name in ("", ".", "..") for name in names)]
    local = {p: os.path.join(into, *names) for p, names in parts.items() if p not in refused}
    copied = [p for p in local if p not in found.known]
    for p in copied:
        os.makedirs(os.path.dirname(local[p]), exist_ok=True)
    if copied:
        with _opened(url) as (fs, _):
            fs.get(copied, [local[p] for p in copied])
    return {"paths": [local[p] for p in copied], "known": {local[p]: s for p, s in found.known.items() if p in local},
            "unread": found.unread, "refused": [redact(found.fs.unstrip_protocol(p)) for p in refused]}


def put(pairs: list[list[str]]) -> None:
    """Upload each ``[local, url]``, many at a time (one store: the first URL's)."""
    if not pairs:
        return
    with _opened(pairs[0][1]) as (fs, _):
        fs.put([local for local, _ in pairs], [filesystem(url)[1] for _, url in pairs])
