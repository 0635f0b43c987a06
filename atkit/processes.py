"""Child processes that end with their parent, however the parent ends.

A program here that starts another process (load_check's spinners and the command it
times, torchrun and its workers, a tool run from the notebook, a probe in a fresh
interpreter, npm and node) must not leave it running once it stops: by Ctrl-C, by
SIGTERM (`kill`, `timeout`), by SIGHUP (its terminal closed) or by SIGKILL, which it
cannot catch. Two things see to it:

- `end_with_parent()`, the `preexec_fn` of every `subprocess` call that starts a child:
  the child asks Linux (prctl PR_SET_PDEATHSIG) for a signal, SIGTERM unless told
  otherwise, the moment its parent ends, even by SIGKILL; if the parent ended before
  the request, the child stops itself at once. Linux sends it when the *thread* that
  started the child ends, so children are started from the main thread (every program
  here does). A child's own children do not inherit the request: torchrun's workers
  make it themselves when they start (`end_with_parent_now`, in launch.worker_code).
  Elsewhere than Linux both do nothing.
- `tools.errors.run_main` turns SIGTERM and SIGHUP into an exception, as Python turns
  Ctrl-C into KeyboardInterrupt, so that a program's `finally` blocks and the clean-up
  of `subprocess.run` stop its children in order before it ends.

A Jupyter kernel (tools.thread_probe) watches its parent itself: ipykernel ends it
within a second of its parent's end (JPY_PARENT_PID, set by jupyter_client).
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # linux/prctl.h


@functools.cache
def _prctl():
    """libc's prctl, looked up once, in the parent (a preexec_fn should do as little
    as it can between fork and exec); None where there is none (not Linux). The
    running interpreter's own symbols hold it: no search for libc (which would start
    a process of its own)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
    prctl.restype = ctypes.c_int
    return prctl


def end_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess: the child receives `sig` when this process
    ends, however it ends. None where Linux's prctl is missing (no preexec_fn: the
    child starts faster, and the program's own clean-up still stops it)."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent ended before the request
            os.kill(os.getpid(), sig)

    return preexec


def end_with_parent_now(sig: int = signal.SIGKILL) -> None:
    """The same request, made by a child that has started already (a torchrun
    worker, whose parent is torchrun): `sig` when the parent ends; at once if it has
    (the child was handed to init, pid 1)."""
    prctl = _prctl()
    if prctl is None:
        return
    prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() == 1:
        os.kill(os.getpid(), sig)


def stop(proc, grace_s: float = 5.0) -> None:
    """End the child `proc` (a subprocess.Popen): SIGTERM, then SIGKILL if it has not
    ended within `grace_s` seconds; waits for it either way."""
    import subprocess

    if proc.poll() is not None:
        return
    try:
        proc.terminate()
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    except ProcessLookupError:
        proc.wait()
