"""Files written whole or not at all: the one atomic-write helper of the project, and
the checks every program runs on the paths it is given before any work: an output
that would write over one of its inputs (`check_outputs`), an input that is no
regular file (`input_file`).

A write through a symbolic link goes to the file the link points to; the link stays
(`write_target`)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
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


class PathError(ValueError):
    """A path that cannot serve as what it was given for: an output that would write
    over an input or through a link that leads nowhere, an input that is no regular
    file. The message names the option and says what to do."""


def write_target(path) -> Path:
    """The file a write to `path` changes: `path`, or for a symbolic link the file
    it points to (through any chain of links), so that the write replaces that file
    and the link stays a link. A link that leads back to itself is an OSError
    (ELOOP) naming it."""
    path = Path(path)
    if not os.path.islink(path):  # False too for a name the system cannot look up
        return path
    target = Path(os.path.realpath(path))
    if os.path.islink(target):  # realpath gives up on a loop and returns a link
        raise OSError(
            errno.ELOOP,
            f"{path} is a symbolic link that leads back to itself (a loop); "
            "give another file name (or fix the link)",
            str(path),
        )
    return target


@contextlib.contextmanager
def atomic_open(path, mode: str = "wb", *, fsync: bool = True) -> Iterator:
    """Open a temporary file beside `path`; on success it replaces `path`.

    Readers see the old file or the new one, never half of one; after an error (a full
    disk, an exception in the `with` block) `path` is untouched and the temporary file
    is gone. The new file gets ordinary permissions (0o666 minus the umask). When
    `path` is a symbolic link, the file it points to is replaced, beside that file,
    and the link stays (`write_target`).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes ('w' or 'wb'), not {mode!r}")
    path = write_target(path)
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


KINDS = (  # what a path that is no regular file is, by its mode
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device (such as /dev/null)"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def path_kind(path) -> str | None:
    """What `path` is, in words, when it is not a regular file (links followed):
    "no such file", "a folder", "a named pipe (FIFO)", "a symbolic link to X, which
    does not exist", ...; None for a regular file."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            return f"a symbolic link to {os.readlink(path)}, which does not exist"
        return "no such file"
    except NotADirectoryError:
        above = next((p for p in path.parents if p.is_file()), path.parent)
        return f"no such file ({above} is a file, not a folder)"
    except OSError as err:  # a loop of links, a name too long, no permission
        return f"unreadable ({err.strerror or err})"
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in KINDS if test(mode)), "not a regular file")


def input_file(option: str, path, expected: str) -> Path:
    """`path` if it is a regular file (or a link to one), else a PathError that
    names `option`, says what the path is and asks for `expected` ("README.md",
    "an executed notebook (.ipynb)"): a folder, a FIFO or /dev/null is not called
    missing."""
    kind = path_kind(path)
    if kind is None:
        return Path(path)
    if kind.startswith(("no such file", "unreadable")):
        raise PathError(f"{option} {path}: {kind}; give {expected}")
    if kind.startswith("a symbolic link"):
        raise PathError(f"{option} {path} is {kind}; give {expected} (or fix the link)")
    raise PathError(f"{option} {path} is {kind}, not a file; give {expected}")


def input_folder(option: str, path, expected: str) -> Path:
    """`path` if it is a folder (or a link to one), else a PathError that names
    `option`, says what the path is and asks for `expected`."""
    kind = path_kind(path)
    if kind == "a folder":
        return Path(path)
    if kind is None:
        kind = "a file"
    if kind.startswith(("no such file", "unreadable")):
        kind = kind.replace("no such file", "no such folder", 1)
        raise PathError(f"{option} {path}: {kind}; give {expected}")
    raise PathError(f"{option} {path} is {kind}, not a folder; give {expected}")


def _same_file(a: Path, b: Path) -> bool:
    """Whether `a` and `b` are one file: the same device and inode (a hard link or a
    symbolic link counts), or, while one of them does not exist yet, the same path
    once links are followed."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_outputs(
    outputs, inputs=(), *, writes: str = "its output", suffix: str | None = None
) -> list[Path]:
    """The files that `outputs` ((option, path) pairs) will be written to, links
    followed (see `write_target`), or a PathError naming the option, before any
    work, when an output
    - is the same file as one of `inputs` ((option, path) pairs: what the program
      reads) or as another output, by device and inode, so that a hard link or a
      symbolic link to it is caught too: writing it would destroy what is read;
    - is a notebook (.ipynb): no program writes one, and a notebook holds its
      outputs (hours of a run); `writes` names what would replace it ("the page"),
      `suffix` the kind of file the option takes (".html"), for the advice;
    - is a symbolic link that leads nowhere (its target missing, or a loop).
    An input that does not exist yet (a file the program writes first and reads
    later) counts by its path, links followed."""
    outputs, targets = list(outputs), []
    for option, path in outputs:
        path = Path(path)
        if os.path.islink(path) and not os.path.exists(path):
            kind = path_kind(path)
            if kind is None or not kind.startswith("a symbolic link"):
                kind = "a symbolic link that leads back to itself (a loop)"
            raise PathError(
                f"{option} {path} is {kind}; give another file name (or fix the link)"
            )
        target = write_target(path)
        instead = "another file name"
        if suffix and target.suffix != suffix:
            instead = f"a {suffix} file such as {target.with_suffix(suffix).name}"
        written = [(o, p) for (o, _), p in zip(outputs, targets, strict=False)]
        for other, given in [*inputs, *written]:
            given = Path(given)
            if not _same_file(target, given):
                continue
            how = " (a hard link to it)"
            if os.path.abspath(path) == os.path.abspath(given):
                how = ""
            elif os.path.realpath(path) == os.path.realpath(given):
                how = " (through a symbolic link)"
            role = "an output too" if (other, given) in written else "an input"
            raise PathError(
                f"{option} {path} is the same file as {other} {given}{how}, "
                f"{role} of this program: writing {writes} there would destroy it; "
                f"give {option} {instead}"
            )
        if target.suffix == ".ipynb" and suffix != ".ipynb":
            raise PathError(
                f"{option} {path} is a notebook (.ipynb), and {writes} would replace "
                f"it, cells and outputs; give {option} {instead}"
            )
        targets.append(target)
    return targets


def output_file(option: str, path, example: str) -> Path:
    """The file that `path` names for a program's output (for a symbolic link, the
    file it points to), or a PathError naming `option` and saying what to do, before
    any work: a folder (`example`: a file name to suggest inside it), something that
    is no regular file, a link that leads nowhere, a folder that does not exist (not
    created here: the message says mkdir -p), a read-only file, or a place that
    takes no new file (a read-only mount, /proc, a name too long)."""
    path = Path(path)
    if path.is_symlink():
        if not path.exists():
            raise PathError(
                f"{option} {path} is a symbolic link to {os.readlink(path)}, which "
                "does not exist; give another file name (or fix the link)"
            )
        path = write_target(path)
    if path.is_dir():
        raise PathError(
            f"{option} {path} is a folder; give a file name, such as {path / example}"
        )
    kind = path_kind(path)
    if path.exists() and kind is not None:
        raise PathError(
            f"{option} {path} is {kind}, not a regular file; give another file name"
        )
    folder = path.parent
    if not folder.exists():
        raise PathError(
            f"{option} {path}: the folder {folder} does not exist; create it "
            f"(mkdir -p {folder}) or give a file in a folder that exists"
        )
    if not folder.is_dir():
        raise PathError(
            f"{option} {path}: {folder} is a file, not a folder; give another path"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise PathError(
            f"{option} {path} is read-only; give another file name, or make it writable"
        )
    try:
        probe_writable(folder, option, path.name)
    except PermissionError as err:
        raise PathError(str(err)) from err
    return path


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
