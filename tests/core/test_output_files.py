"""Where `nmt translate -o` writes (nmt.io.resolve_output, shared by the line path and documents): a regular file
or a new path is replaced atomically, a symlink keeps its link and its target is replaced, a FIFO or a device is
written through, -o equal to -i is refused unless --force; and the umask is read without being changed."""

from __future__ import annotations

import os
import resource
import stat
import threading
import time
from pathlib import Path

import pytest

from nmt import io as nmt_io
from nmt.io import atomic_output, current_umask, output_path, resolve_output
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.paths import DEMO_MODEL

CHECKPOINT = DEMO_MODEL
TEXT = "the red car\nforty-two\n"
DOC = "# The red car\n\nforty-two\n"


def translate(*args: str | Path):
    return run_cli("translate", "--checkpoint", CHECKPOINT, "--no-progress", *args)


@pytest.fixture
def text_in(tmp_path) -> Path:
    src = tmp_path / "in.txt"
    src.write_text(TEXT, encoding="utf-8")
    return src


@pytest.fixture
def doc_in(tmp_path) -> Path:
    src = tmp_path / "doc.md"
    src.write_text(DOC, encoding="utf-8")
    return src


@pytest.fixture(scope="module")
def expected(tmp_path_factory) -> dict[str, str]:
    """What each input translates to, written to an ordinary new file."""
    folder = tmp_path_factory.mktemp("expected")
    out = {}
    for name, text in (("in.txt", TEXT), ("doc.md", DOC)):
        (folder / name).write_text(text, encoding="utf-8")
        result = translate("-i", folder / name, "-o", folder / f"out-{name}")
        assert result.exit_code == 0, result.stderr
        out[name] = (folder / f"out-{name}").read_text(encoding="utf-8")
    assert out["in.txt"].count("\n") == 2 and out["in.txt"] != TEXT
    return out


def read_fifo(fifo: Path, into: list[bytes]) -> threading.Thread:
    def read() -> None:
        with open(fifo, "rb") as f:
            into.append(f.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("kind", ["text", "doc"])
def test_a_fifo_is_written_through_not_replaced(tmp_path, text_in, doc_in, expected, kind):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = read_fifo(fifo, got)
    result = translate("-i", text_in if kind == "text" else doc_in, "-o", fifo)
    reader.join(timeout=30)
    assert result.exit_code == 0, result.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)  # still the FIFO, not a regular file put in its place
    assert got == [expected["in.txt" if kind == "text" else "doc.md"].encode("utf-8")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.md", "fifo", "in.txt"]  # no temp file left


@pytest.mark.parametrize("kind", ["text", "doc"])
def test_dev_null_is_written_through(text_in, doc_in, kind):
    before = os.stat("/dev/null")
    result = translate("-i", text_in if kind == "text" else doc_in, "-o", "/dev/null")
    assert result.exit_code == 0, result.stderr
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


def test_a_descriptor_path_writes_to_the_descriptor_at_its_offset(tmp_path):
    """/dev/fd/N (like /dev/stdout) is written through a copy of the descriptor, so its offset is shared: what
    was written before is kept and later writes follow, as with any write to stdout redirected to a file."""
    log = tmp_path / "log"
    with open(log, "w", encoding="utf-8") as f:
        f.write("before\n")
        f.flush()
        with atomic_output(f"/dev/fd/{f.fileno()}", text=True) as out:
            out.write("translation\n")
        f.write("after\n")
    assert log.read_text(encoding="utf-8") == "before\ntranslation\nafter\n"
    assert resolve_output("/dev/stdout").through


@pytest.mark.parametrize("kind", ["text", "doc"])
def test_a_symlink_keeps_its_link_and_its_target_is_replaced(tmp_path, text_in, doc_in, expected, kind):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "target"
    target.write_text("old\n", encoding="utf-8")
    link = tmp_path / "link"
    link.symlink_to(Path("real") / "target")
    result = translate("-i", text_in if kind == "text" else doc_in, "-o", link)
    assert result.exit_code == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == str(Path("real") / "target")
    assert target.read_text(encoding="utf-8") == expected["in.txt" if kind == "text" else "doc.md"]
    assert [p.name for p in (tmp_path / "real").iterdir()] == ["target"]  # the temp file was beside the target


@pytest.mark.parametrize("kind", ["text", "doc"])
def test_output_equal_to_input_is_refused_even_through_a_link(tmp_path, text_in, doc_in, kind):
    src = text_in if kind == "text" else doc_in
    link = tmp_path / "same"
    link.symlink_to(src.name)
    for out in (src, link, tmp_path / "." / src.name):
        assert_one_line_error(translate("-i", src, "-o", out), "is the input file", "--force")
    assert src.read_text(encoding="utf-8") == (TEXT if kind == "text" else DOC)


@pytest.mark.parametrize("kind", ["text", "doc"])
def test_force_replaces_the_input_with_its_translation(tmp_path, text_in, doc_in, expected, kind):
    src = text_in if kind == "text" else doc_in
    inode = src.stat().st_ino
    result = translate("-i", src, "-o", src, "--force")
    assert result.exit_code == 0, result.stderr
    assert src.read_text(encoding="utf-8") == expected["in.txt" if kind == "text" else "doc.md"]
    assert src.stat().st_ino != inode  # a temp file renamed over it, never written in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.md", "in.txt"]


def test_alignment_equal_to_input_is_refused(text_in, tmp_path):
    assert_one_line_error(translate("-i", text_in, "-o", tmp_path / "out", "--alignment", text_in),
                          "--alignment", "is the input file")


@pytest.mark.parametrize("kind", ["text", "doc"])
def test_a_path_under_a_regular_file_says_which_is_not_a_directory(tmp_path, text_in, doc_in, kind):
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    src = text_in if kind == "text" else doc_in
    line = assert_one_line_error(translate("-i", src, "-o", tmp_path / "afile" / "deeper" / "out.md"))
    assert line == f"error: output {tmp_path / 'afile' / 'deeper' / 'out.md'}: {tmp_path / 'afile'} is not a directory"


def test_help_explains_force_and_how_outputs_are_written():
    text = " ".join(run_cli("translate", "--help").stdout.split())
    for phrase in ("--force", "FIFO", "/dev/null", "symlink", "atomically"):
        assert phrase in text, phrase


def test_block_devices_and_directories_are_refused(tmp_path):
    with pytest.raises(Exception, match="is a directory"):
        resolve_output(tmp_path)
    block = next((Path("/dev") / n for n in os.listdir("/dev") if stat.S_ISBLK(os.stat(f"/dev/{n}").st_mode)), None)
    if block is not None:
        with pytest.raises(Exception, match="block device"):
            resolve_output(block)


def test_output_path_removes_its_temp_file_on_error_and_keeps_the_old_file(tmp_path):
    out = tmp_path / "out.md"
    out.write_text("old", encoding="utf-8")
    with pytest.raises(RuntimeError), output_path(out) as tmp:
        tmp.write_text("half", encoding="utf-8")
        raise RuntimeError("the writer failed")
    assert out.read_text(encoding="utf-8") == "old" and [p.name for p in tmp_path.iterdir()] == ["out.md"]


# ---------------------------------------------------------------- the umask


def test_new_outputs_get_the_umask_mode_without_the_umask_being_set(tmp_path, monkeypatch):
    def no_setting(mask: int) -> int:
        raise AssertionError("os.umask called: it changes the umask of every thread")

    old = os.umask(0o027)
    try:
        monkeypatch.setattr(os, "umask", no_setting)
        assert current_umask() == 0o027
        with atomic_output(tmp_path / "out.txt", text=True) as f:
            f.write("x\n")
    finally:
        monkeypatch.undo()
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o640


def test_the_umask_never_changes_while_another_thread_reads_it(tmp_path):
    """A thread reading the umask (as a file created there would get it) sees the same value throughout while
    this one writes outputs: before, as_umask_allows set it to 0 and back."""
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.add(current_umask())

    (tmp_path / "f").touch()
    old = os.umask(0o022)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        for _ in range(200):
            nmt_io.as_umask_allows(tmp_path / "f")
    finally:
        done.set()
        watcher.join()
        os.umask(old)
    assert seen == {0o022}


# ---------------------------------------------------------------- a config that does not fit its weights


def test_a_checkpoint_asking_for_d_model_2_20_is_one_line_before_any_allocation(tmp_path):
    from nmt import checkpoint

    bad = tmp_path / "bad.pt"
    ckpt = checkpoint.load(CHECKPOINT)
    ckpt["config"]["model"]["d_model"] = 2**20  # 400 x 2^20 floats per embedding: 1.6 GiB, and more per layer
    ckpt.save(bad)
    (tmp_path / "in.txt").write_text(TEXT, encoding="utf-8")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    started = time.perf_counter()
    result = run_cli("translate", "--checkpoint", bad, "-i", tmp_path / "in.txt")
    assert_one_line_error(result, f"checkpoint {bad}:", "d_model=1048576", "does not fit its weights")
    assert time.perf_counter() - started < 60
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 512 * 1024  # no 1.6 GiB embedding made
