"""Files sbpc writes (an optimized pipeline, a run record, a report, a formatted file) and reads back.

A write is atomic: a reader sees the old file or the new one, never half of one. It keeps the file's mode,
byte order mark, symbolic and hard links, and never touches the process umask (which threads share). It
sits below every stage, so the language, the run records and the command line write files the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import OptionError

_BOM = "\ufeff"


class WriteBackError(OptionError, ValueError):
    """A file cannot be written where it should go (the optimized pipeline, a record, a report); the message
    says why and what to do."""


def temporary(path: Path) -> Path:
    """The one temporary name a write to `path` uses (atomic_write): a write killed midway leaves it, and
    reading the file finds it by name (a random name would leave strays nobody knows to look for)."""
    return path.with_name(f".{path.name}.sbpc-tmp")


def interrupted_write(path: str) -> Path | None:
    """The whole copy that an in-place write (a file with other hard links) left when it was killed: the
    file itself may then be torn. A copy beside a file with one link is a rename that never happened:
    the file is whole, and the next write reuses the name."""
    real = Path(os.path.realpath(path))
    copy = temporary(real)
    try:
        return copy if copy.is_file() and real.is_file() and real.stat().st_nlink > 1 else None
    except OSError:  # a name too long for a copy beside it, say: reading the file will say what is wrong
        return None


def finish_write(path: str) -> None:
    """Complete the in-place write `interrupted_write` found: the whole copy's bytes into the file (every hard
    link sees them), then the copy removed."""
    real = Path(os.path.realpath(path))
    copy = temporary(real)
    _write_synced(real, copy.read_bytes())
    copy.unlink()


def atomic_write(path: Path, text: str, *, bom: bool = False, mode_from: Path | None = None) -> None:
    """Temporary file, fsync, rename: a reader sees the old file or the new one, never half of one.

    Only a regular file (or a new name) is written: a FIFO, a device or a folder at the path is refused,
    never replaced. A symbolic link is written through to its target (the link stays a link). A file with
    other hard links is rewritten in place, so every name keeps seeing it; the complete new text is
    written to the temporary file first and removed only once the file holds it, so a write killed
    midway leaves that copy behind, and reading the file reports it. The file keeps its mode; a new one
    takes the mode of `mode_from` (the source of a pipeline written elsewhere), else what open() gives a
    new file under the umask (not 0600: a report is for sharing), which the kernel applies as it creates it.
    """
    path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file():
        raise WriteBackError(f"{path} is not a regular file (a folder, FIFO or device): give a file to write")
    data = ((_BOM if bom else "") + text).encode("utf-8", "surrogatepass")
    like = path if path.exists() else mode_from
    kept = like.stat().st_mode & 0o7777 if like is not None and like.exists() else None
    tmp = temporary(path)
    _write_synced(tmp, data, create=0o600 if kept is not None else 0o666)
    try:
        if path.is_file() and path.stat().st_nlink > 1:
            _write_synced(path, data)
            tmp.unlink()
            return
        if kept is not None:
            os.chmod(tmp, kept)
        os.replace(tmp, path)
    except BaseException:
        if not (path.is_file() and path.stat().st_nlink > 1):  # in place, the copy may be all that is whole
            tmp.unlink(missing_ok=True)
        raise


def _write_synced(path: Path, data: bytes, *, create: int | None = None) -> None:
    """`data` into `path` and onto the disk. `create`: the mode to make it with (the umask applies), a new
    file in place of any left by a killed write (whose mode would stick), never through a symbolic link."""
    if create is not None:
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), create)
    else:
        fd = os.open(path, os.O_WRONLY)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.truncate()
        f.flush()
        os.fsync(f.fileno())


def read_current(path: Path) -> tuple[str | None, bool]:
    """The file's text as the compiler reads it (byte order mark stripped, line endings kept), and whether
    it had a byte order mark; (None, False) when it cannot be read."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None, False
    bom = raw.startswith(_BOM.encode())
    try:
        return raw.decode("utf-8-sig" if bom else "utf-8"), bom
    except UnicodeDecodeError:
        return None, bom
