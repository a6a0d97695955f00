"""Files in and out. Reading: `read_lines`, a UTF-8 file's lines with one-line errors naming the file and line (what
`nmt score` and glossaries read). Writing, atomically: readers (and a run killed mid-write) see the old file or the
new one, never half.

The one owner of temp-file-then-rename in nmt: checkpoints, config.yaml, meta.json, translations,
alignments and PNGs all go through `atomic_output` (a stream) or `output_path` (a path, for writers that take
one). Both share one rule for where the bytes go (`resolve_output`): a new path or a regular file is replaced
atomically; a symlink to one keeps the link and replaces the file it points to; a FIFO, a character device
(/dev/null) or an open descriptor (/dev/stdout, /dev/fd/N) is opened and written through, since replacing
it would swap the node, not write to it; a directory, block device or socket is refused in one line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

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


def _umask_now_by_setting() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# Read once, while importing (before nmt starts threads): the fallback where /proc cannot tell the umask.
_UMASK_AT_IMPORT = _umask_now_by_setting()


def current_umask() -> int:
    """The process's umask, read without changing it: os.umask can only read by setting, and the umask is
    process-wide, so setting it on one thread would give files another thread creates meanwhile mode 0666."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return _UMASK_AT_IMPORT


def as_umask_allows(path: str | Path) -> None:
    """The mode a new file gets under the umask (mkstemp's 0600 is for secrets, not outputs a team shares)."""
    os.chmod(path, 0o666 & ~current_umask())


class Target(NamedTuple):
    """Where an output goes (`resolve_output`)."""

    path: Path  # the file to replace (links followed), or the path to write through
    through: bool  # write through `path` (a FIFO, a device, a descriptor), not replace it
    fd: int | None = None  # this process's open descriptor that `path` names (/dev/stdout: 1), to write to


def _descriptor(path: Path) -> tuple[bool, int | None]:
    """Whether `path` reaches, through its links, an open file descriptor (/dev/stdout, /dev/fd/N,
    /proc/self/fd/N), and its number when it is this process's. Such a path names whatever the descriptor
    has open: replacing it reaches nothing, and opening it anew does not share the descriptor's offset (a
    shell's `> log` would be overwritten from the start), so nmt writes to a copy of the descriptor."""
    path = Path(os.path.abspath(path))
    for _ in range(40):  # the kernel's own limit on links followed
        folder = Path(os.path.realpath(path.parent))
        if folder == Path(f"/proc/{os.getpid()}/fd") and path.name.isdigit():
            return True, int(path.name)
        if folder.parts[1:2] == ("proc",):
            return True, None
        if not path.is_symlink():
            return False, None
        path = Path(os.path.normpath(path.parent / os.readlink(path)))
    return False, None


def resolve_output(path: str | Path) -> Target:
    """Where to write the output `path`, and how: see the module's docstring. Changes nothing; a path that
    cannot be an output is a one-line NmtError."""
    path = Path(path)
    try:
        mode = path.stat().st_mode  # follows links
    except (FileNotFoundError, NotADirectoryError):  # new, or under a file (_check_parents names it)
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise NmtError(f"output {path} is a directory")
    if mode is not None and (stat.S_ISBLK(mode) or stat.S_ISSOCK(mode)):
        kind = "a block device (writing would overwrite the disk)" if stat.S_ISBLK(mode) else "a socket"
        raise NmtError(f"output {path} is {kind}: give a file, a FIFO or a character device such as /dev/null")
    if mode is not None:
        descriptor, fd = _descriptor(path)
        if descriptor or not stat.S_ISREG(mode):
            return Target(path, True, fd)
    _check_parents(path)
    return Target(Path(os.path.realpath(path)), False)


def _check_parents(path: Path) -> None:
    """The nearest existing folder above `path` must be a folder (else mkdir's 'File exists: afile')."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise NmtError(f"output {path}: {parent} is not a directory")
            return


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether `a` and `b` are one file (same device and inode, links followed); False if either is missing."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_outputs(outputs: dict[str, Path | None], input: Path | None, *, force: bool = False) -> None:
    """Refuse, before any work, outputs (option -> path) that cannot be written, or that are the input file
    (unless `force`: then the input is read whole or through its open descriptor while the output goes to a
    temp file that replaces it at the end, so it is still safe)."""
    for option, path in outputs.items():
        if path is None:
            continue
        resolve_output(path)
        if input is not None and not force and same_file(path, input):
            raise NmtError(f"{option} {path} is the input file {input}: it would be overwritten "
                           f"(give another file, or --force to replace the input with its translation)")


def _temp_beside(target: Path) -> tuple[int, Path]:
    """A new temp file in `target`'s folder (made if missing), with the mode the umask gives: (fd, path)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TMP_SUFFIX, dir=target.parent)
    try:
        as_umask_allows(name)
    except BaseException:
        os.close(fd)
        Path(name).unlink(missing_ok=True)
        raise
    return fd, Path(name)


@contextlib.contextmanager
def atomic_output(path: str | Path, *, text: bool = False) -> Iterator[IO[Any]]:
    """A file to write `path` through: a temp file in the same dir, fsynced and renamed over `path`
    only when the block ends without an error (else removed, and the error passes through: the block may
    be a whole translation, so an error in it need not be the file's). A FIFO or device is written
    through instead (`resolve_output`): what the block wrote before an error stays written."""
    options: dict[str, Any] = {"encoding": "utf-8", "newline": "\n"} if text else {}
    target, through, descriptor = resolve_output(path)
    if through:  # never truncated: a file behind another process's descriptor keeps what it holds
        file = os.fdopen(os.dup(descriptor), "w" if text else "wb", **options) if descriptor is not None else \
            open(target, "a" if text else "ab", **options)
        with file as f:
            yield f
        return
    fd, tmp = _temp_beside(target)
    try:
        with os.fdopen(fd, "w" if text else "wb", **options) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        fsync_dir(target.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def output_path(path: str | Path) -> Iterator[Path]:
    """A path to write `path`'s content into, for writers that take a path: `atomic_output`'s rule. A temp
    file beside the target, renamed over it when the block succeeds, removed whatever happens otherwise; for
    a FIFO or device, a temp file in a private folder whose bytes are written through on success."""
    target, through, _ = resolve_output(path)
    if through:
        with tempfile.TemporaryDirectory(prefix="nmt-") as folder:
            tmp = Path(folder) / target.name
            tmp.touch()
            yield tmp
            with atomic_output(target) as out, open(tmp, "rb") as f:
                shutil.copyfileobj(f, out)
        return
    fd, tmp = _temp_beside(target)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, target)
        fsync_dir(target.parent)
    finally:
        tmp.unlink(missing_ok=True)


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
