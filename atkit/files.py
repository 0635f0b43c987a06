"""Files written whole or not at all: the one atomic-write helper of the project."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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


def write_bytes_atomic(path, data: bytes, *, fsync: bool = True) -> None:
    """Write `data` to `path` atomically (see `atomic_open`)."""
    with atomic_open(path, "wb", fsync=fsync) as f:
        f.write(data)
