"""The ``profkit`` command: summary, compare, capture, report, upload, sql and export (docs/profkit.md)."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import Optional, Sequence

from lightning_profkit.cli import capture, report, sql, summary, upload
from lightning_profkit.cli.shared import LEFT_OUT, CommandError, say
from lightning_profkit.opener import FileRefused
from lightning_profkit.printable import redact
from lightning_profkit.store import StoreError


INTERRUPTED = 130  # the shell's status for a command ended by SIGINT
EXIT_CODES = {0: "done", 1: "the input is wrong, or none of its traces could be read",
              2: "a wrong command line", LEFT_OUT: "some traces could not be read: each is named on stderr with why",
              INTERRUPTED: "stopped by Ctrl+C (no traceback)"}


def parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The command line's parser, and each command's."""
    made = argparse.ArgumentParser(prog="profkit", description="lightning_profkit's command line")
    sub = made.add_subparsers(dest="command", required=True)
    for command in (summary, capture, sql, upload, report):
        command.add(sub)
    return made, sub.choices


def reference() -> str:
    """Every command's ``--help`` and the exit codes, as docs/profkit.md shows them (tests/test_docs.py checks)."""
    helps = []
    for command in parser()[1].values():  # each command's formatter at one width, not the terminal's
        command.formatter_class = functools.partial(command.formatter_class, width=116)
        helps.append(command.format_help())
    codes = "\n".join(f"| {code} | {meaning} |" for code, meaning in EXIT_CODES.items())
    return "\n".join(f"```\n{h.rstrip()}\n```\n" for h in helps) + f"\n| exit code | when |\n|---|---|\n{codes}\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser()[0].parse_args(argv)
    try:
        return args.handler(args)
    except (CommandError, FileRefused, StoreError) as err:
        say(redact(str(err)))
        return 1
    except BrokenPipeError:  # `profkit summary ... | head`
        return 0
    except KeyboardInterrupt:  # Ctrl+C: no traceback, the shell's usual status
        return INTERRUPTED
    except OSError as err:
        say(f"{err.filename or ''}: {err.strerror or err}")
        return 1
    except Exception as err:  # a trace with unexpected content: one line, never a traceback
        if os.environ.get("PROFKIT_DEBUG"):
            raise
        say(f"could not read the trace ({type(err).__name__}: {err}); PROFKIT_DEBUG=1 shows where")
        return 1


def run() -> None:
    """The console script: :func:`main`, then an exit that does not free the trace's objects one by one (measured:
    a tenth of a summary of a 2 MB trace)."""
    # One BLAS thread: profkit does no linear algebra, and OpenBLAS's threads would spend a core for a
    # twentieth of a second at numpy's import, the core that reads the trace meanwhile.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # `profkit summary ... | head`
        pass
    except OSError as err:
        say(f"cannot write the output: {err.strerror or err}")
        code = 1
    os._exit(code)


if __name__ == "__main__":
    run()
