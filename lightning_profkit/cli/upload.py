"""``profkit upload LOCAL URL``: the traces a fit kept on this machine when its store failed, put where they belong."""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
from typing import Any

from lightning_profkit.cli.shared import CommandError, exit_status, say
from lightning_profkit.opener import FileRefused, missing
from lightning_profkit.printable import redact
from lightning_profkit.store import STAGING_PREFIX, StoreError, is_url, join
from lightning_profkit.trace.file import TRACE_SUFFIXES, find_traces


def add(sub: Any) -> None:
    p = sub.add_parser("upload", help="upload the traces a fit kept on this machine when its store failed")
    p.add_argument("local", help="the folder the fit's end warning names")
    p.add_argument("url", help="where they belong: the run's trace folder on the store")
    p.set_defaults(handler=upload_kept)


def upload_kept(args: argparse.Namespace) -> int:
    """The traces under ``LOCAL`` put at ``URL`` under the same paths, each local copy removed once up where
    ``LOCAL`` is a fit's staging folder (:func:`is_staging`)."""
    from lightning_profkit.companions import remove_local
    from lightning_profkit.store import upload_with_companions

    if not is_url(args.url):
        raise CommandError(f"{args.url}: not an object-store URL (s3://, gs://, az://, ...)")
    if not os.path.isdir(args.local):
        raise CommandError(missing(args.local) if not os.path.exists(args.local) else f"{args.local}: not a folder")
    found = [p for p in find_traces(args.local) if p.endswith(TRACE_SUFFIXES)]
    if not found:
        raise CommandError(f"{args.local}: no trace files (*.pt.trace.json[.gz]) there")
    staged = is_staging(args.local)
    left_out: list[str] = []
    for k, path in enumerate(found):
        key = os.path.relpath(path, args.local).replace(os.sep, "/")
        if not key.isprintable():  # a control character, or bytes that are not UTF-8 (surrogates are not printable)
            left_out.append(f"{path}: a name that is not printable UTF-8 cannot be an object's key: not uploaded")
            continue
        try:
            upload_with_companions(path, join(args.url, key))
        except StoreError as err:
            done = k - len(left_out)
            raise CommandError(f"{err}; {done} of {len(found)} trace(s) uploaded, the others are still in {args.local}")
        except (FileRefused, OSError) as err:  # a link, a pipe, a socket, unreadable: named, never followed
            left_out.append(str(err) if isinstance(err, FileRefused) else f"{path}: {err.strerror or err}")
            continue
        if staged:
            remove_local(path)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(path))  # a window's folder, once empty
    kept = "" if staged else f"; their files stay in {args.local}, which is not a staging folder a fit kept"
    say(f"uploaded {len(found) - len(left_out)} trace(s) to {redact(args.url)}{kept}")
    return exit_status(left_out)


def is_staging(folder: str) -> bool:
    """Whether ``folder`` is a staging folder a fit made: named so, this user's own, not a link."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return (os.path.basename(os.path.abspath(folder)).startswith(STAGING_PREFIX) and stat.S_ISDIR(st.st_mode)
            and st.st_uid == os.getuid())
