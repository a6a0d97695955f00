"""Document translation keeping the format: `translate_document(translator, src, dst)`, for `nmt translate` (and
`nmt serve`'s file endpoint).

Every format translates by paragraph across its inline formatting (nmt.translation.documents.inline): a format module
reads its container, gives the paragraphs as `Paragraph`s of runs, and writes the rendered `Piece`s back where their
text was, leaving everything else as it was. A format module is `nmt.translation.documents.<module>` with

    translate(src: Path, dst: Path, translate_paragraphs: Callable[[list[Paragraph]], list[list[Piece]]]) -> int

(the number of paragraphs translated); modules are imported when a file of theirs is translated, so a missing
library costs only its format. `dst` is written through a temp file beside it, renamed on success: an error leaves
no partial output, whatever the module does.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmt.errors import NmtError
from nmt.io import output_path
from nmt.workbudget import WorkBudget, bounded

if TYPE_CHECKING:
    from nmt.translation.documents.inline import Paragraph, Piece
    from nmt.translation.glossary import Glossary
    from nmt.translation.translator import SentenceTranslator

# extension -> format name
FORMATS = {".txt": "txt", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".srt": "srt",
           ".vtt": "vtt", ".docx": "docx", ".pptx": "pptx", ".odt": "odt", ".epub": "epub", ".pdf": "pdf"}
# format name -> module of nmt.translation.documents
MODULES = {"txt": "txt", "md": "md", "html": "html", "srt": "subtitles", "vtt": "subtitles", "docx": "docx",
           "pptx": "pptx", "odt": "odt", "epub": "epub"}
# zip formats: the kind named in refusals and the member each needs (docx, pptx: unless _rels/.rels names another)
CONTAINERS = {"docx": ("docx", "word/document.xml"), "pptx": ("pptx", "ppt/presentation.xml"),
              "odt": ("odt", "content.xml"), "epub": ("EPUB", "META-INF/container.xml")}
BINARY = frozenset({"docx", "pptx", "odt", "epub", "pdf"})  # no stdout for these: --output is required
LINES = "lines"  # `nmt translate --format lines`: the line-by-line path
# .txt keeps `nmt translate`'s line-by-line behaviour unless --format txt asks for paragraphs
AUTO = {ext: name for ext, name in FORMATS.items() if name != "txt"}
REFUSED = {"pdf": "PDF is refused: a PDF places each line of text at fixed coordinates, so translated text (longer, "
                  "reordered) loses its layout; convert it to .docx (e.g. LibreOffice) and translate that"}
MAX_BYTES = 20 * 2**20  # a text document is far smaller; a binary one's unpacked size is its module's to limit
EXTRA = "pip install 'nmt[documents]'"


@dataclass
class Report:
    """What a document translation did."""

    format: str
    paragraphs: int = 0
    sentences: int = 0
    seconds: float = 0.0


def detect_format(path: Path | None, forced: str | None = None) -> str | None:
    """The format to translate `path` as: `forced` if given ("lines": None), else by its extension (None for the
    line-by-line path: unknown extensions, .txt and stdin)."""
    if forced is not None:
        forced = forced.lower().lstrip(".")
        if forced == LINES:
            return None
        if forced not in MODULES and forced not in REFUSED:
            names = ", ".join(sorted({*MODULES, *REFUSED, LINES}))
            raise NmtError(f"unknown format {forced!r}: one of {names}")
        return forced
    return AUTO.get(path.suffix.lower()) if path is not None else None


def format_module(fmt: str) -> Any:
    """The module of a format, imported now; a refused format, or one whose module or library is missing: NmtError."""
    if fmt in REFUSED:
        raise NmtError(REFUSED[fmt])
    if fmt not in MODULES:
        raise NmtError(f"unknown format {fmt!r}: one of {', '.join(sorted(MODULES))}")
    try:
        return importlib.import_module(f"nmt.translation.documents.{MODULES[fmt]}")
    except ImportError as e:
        raise NmtError(f"{fmt} documents need {e.name or 'a library that is missing'}: {EXTRA}") from None


def check_document(src: Path, fmt: str, max_bytes: int = MAX_BYTES) -> None:
    """Refuse early (before a model loads): a missing file, one over the size limit, a format that cannot be read,
    a container that does not open (not a zip, truncated, encrypted, a bomb by its headers, no main part) or a text
    that does not decode. Cheap: a zip's directory is read, no member; a text (at most `max_bytes`) is decoded."""
    if not src.is_file():
        raise NmtError(f"input file not found: {src}")
    size = src.stat().st_size
    if size > max_bytes:
        raise NmtError(f"{src} is {size / 2**20:.1f} MiB, over the {max_bytes / 2**20:.0f} MiB limit for documents")
    format_module(fmt)
    if fmt in CONTAINERS:
        from nmt.translation.documents.opc import MAIN_TYPES, open_package
        from nmt.translation.documents.safezip import open_zip

        with (open_package if fmt in MAIN_TYPES else open_zip)(src, *CONTAINERS[fmt]):  # docx, pptx: by _rels/.rels
            pass
    elif fmt in MODULES:
        from nmt.translation.documents.txt import read_text

        read_text(src, legacy=fmt in ("srt", "vtt"))


def translate_document(translator: SentenceTranslator, src: Path, dst: Path, fmt: str | None = None,
                       max_bytes: int = MAX_BYTES, budget: WorkBudget | None = None,
                       glossary: Glossary | None = None) -> Report:
    """Translate the document `src` into `dst` (atomically), keeping its format; `fmt` defaults to the extension's.
    The work is bounded by `budget` (default: the default limits, no deadline), opened here so that every count is
    this document's: a document over a limit is refused in one line (OverBudget)."""
    fmt = fmt or FORMATS.get(src.suffix.lower())
    if fmt is None:
        raise NmtError(f"{src}: unknown document extension {src.suffix!r}: give --format (one of "
                       f"{', '.join(sorted(MODULES))})")
    check_document(src, fmt, max_bytes)
    module = format_module(fmt)
    from nmt.translation.documents.paragraphs import translate_paragraphs

    report = Report(fmt)
    started = time.perf_counter()

    def translate(paragraphs: list[Paragraph]) -> list[list[Piece]]:
        report.sentences += sum(len(p.texts) for p in paragraphs)
        return translate_paragraphs(translator, paragraphs, glossary)

    # formats that mark their text's language (docx, pptx) are given the model's languages
    options = {"languages": languages(translator)} if "languages" in inspect.signature(module.translate).parameters \
        else {}
    with bounded(budget or WorkBudget(src.name)), _temp_beside(dst) as tmp:
        report.paragraphs = module.translate(src, tmp, translate, **options)
    report.seconds = time.perf_counter() - started
    return report


def languages(translator: SentenceTranslator) -> tuple[str, str] | None:
    """The model's (source, target) language codes, as its checkpoint or tokenizer names them (None: unknown)."""
    langs = getattr(translator, "langs", None)
    tokenizer = getattr(translator, "tokenizer", None)
    if not langs and tokenizer is not None:
        langs = (getattr(tokenizer, "src_lang", None), getattr(tokenizer, "tgt_lang", None))
    return (str(langs[0]), str(langs[1])) if langs and all(langs) else None


@contextlib.contextmanager
def _temp_beside(dst: Path) -> Iterator[Path]:
    """A temp path for `dst`'s content, put in place when the block succeeds (nmt.io.output_path's rule: a
    regular file replaced atomically, a symlink's target replaced, a FIFO or device written through)."""
    with output_path(dst) as tmp:
        yield tmp
