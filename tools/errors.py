"""How every program in tools/ ends a failure: one `error:` line that says what went
wrong and what to do, never a traceback, unless asked for.

    sys.exit(errors.run_main(main, "python -m tools.bench"))

`run_main` calls `main()`; an exception that reaches it is printed as

    python -m tools.bench: error: <what happened>; <what to do>

with the exception's own message kept whole (a cause is never hidden), and exit status
2 for a refusal (a setting, a path, the data: something the user can change) or 1 for
anything else. A full disk (ENOSPC, EDQUOT) is named as such wherever it happens. The
traceback is printed too when the environment variable AT_TRACEBACK is set to 1
(`AT_TRACEBACK=1 python -m tools.bench ...`), for a bug report.

SIGTERM (`kill`, `timeout`) and SIGHUP (the terminal closed) stop a program as Ctrl-C
does: as an exception (`Stopped`), so that its `finally` blocks run and the processes
it started are stopped before it ends (atkit/processes.py); then `stopped (SIGTERM)`
and exit status 128 + the signal's number, as a shell reports it. A torchrun worker
keeps the default (torchrun stops its workers itself).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator

TRACEBACK_ENV = "AT_TRACEBACK"
DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
# What a user can change: a setting, a path, the data. Matched by class name so that
# this module imports nothing of the project (every tool can use it, even one that
# fails while importing the project).
REFUSALS = {
    "ConfigError",
    "ConfigTypeError",
    "CheckpointError",
    "FolderBusyError",
    "DataUnavailableError",
    "DiskFullError",
    "UsageError",
    "PathError",  # atkit.files: an output over an input, an input that is no file
    "ExportError",
    "MalformedFileError",  # a file of the project that is not what it should be
    "NonFiniteLossError",  # the loss diverged: its message names the setting
}
MEMORY_ADVICE = (
    "use a smaller preset or setting (d_model, d_ff, N, the vocabulary, max_tokens, "
    "decode_tokens), or close other programs"
)


class UsageError(Exception):
    """A refusal whose message says all: printed as it is, exit status 2."""


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived: a BaseException, as KeyboardInterrupt is, so that
    no `except Exception` takes it for an error and goes on."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _raise_stopped(signum, frame):
    raise Stopped(signum)


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Stopped in the main thread while the block runs
    (the handlers before are put back after it); in another thread, or in a
    torchrun worker, nothing changes."""
    if (
        threading.current_thread() is not threading.main_thread()
        or "WORLD_SIZE" in os.environ
    ):
        yield
        return
    before = {sig: signal.signal(sig, _raise_stopped) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def disk_full(err: BaseException) -> bool:
    """Whether `err`, or an error it was raised from, is a full disk or quota."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in DISK_FULL:
            return True
        if type(err).__name__ == "DiskFullError":
            return True
        # torch.save reports a full disk as RuntimeError("... unexpected pos ...")
        text = str(err)
        if "No space left on device" in text or "Disk quota exceeded" in text:
            return True
        err = err.__cause__ or err.__context__
    return False


def out_of_memory(err: BaseException) -> str | None:
    """What `err` says about memory that ran out, in words ("" if nothing more than
    that it did), or None if it is not such an error: Python's MemoryError, and
    PyTorch's failures to allocate (on a CPU a RuntimeError, on a GPU
    torch.OutOfMemoryError)."""
    text = str(err)
    torch_says = isinstance(err, RuntimeError) and (
        type(err).__name__ == "OutOfMemoryError"
        or "can't allocate memory" in text
        or "out of memory" in text.lower()
    )
    if not (isinstance(err, MemoryError) or torch_says):
        return None
    asked = re.search(r"tried to allocate (\d+) bytes", text, re.I)
    if asked:
        return f"PyTorch tried to allocate {int(asked[1]) / 2**30:,.1f} GiB"
    asked = re.search(r"tried to allocate ([\d.]+ ?[KMGT]i?B)", text, re.I)
    return f"PyTorch tried to allocate {asked[1]}" if asked else ""


def advice(err: BaseException) -> tuple[str, int]:
    """(the message after `error:`, the exit status) for an exception."""
    name = type(err).__name__
    text = str(err).strip() or name
    if disk_full(err):
        where = f" ({err.filename})" if getattr(err, "filename", None) else ""
        if "disk is full" in text:
            return text, 2
        return (
            f"the disk is full{where}: {text}; free some space (or give a folder "
            "on another disk) and run the command again",
            2,
        )
    if name in REFUSALS:
        return text, 2
    raw = text.startswith("[Errno")  # the system's words; ours say what to do
    if isinstance(err, PermissionError):
        hint = "; give a path you may write, or change its permissions" if raw else ""
        return text + hint, 2
    if isinstance(err, FileNotFoundError | NotADirectoryError | IsADirectoryError):
        return text + ("; check the path" if raw else ""), 2
    memory = out_of_memory(err)
    if memory is not None:
        return f"out of memory{f' ({memory})' if memory else ''}; {MEMORY_ADVICE}", 1
    if isinstance(err, OSError):
        return f"{name}: {text}", 1
    return (
        f"{name}: {text} (unexpected; rerun with {TRACEBACK_ENV}=1 to see where, "
        "and report it)",
        1,
    )


def report(prog: str, err: BaseException, file=None) -> int:
    """Print the `error:` line for `err` (and the traceback when asked for);
    returns the exit status."""
    file = file or sys.stderr
    message, status = advice(err)
    if os.environ.get(TRACEBACK_ENV) == "1":
        traceback.print_exception(err, file=file)
    print(f"{prog}: error: {message}", file=file, flush=True)
    return status


def run_main(main: Callable[[], int | None], prog: str) -> int:
    """Run a program's `main()`; any exception ends in one `error:` line, SIGTERM
    and SIGHUP in a `stopped` line once the `finally` blocks have run."""
    try:
        with stopped_by_signals():
            return main() or 0
    except KeyboardInterrupt:
        print(f"{prog}: stopped (Ctrl-C)", file=sys.stderr, flush=True)
        return 130
    except Stopped as stop:
        with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
            print(f"{prog}: stopped ({stop.name})", file=sys.stderr, flush=True)
        return 128 + stop.signum
    except SystemExit:
        raise  # argparse's own errors and explicit exits keep their status
    except BaseException as err:  # noqa: BLE001 (every error ends in a message)
        return report(prog, err)
