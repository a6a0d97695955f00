"""The command line as a user runs it: subprocesses of `python -m nmt` where the process itself is what is tested
(start-up, help, completion, the terminal, a pipe held open), its refusals in-process through the same entry point
(nmt.cli.main.main: tests.helpers.cli.run_cli), a child's torch import costing seconds each. The whole pipeline end to
end: tests/test_end_to_end.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.cli import USAGE_ERROR, assert_one_line_error, nmt_env, nmt_process, run_cli


def test_help_explains_every_command():
    top = nmt_process("--help")
    assert top.returncode == 0
    for command in ("prepare", "train", "translate", "score", "average", "plot", "info"):
        assert command in top.stdout.decode()
        sub = nmt_process(command, "--help")
        assert sub.returncode == 0 and "--" in sub.stdout.decode()


def test_shell_completion_completes_commands_and_options():
    commands = nmt_process(_NMT_COMPLETE="complete_bash", COMP_WORDS="nmt tra", COMP_CWORD="1")
    assert commands.returncode == 0 and commands.stdout.decode().split() == ["train", "translate"]
    options = nmt_process(_NMT_COMPLETE="complete_bash", COMP_WORDS="nmt translate --be", COMP_CWORD="2")
    assert options.stdout.decode().split() == ["--beam"]
    # the shell named, not detected from the parent processes (none is a shell when the suite runs detached)
    script = nmt_process("--show-completion", "bash", _TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1")
    assert script.returncode == 0 and "complete -o default -F _nmt_completion nmt" in script.stdout.decode()
    assert "--install-completion" in nmt_process("--help").stdout.decode()


def test_config_errors_are_one_line(tmp_path):
    assert_one_line_error(run_cli("train", "--set", "model.d_modle=3"), "model.d_modle", "did you mean 'd_model'")
    assert_one_line_error(run_cli("train", "--config", str(tmp_path / "none.yaml")), "config file not found")
    assert_one_line_error(run_cli("train", "--set", "train.lr=fast"), "train.lr")


def test_prepare_errors_are_one_line(tmp_path):
    (tmp_path / "a.en").write_text("one\ntwo\nthree\n")
    (tmp_path / "a.de").write_text("eins\nzwei\n")
    out = str(tmp_path / "data")
    assert_one_line_error(run_cli("prepare", "--train", str(tmp_path / "a"), "-o", out), "3", "2")
    assert_one_line_error(run_cli("prepare", "--train", str(tmp_path / "missing"), "-o", out), "missing")
    (tmp_path / "b.en").write_bytes(b"fine\n\xff\xfe bad\n")
    (tmp_path / "b.de").write_text("gut\nschlecht\n")
    assert_one_line_error(run_cli("prepare", "--train", str(tmp_path / "b"), "-o", out), "b.en", "2")
    assert_one_line_error(run_cli("prepare", "-o", out), "no training data")
    assert not (tmp_path / "data" / "meta.json").exists()


def test_translate_and_score_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x00" * 100)
    assert_one_line_error(run_cli("translate", "--checkpoint", str(bad), input=b"x\n"), str(bad))
    (tmp_path / "h").write_text("a\nb\n")
    (tmp_path / "r").write_text("a\n")
    assert_one_line_error(run_cli("score", "--ref", str(tmp_path / "r"), "--hyp", str(tmp_path / "h")), "2", "1")
    assert_one_line_error(run_cli("train", "--set", f"data.dir={tmp_path / 'nodata'}"), "nmt prepare")


@pytest.mark.parametrize("args, needles", [
    (["translate", "--beam", "many"], ["--beam", "nmt translate --help"]),
    (["trian"], ["No such command", "train"]),
    (["score", "--bogus"], ["--bogus"]),
])
def test_option_parser_mistakes_are_one_line(args, needles):
    result = run_cli(*args, input=b"")
    assert_one_line_error(result, *needles, exit_code=USAGE_ERROR)
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("entry", [["-m", "nmt"], ["-c", "from nmt.cli.main import main; main()"]])
def test_python_dash_m_and_console_entry(entry):
    proc = nmt_process("score", "--help", entry=entry, timeout=60)
    assert proc.returncode == 0 and b"--ref" in proc.stdout


def test_translate_help_says_what_the_output_is():
    env_help = nmt_process("translate", "--help", timeout=120, COLUMNS="250")
    text = " ".join(env_help.stdout.decode().split())
    assert "needs nmt[plot]" in text  # rich markup used to eat "[plot]"
    assert "'LINE_NO<TAB>text<TAB>score'" in text and "|||" not in text  # the real n-best format
    assert "n-best lines included" in text  # --scores with --nbest


def _line_within(stream, seconds: float) -> bytes:
    import select

    ready, _, _ = select.select([stream], [], [], seconds)
    assert ready, f"no output line within {seconds} s"
    return stream.readline()


def test_a_line_is_answered_while_the_pipe_stays_open(demo_run):
    """Interactive use: each line is translated as soon as it arrives when nothing else is waiting, instead
    of waiting for a 2,000-line chunk or the end of the input."""
    import time

    proc = subprocess.Popen([sys.executable, "-m", "nmt", "translate", "--checkpoint", str(demo_run / "averaged.pt"),
                             "--no-progress"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=nmt_env())
    try:
        proc.stdin.write(b"forty-two\n")
        proc.stdin.flush()
        first = _line_within(proc.stdout, 120)  # start-up included
        started = time.monotonic()
        proc.stdin.write(b"three hundred\n")
        proc.stdin.flush()
        second = _line_within(proc.stdout, 2.0)
        answered = time.monotonic() - started
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0 and proc.stdout.read() == b""
    finally:
        proc.kill()
    assert first.strip() and second.strip() and answered < 2.0


def test_prepare_shows_a_bar_per_stage_on_stderr_when_asked(tmp_path, demo_raw):
    args = ["prepare", "--train", demo_raw["train"], "--valid", demo_raw["valid"], "--set", "data.vocab_size=400",
            "--num-proc", "2"]
    shown = nmt_process(*args, "-o", str(tmp_path / "shown"), "--progress", COLUMNS="200")
    assert shown.returncode == 0, shown.stderr.decode()
    err = shown.stderr.decode()
    for stage in ("reading train", "2,000 kept", "SentencePiece en+de: trained", "4,000/4,000 sentences",
                  "encoding train", "2,000/2,000 pairs", "encoding valid", "pairs/s"):
        assert stage in err, stage
    assert "%|" not in err and "Map" not in err  # no tqdm bars from `datasets`
    quiet = nmt_process(*args, "-o", str(tmp_path / "quiet"))  # stderr is not a terminal here: no bars by default
    assert quiet.returncode == 0 and "pairs/s" not in quiet.stderr.decode() and "━" not in quiet.stderr.decode()
    assert shown.stdout == quiet.stdout == b""
    for split in ("train", "valid"):  # the bars change nothing in what is written
        assert [p.read_bytes() for p in sorted((tmp_path / "shown" / split).glob("*.arrow"))] == \
               [p.read_bytes() for p in sorted((tmp_path / "quiet" / split).glob("*.arrow"))]


def test_translate_bar_counts_lines_of_a_file_on_a_terminal(tmp_path, demo_run):
    """On a terminal the bar shows done/total lines of an input file; stdout carries translations only."""
    import pty
    import select

    lines = (tmp_path / "in.en").write_text("forty-two\nthree hundred\nseven\n" * 100) and tmp_path / "in.en"
    main, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "nmt", "translate", "--checkpoint", str(demo_run / "averaged.pt"),
                             "-i", str(lines)], stdout=subprocess.PIPE, stderr=secondary,
                            env=nmt_env(COLUMNS="150", TERM="xterm"))
    os.close(secondary)
    err = b""
    try:
        out = proc.stdout.read()
        while select.select([main], [], [], 5)[0]:
            try:
                chunk = os.read(main, 1 << 16)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            err += chunk
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        os.close(main)
    text = err.decode(errors="replace")
    assert "translating" in text and "/300 lines" in text and "lines/s" in text
    assert "translated 300 lines in" in text
    assert out.count(b"\n") == 300 and b"lines" not in out


def test_bar_rate_and_time_left_use_the_average_speed():
    """Output that arrives a chunk at a time must not read as a burst: rate and ETA from the whole run."""
    import io

    from rich.console import Console

    from nmt.log import progress_bar

    now = [0.0]
    bar = progress_bar("lines", enabled=True)
    bar.get_time = lambda: now[0]
    task = bar.add_task("translating", total=400, note="")
    now[0] = 10.0
    bar.update(task, completed=100)
    shown = io.StringIO()
    Console(file=shown, width=200).print(bar.make_tasks_table(bar.tasks))
    assert "100/400 lines" in shown.getvalue() and "10 lines/s" in shown.getvalue()
    assert "0:00:30" in shown.getvalue()  # 300 lines left at 10 lines/s
