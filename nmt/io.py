"""Files in and out. Reading: `read_lines`, a UTF-8 file's lines with one-line errors naming the file and line (what
`nmt score` and glossaries read). Writing, atomically: readers (and a run killed mid-write) see the old file or the
new one, never half.

The one owner of temp-file-then-rename in nmt: checkpoints, config.yaml, meta.json, translations,
alignments and PNGs all go through `atomic_output`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from nmt.errors import NmtError, first_line

TMP_SUFFIX = ".tmp"  # temp files are `.<name>.<random>.tmp` beside their target


def fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def as_umask_allows(path: str | Path) -> None:
    """The mode a new file gets under the umask (mkstemp's 0600 is for secrets, not outputs a team shares)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


@contextlib.contextmanager
def atomic_output(path: str | Path, *, text: bool = False) -> Iterator[IO[Any]]:
    """A file to write `path` through: a temp file in the same dir, fsynced and renamed over `path`
    only when the block ends without an error (else removed, and the error passes through: the block may
    be a whole translation, so an error in it need not be the file's)."""
    path = Path(path)
    if path.is_dir():
        raise NmtError(f"output {path} is a directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    try:
        as_umask_allows(tmp)
        options: dict[str, Any] = {"encoding": "utf-8", "newline": "\n"} if text else {}
        with os.fdopen(fd, "w" if text else "wb", **options) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Atomically write `path` with `write(binary_file)`; a full disk is a one-line NmtError."""
    try:
        with atomic_output(path) as f:
            write(f)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise NmtError(f"no space left on device while writing {path}; previous files are intact") from None
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def read_lines(path_or_stream: str | os.PathLike[str] | IO[Any]) -> list[str]:
    """Lines of a UTF-8 file or stream ("-" = stdin), without their "\\n" / "\\r\\n" (nothing else stripped,
    except a leading byte-order mark). Missing file or invalid UTF-8 -> NmtError naming file and line."""
    if isinstance(path_or_stream, (str, os.PathLike)) and str(path_or_stream) != "-":
        name = str(path_or_stream)
        try:
            with open(name, "rb") as f:
                data: bytes | str = f.read()
        except FileNotFoundError:
            raise NmtError(f"{name}: no such file") from None
        except IsADirectoryError:
            raise NmtError(f"{name}: is a directory, not a text file") from None
        except OSError as e:
            raise NmtError(f"{name}: cannot read ({e.strerror or first_line(e)})") from None
    else:
        stream = sys.stdin if str(path_or_stream) == "-" else path_or_stream
        name = getattr(stream, "name", "<stream>")
        source = getattr(stream, "buffer", stream)  # bytes when possible, to report the bad line
        try:
            data = source.read()
        except UnicodeDecodeError as e:
            raise NmtError(f"{name}: invalid UTF-8 ({e.reason})") from None
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            line = data.count(b"\n", 0, e.start) + 1
            raise NmtError(f"{name}: line {line}: invalid UTF-8 ({e.reason} at byte {e.start})") from None
    else:
        text = data
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text:
        return []
    # split("\n"), not splitlines(): U+2028, form feeds etc. are content, not line ends.
    lines = text.split("\n")
    last = lines.pop()  # "" when the text ends with a newline: that ends the last line, not a new one
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    if last:
        lines.append(last)  # unterminated last line: no "\r\n" to strip
    return lines
