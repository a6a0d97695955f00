"""The READMEs' commands are true: every `nmt` command line in a ```bash block of README.md and README.zh-CN.md
names a command that exists and only options that command has (read from the Typer app in-process, not from 60
`--help` subprocesses), every `make TARGET` is a rule of the Makefile, every configs/ file named exists, the two
READMEs link to each other, and every code name and config key of README.zh-CN.md's paper-to-code table exists."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from nmt.cli.main import app

ROOT = Path(__file__).resolve().parent.parent
READMES = ("README.md", "README.zh-CN.md")
# fewest `nmt` command lines the parser must find in each README: a parser that finds nothing fails
MIN_COMMANDS = {"README.md": 20, "README.zh-CN.md": 8}

_FENCE = re.compile(r"^\s*```(\S*)\s*$")
# where `nmt` starts a command: at the line's start (after an optional prompt), after a pipe, or as `-m nmt`
_NMT_AT = re.compile(r"(?:^(?:\$\s+)?|\|\s*|\s-m\s+)nmt\s")
_SHELL_OPERATORS = {"|", "||", "&&", ";", "&"}
_REDIRECTION = re.compile(r"^\d*(?:<|>)")
_SHORT_OPTION = re.compile(r"^-[A-Za-z]$")


@dataclass(frozen=True)
class CommandLine:
    readme: str
    line: int  # 1-based, the first physical line
    text: str  # continuation lines joined, comment removed
    words: tuple[str, ...]  # what follows `nmt`, up to a pipe or redirection

    def __str__(self) -> str:
        return f"{self.readme}:{self.line}: {self.text}"


def bash_lines(text: str) -> list[tuple[int, str]]:
    """(line number, logical line) of every ```bash block: lines ending in a backslash joined to the next,
    shell comments removed, comment-only and empty lines left out."""
    out: list[tuple[int, str]] = []
    in_bash, pending, start = False, "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        fence = _FENCE.match(raw)
        if fence:
            in_bash = not in_bash and fence.group(1) in ("bash", "sh", "shell", "console")
            pending = ""
            continue
        if not in_bash:
            continue
        if not pending:
            start = number
        line = strip_comment(raw)
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical = (pending + line).strip()
        pending = ""
        if logical:
            out.append((start, logical))
    return out


def strip_comment(line: str) -> str:
    """`line` without its shell comment: a `#` at a word's start outside quotes, to the end of the line."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line


def shell_words(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:  # an unbalanced quote: good enough to look for options in
        return line.split()


def read(readme: str) -> str:
    return (ROOT / readme).read_text(encoding="utf-8")


def nmt_commands(readme: str, text: str | None = None) -> list[CommandLine]:
    """Every `nmt` command line of `readme`'s bash blocks (a line may hold several, e.g. `nmt a | nmt b`)."""
    found = []
    for number, line in bash_lines(read(readme) if text is None else text):
        for match in _NMT_AT.finditer(line):
            words = []
            for word in shell_words(line[match.end():]):
                if word in _SHELL_OPERATORS or _REDIRECTION.match(word):
                    break
                words.append(word)
            found.append(CommandLine(readme, number, line, tuple(words)))
    return found


def make_targets_named(readme: str, text: str | None = None) -> list[tuple[int, str, str]]:
    """(line, target, logical line) for every `make TARGET` of `readme`'s bash blocks."""
    found = []
    for number, line in bash_lines(read(readme) if text is None else text):
        words = shell_words(line)
        for i, word in enumerate(words):
            if word != "make" or (i and words[i - 1] not in _SHELL_OPERATORS):
                continue
            for arg in words[i + 1:]:
                if arg in _SHELL_OPERATORS:
                    break
                if "=" in arg or arg.startswith("-"):  # VAR=value, make's own options
                    continue
                found.append((number, arg, line))
    return found


def makefile_rules() -> set[str]:
    rules = set()
    for line in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^([A-Za-z0-9_.\- ]+?)\s*:(?![=:])", line)
        if m:
            rules.update(t for t in m.group(1).split() if not t.startswith("."))  # not .PHONY and the like
    return rules


def option_names(command) -> set[str]:
    """The option names `command` takes. Duck-typed: Typer >= 0.22 carries its own click, whose classes are not
    click's."""
    names = {"--help", "-h"}  # the app's help_option_names
    for param in command.params:
        if param.param_type_name == "option":
            names.update(param.opts)
            names.update(param.secondary_opts)  # --no-progress
    return names


@pytest.fixture(scope="module")
def cli():
    """The `nmt` command group, as `nmt.cli.main.main` runs it."""
    group = typer.main.get_command(app)
    assert {"prepare", "train", "translate", "score"} <= set(group.commands)
    return group


def problems(command: CommandLine, cli) -> list[str]:
    """What is wrong with one command line: an unknown command, or options its command does not have."""
    words = list(command.words)
    target = cli
    if words and not words[0].startswith("-"):
        name = words.pop(0)
        if name not in cli.commands:
            return [f"no command {name!r} (commands: {', '.join(cli.commands)})"]
        target = cli.commands[name]
    known = option_names(target)
    wrong = []
    for word in words:
        word = word.strip("[]")  # `[--push REPO]`: an optional part, as usage lines write it
        option = word.split("=", 1)[0]
        if (option.startswith("--") and len(option) > 2) or _SHORT_OPTION.match(option):
            if option not in known:
                wrong.append(f"{target.name if target is not cli else 'nmt'} has no option {option}")
    return wrong


@pytest.mark.parametrize("readme", READMES)
def test_parser_finds_the_commands(readme):
    commands = nmt_commands(readme)
    assert len(commands) >= MIN_COMMANDS[readme], (
        f"{readme}: only {len(commands)} nmt command lines found in ```bash blocks:\n"
        + "\n".join(map(str, commands)))
    assert all(c.words for c in commands), [str(c) for c in commands if not c.words]


@pytest.mark.parametrize("readme", READMES)
def test_nmt_commands_and_options_exist(readme, cli):
    wrong = [f"{c}\n    -> {p}" for c in nmt_commands(readme) for p in problems(c, cli)]
    assert not wrong, "command lines that nmt would refuse:\n" + "\n".join(wrong)


@pytest.mark.parametrize("readme", READMES)
def test_make_targets_exist(readme):
    named = make_targets_named(readme)
    assert named, f"{readme}: no `make TARGET` found in its bash blocks"
    rules = makefile_rules()
    missing = [f"{readme}:{n}: make {t}  ({line})" for n, t, line in named if t not in rules]
    assert not missing, "targets the Makefile lacks:\n" + "\n".join(missing)


@pytest.mark.parametrize("readme", READMES)
def test_config_files_exist(readme):
    text = read(readme)
    named = sorted(set(re.findall(r"(?<![\w/.-])configs/[\w.\-]+\.ya?ml\b", text)))
    assert named, f"{readme} names no configs/ file"
    missing = [p for p in named if not (ROOT / p).is_file()]
    assert not missing, f"{readme} names config files that do not exist: {missing}"


def test_readmes_link_each_other():
    head = read("README.md").splitlines()[:15]
    assert any("(README.zh-CN.md)" in line for line in head), "README.md's first 15 lines must link README.zh-CN.md"
    assert "(README.md)" in read("README.zh-CN.md"), "README.zh-CN.md must link back to README.md"


def paper_map_rows() -> list[list[str]]:
    """The cells of the Chinese README's table from the paper to the code: rows whose first cell is a section (§)."""
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in read("README.zh-CN.md").splitlines() if line.startswith("| §")]


def test_paper_map_names_exist():
    """Every name in the code column is in the file named before it; every config key in the last column is one."""
    from nmt.config.experiment import Config

    rows = paper_map_rows()
    assert len(rows) >= 12, f"the paper-to-code table has only {len(rows)} rows"
    defaults, wrong = Config(), []
    for row in rows:
        assert len(row) == 4, row
        source = ""
        for name in re.findall(r"`([^`]+)`", row[2]):
            if re.fullmatch(r"(nmt|configs)/[\w/.-]+\.(py|yaml)", name):
                source = (ROOT / name).read_text(encoding="utf-8")
                continue
            word = re.split(r"[:=]", name)[0].strip().split(".")[-1]
            if re.fullmatch(r"[A-Za-z_]\w*", word) and not re.search(rf"\b{word}\b", source):
                wrong.append(f"{row[0]}: {name} is not in the file named before it")
        for key in re.findall(r"`((?:data|model|train|decode|serve)\.\w+)", row[3]):
            section, field = key.split(".")
            if not hasattr(getattr(defaults, section), field):
                wrong.append(f"{row[0]}: no config key {key}")
    assert not wrong, "\n".join(wrong)


# ---- the parser itself, on lines written for it


def test_parser_on_known_lines():
    text = "\n".join([
        "```bash",
        "# a comment line: nmt train --nothing",
        "$ nmt prepare --train data/raw/train \\",
        "      --src-lang en --tgt-lang de   # a comment with --not-an-option",
        'echo "forty-two" | nmt translate --config configs/tiny.yaml --beam=4 < in.en > out.de',
        "torchrun --nproc_per_node 4 -m nmt train --config configs/big.yaml",
        "python -m nmt score --ref t.de --hyp h.de && make demo",
        "pip install 'nmt[serve]'",
        "nmt export --checkpoint runs/base --to hf -o out [--push me/en-de]",
        "```",
        "nmt outside --a-block",
        "```",
        "nmt plain --block-not-bash",
        "```",
    ])
    commands = nmt_commands("X.md", text)
    assert [(c.line, c.words[0]) for c in commands] == [
        (3, "prepare"), (5, "translate"), (6, "train"), (7, "score"), (9, "export")]
    assert commands[0].words == ("prepare", "--train", "data/raw/train", "--src-lang", "en", "--tgt-lang", "de")
    assert commands[1].words[-2:] == ("configs/tiny.yaml", "--beam=4")
    assert commands[3].words == ("score", "--ref", "t.de", "--hyp", "h.de")
    assert [t for _, t, _ in make_targets_named("X.md", text)] == ["demo"]


def test_problems_are_found(cli):
    def check(*words):
        return problems(CommandLine("X.md", 1, " ".join(words), words), cli)

    assert check("translate", "--beam=4", "-i", "a", "--no-progress", "--all-heads") == []
    assert check("prepare", "--demo", "--tgt-lang", "zh", "-h") == []
    assert check("export", "--checkpoint", "x", "--to", "hf", "-o", "o", "[--push", "me/x]") == []
    assert check("--install-completion") == []
    assert check("translate", "--beams", "4") == ["translate has no option --beams"]
    assert check("score", "--ref", "a", "-x") == ["score has no option -x"]
    assert check("tarnslate", "--beam", "4")[0].startswith("no command 'tarnslate'")


def test_makefile_rules():
    rules = makefile_rules()
    assert {"install", "demo", "test", "multi30k", "libretranslate"} <= rules
    assert not {"PYTHON", "STAMP", "$(STAMP)", ".PHONY"} & rules
