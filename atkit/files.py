"""Files written whole or not at all: the one atomic-write helper of the project."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temporary_beside(path: Path) -> tuple[int, str]:
    """A new temporary file beside `path`, named as atomic_open names it."""
    return tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")


@contextlib.contextmanager
def atomic_open(path, mode: str = "wb", *, fsync: bool = True) -> Iterator:
    """Open a temporary file beside `path`; on success it replaces `path`.

    Readers see the old file or the new one, never half of one; after an error (a full
    disk, an exception in the `with` block) `path` is untouched and the temporary file
    is gone. The new file gets ordinary permissions (0o666 minus the umask).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes ('w' or 'wb'), not {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _temporary_beside(path)
    try:
        kwargs = {"encoding": "utf-8"} if mode == "w" else {}
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)


def write_text_atomic(path, text: str, *, fsync: bool = True) -> None:
    """Write `text` to `path` atomically (see `atomic_open`)."""
    with atomic_open(path, "w", fsync=fsync) as f:
        f.write(text)


def check_writable(folder, what: str = "folder") -> Path:
    """`folder` itself if it can be written, else an error naming it, before any work
    is done. A folder that does not exist yet is judged by the nearest one above it
    that does (where it would be created). Read-only mounts count too, for root also.
    """
    folder = Path(folder)
    for f in [folder, *folder.parents]:
        if f.is_symlink() and not f.exists():  # dangling, or a loop
            raise NotADirectoryError(
                f"{what} {folder}: {f} is a symbolic link to {os.readlink(f)}, which "
                "leads to no folder; give a folder (or fix the link)"
            )
    existing = next((f for f in [folder, *folder.parents] if f.exists()), Path("."))
    if not existing.is_dir():
        raise NotADirectoryError(
            f"{what} {folder}: {existing} is a file, not a folder; give a folder"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(
            f"{what} {folder} cannot be written: {existing} is read-only (or not "
            "yours); give a folder that can be written"
        )
    return folder


def probe_writable(folder, what: str = "folder", name: str | None = None) -> None:
    """Create and delete a small file in the existing `folder`: an error naming it
    now rather than when the first real file is due (after an epoch of training).
    With `name`, the file is the temporary one that atomic_open would write `name`
    through (a name too long for the file system shows here too)."""
    try:
        if name is None:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".write-test.", suffix=".tmp")
        else:
            fd, tmp = _temporary_beside(Path(folder) / name)
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):  # a run's clean-up took it
            os.remove(tmp)
    except OSError as err:
        raise PermissionError(
            f"{what} {Path(folder) / (name or '')} cannot be written: {folder} takes "
            f"no new file ({err.strerror or err}); give a folder that can be written"
        ) from err


def writable_folder(folder, what: str = "folder", name: str | None = None) -> Path:
    """`folder`, created if need be and shown to take a new file (see probe_writable),
    or an error naming `what` and the folder: for the paths a run writes at its end,
    checked before it starts."""
    folder = check_writable(folder, what)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PermissionError(
            f"{what} {folder} cannot be created ({err.strerror or err}); give a "
            "folder that can be written"
        ) from err
    probe_writable(folder, what, name)
    return folder


class FolderBusyError(RuntimeError):
    """Another process holds the folder's lock; the message names it."""


class DiskFullError(OSError):
    """A write failed because the disk (or the user's quota) is full; the message
    names the file and says what was kept."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def disk_full(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)


def raise_if_disk_full(err: BaseException, path, what: str, kept: str = "") -> None:
    """Raise DiskFullError naming `path` (and what was `kept`) when `err` is a full
    disk or quota."""
    if disk_full(err):
        kept = f"; {kept}" if kept else ""
        raise DiskFullError(
            err.errno,
            f"the disk is full: {what} {path} could not be written ({err.strerror})"
            f"{kept}; free some space (or give a folder on another disk) and run "
            "again",
        ) from err


class FolderLock:
    """An exclusive lock on a folder, held through an open file (`.lock` inside it).

    The kernel releases the lock when the holder's process ends, however it ends (a
    killed run leaves no stale lock behind); the file itself stays and only records
    who held it last, for the error message. One holder at a time, this process
    included: taking a lock that is held already is an error.
    """

    def __init__(self, folder, what: str = "folder"):
        self.path = Path(folder) / ".lock"
        self.what = what
        self._file = None

    def acquire(self, wait_s: float = 0.0) -> FolderLock:
        """Take the lock; if another holder has it, wait up to `wait_s` seconds for
        it, then raise FolderBusyError naming the holder."""
        import fcntl

        if self._file is not None:
            raise RuntimeError(f"{self.path}: this FolderLock is held already")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            f = open(self.path, "a+")  # noqa: SIM115 (kept open while it is held)
        except OSError as err:
            raise_if_disk_full(err, self.path, f"the lock of a {self.what}")
            raise PermissionError(
                f"{self.path.parent} cannot hold the lock of a {self.what} "
                f"({self.path}: {err.strerror or err}); give a folder that can be "
                "written"
            ) from err
        give_up = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < give_up:
                    time.sleep(min(0.2, max(give_up - time.monotonic(), 0.01)))
                    continue
                f.seek(0)
                holder = f.read().strip() or "another process"
                f.close()
                waited = f" (waited {wait_s:g} s)" if wait_s else ""
                raise FolderBusyError(
                    f"{self.path.parent} is in use by {holder}{waited}: one "
                    f"{self.what} at a time. Wait for it to finish, stop it, or use "
                    "another folder."
                ) from None
        try:
            f.seek(0)
            f.truncate()
            f.write(f"pid {os.getpid()} on {os.uname().nodename}\n")
            f.flush()
        except OSError as err:
            with contextlib.suppress(OSError):  # closing flushes again, and fails
                f.close()
            raise_if_disk_full(err, self.path, f"the lock of a {self.what}")
            raise
        self._file = f
        return self

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the file releases the lock
            self._file = None

    def __enter__(self) -> FolderLock:
        # `with FolderLock(f).acquire(wait_s=...)`: taken already, by that call
        return self if self._file is not None else self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
