"""`nmt export --to argos`: the model as an Argos Translate package (`.argosmodel`), which
`argostranslate.package.install_from_path` installs and LibreTranslate serves.

A package is a zip of one directory: `metadata.json` (codes, names, versions), `model/` (the CTranslate2 model
of nmt.interop.export.ct2, int8 by default), `sentencepiece.model`, `minisbd/` (the sentence splitter,
nmt.interop.export.sbd: without it Argos downloads one at first use) and a README. How Argos runs it, read from
argostranslate 1.11 and LibreTranslate's fork argos-translate-lt 1.12: each paragraph (line) is split into sentences,
each sentence encoded into pieces with the ONE SentencePiece model (CTranslate2 appends EOS: `add_source_eos`),
translated with `beam_size=max(1, ARGOS_BEAM_SIZE)` (4 unless set), `length_penalty=0.2` (logprob / length ** 0.2, nmt's
`average` form; EOS not counted) and CTranslate2's other defaults (at most 256 decoding steps, no empty output),
decoding from the model's start token (config.json), then the target pieces decoded with that same
SentencePiece model, `_` turned into spaces, the leading space dropped.

What that rules out, refused in one line rather than packaged to translate wrongly:
- separate source/target vocabularies (an nmt-trained model with two SentencePiece models): the target pieces
  would be decoded with the source model;
- an imported model whose target pieces the source SentencePiece model would decode to other text than the
  target one does (a Marian model's source.spm/target.spm that disagree), or that needs a target-language token
  (>>xx<<) before every source sentence, which Argos has no way to add.
"""

from __future__ import annotations

import json
import tempfile
import zipfile
from pathlib import Path

import sentencepiece as spm

from nmt.errors import NmtError
from nmt.interop.export import ct2, sbd
from nmt.interop.modelspec import ModelDescription
from nmt.langcodes import canonical_or_none, language_name

PACKAGE_VERSION = "1.0"
ARGOS_VERSION = "1.9"  # the package layout (metadata + model/ + sentencepiece.model + minisbd/) Argos 1.9+ reads
ARGOS_LENGTH_PENALTY = 0.2  # fixed in argostranslate's translate_batch call
ARGOS_MAX_DECODING = 256  # CTranslate2's default max_decoding_length, which Argos does not set
# Argos' own codes where they differ from nmt.langcodes' canonical ones (its package index names them so)
ARGOS_CODES = {"zh-Hant": "zt", "pt-BR": "pb"}


def argos_langs(model: ModelDescription) -> tuple[str, str]:
    """The pair as Argos Translate codes it (zh-CN -> zh, zh-TW -> zt); a code nmt.langcodes cannot read stays."""
    def code(lang: str) -> str:
        known = canonical_or_none(lang)
        return ARGOS_CODES.get(known, known) if known else lang

    src, tgt = model.langs
    return code(src), code(tgt)


def write(model: ModelDescription, path: Path, quantization: str | None = "int8", **others: object) -> None:
    """The package file at `path` (a .argosmodel zip): refuses in one line what Argos would translate wrongly."""
    if others:
        raise NmtError(f"--to argos does not take --{next(iter(others))}")
    check(model)
    src, tgt = argos_langs(model)
    top = f"translate-{src}_{tgt}-{PACKAGE_VERSION.replace('.', '_')}"
    with tempfile.TemporaryDirectory(prefix=".argos-", dir=path.parent) as tmp:
        root = Path(tmp) / top
        ct2.convert(model, root / "model", quantization or "none")
        (root / "sentencepiece.model").write_bytes(model.tokenizer.to_state()["src_model"])
        (root / "minisbd").mkdir()
        (root / "minisbd" / f"{src}.onnx").write_bytes(sbd.minisbd_model(src))
        (root / "metadata.json").write_text(json.dumps(metadata(model), indent=2, ensure_ascii=False) + "\n",
                                            encoding="utf-8")
        (root / "README.md").write_text(readme(model, quantization or "none"), encoding="utf-8")
        _zip(root, path)


def check(model: ModelDescription) -> None:
    """A one-line NmtError for a model Argos Translate cannot run as nmt does."""
    if not model.joint:
        raise NmtError("--to argos: this model has separate source and target vocabularies, and Argos Translate "
                       "decodes with its one SentencePiece model; use --to ct2")
    codes = model.tokenizer.language_codes()
    if codes or model.decode.prefix:
        raise NmtError(f"--to argos: this model needs a target-language token ({model.decode.prefix or codes[0]}) "
                       "before every source sentence, which Argos Translate cannot add; use --to ct2")
    bad = _misdecoded_piece(model)
    if bad is not None:
        raise NmtError(f"--to argos: the source SentencePiece model decodes the target piece {bad!r} differently "
                       "from the target one, and Argos Translate decodes with the source model; use --to ct2")


def _misdecoded_piece(model: ModelDescription) -> str | None:
    """A target vocabulary entry that Argos (decoding with the source model) turns into other text than nmt."""
    state = model.tokenizer.to_state()
    if state["tgt_model"] is None or state["tgt_model"] == state["src_model"]:
        return None  # one model for both sides: what Argos decodes with is what nmt decodes with
    source, target = spm.SentencePieceProcessor(), spm.SentencePieceProcessor()
    source.LoadFromSerializedProto(state["src_model"])
    target.LoadFromSerializedProto(state["tgt_model"])
    special = {model.tgt_vocab[i] for i in (model.special.pad, model.special.unk, model.special.eos)}
    for piece in model.tgt_vocab:
        if piece in special:
            continue
        for context in ([piece], ["\u2581a", piece]):  # first in the output, and after a word
            if _argos_text(source, context) != _argos_text(target, context):
                return piece
    return None


def _argos_text(processor: spm.SentencePieceProcessor, pieces: list[str]) -> str:
    """Argos' SentencePieceTokenizer.decode, then its dropping of the leading space."""
    text = processor.decode_pieces(pieces).replace("\u2581", " ").replace("_", " ")
    return text[1:] if text.startswith(" ") else text


def metadata(model: ModelDescription) -> dict[str, object]:
    """metadata.json: what argostranslate.package reads (codes, names, versions, type)."""
    src, tgt = argos_langs(model)
    return {"package_version": PACKAGE_VERSION, "argos_version": ARGOS_VERSION, "from_code": src,
            "from_name": language_name(src), "to_code": tgt, "to_name": language_name(tgt), "type": "translate",
            "links": [], "source": f"nmt export --to argos from {model.source.name}"
                                    + (f" (imported from {model.imported_from})" if model.imported_from else "")}


def _zip(root: Path, path: Path) -> None:
    """`root` as a zip at `path` whose one top directory is root's name (how Argos installs it)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.write(root, root.name)
        for file in sorted(root.rglob("*")):
            zf.write(file, str(Path(root.name) / file.relative_to(root)))


def readme(model: ModelDescription, quantization: str) -> str:
    """The package's README.md: what it is, how Argos / LibreTranslate run it, how that differs from nmt."""
    src, tgt = argos_langs(model)
    cfg, decode = model.config, model.decode
    origin = f" (imported from {model.imported_from})" if model.imported_from else ""
    return f"""# {language_name(src)} -> {language_name(tgt)} ({src}->{tgt}), exported by nmt

An Argos Translate package made by `nmt export --to argos` from `{model.source.name}`{origin}:
{cfg.encoder_layers}+{cfg.decoder_layers} layers, d_model {cfg.d_model}, {"pre" if cfg.pre_norm else "post"}-norm,
{cfg.activation}; CTranslate2 weights {quantization if quantization != "none" else "float32"}.

Install and use:

    argospm install /path/to/this.argosmodel        # or argostranslate.package.install_from_path(path)
    argos-translate --from {src} --to {tgt} "Text to translate."

LibreTranslate serves it once installed into its package directory (`ARGOS_PACKAGES_DIR`, by default
~/.local/share/argos-translate/packages). Offline, start it so that it downloads nothing:

    ARGOS_PACKAGE_INDEX=file:///an/empty/index/ libretranslate --load-only {src},{tgt} --disable-files-translation

(`--load-only` with an index that lists no package makes its start-up model check end at once, where with
one package only it would fetch the package index and then try to download MiniSBD models; a directory
with an `index.json` holding `[]` is such an index.)

## Sentence splitting

Argos Translate and LibreTranslate cut every line into sentences with MiniSBD before translating. MiniSBD
downloads a model per language unless the package ships one: this one ships `minisbd/{src}.onnx`, a model
with no weights that applies one rule, so splitting needs no network and is the same everywhere:

A sentence ends after a run of sentence-final marks (. ! ? … and their Arabic, Indic, Armenian, Ethiopic
forms), followed by at most two closing quotes or brackets, when a space or the end of the line follows,
unless the next word starts with a lowercase letter ("e.g. this" stays whole); after the CJK/fullwidth
marks 。！？ a sentence ends whatever follows. Numbers ("3.5") and addresses ("example.com") are never
cut; an abbreviation before a capitalized word ("Dr. Smith") is: the price of a rule that needs no data.
nmt itself translates each line whole: a line of one sentence gets the same translation here and there.

## How this translates compared to `nmt translate`

Argos calls CTranslate2 with beam size `ARGOS_BEAM_SIZE` (default 4; 1 = greedy search) and length
penalty {ARGOS_LENGTH_PENALTY} (logprob / length ** {ARGOS_LENGTH_PENALTY}), whatever the model was tuned with (this
model's own settings: beam {decode.beam}, `{decode.length_penalty_type}` length penalty {decode.length_penalty}). The
closest `nmt translate` call is

    nmt translate --checkpoint {model.source.name} --set decode.beam=4 \\
        --set decode.length_penalty={ARGOS_LENGTH_PENALTY} --set decode.length_penalty_type=average \\
        --set decode.max_len_a=0 --set decode.max_len_b={ARGOS_MAX_DECODING - 1}

which gives the same translations for nearly every sentence of a float32 export; the int8 default is a little
different (and faster). Compute type: LibreTranslate's Argos runs the weights as stored; argostranslate 1.11
itself asks CTranslate2 for `auto` (int8 on most CPUs) unless `ARGOS_COMPUTE_TYPE` is set (e.g. `default`).
What remains different: Argos' length penalty does not count the end token where nmt's
does, CTranslate2 never returns an empty translation, Argos turns `_` into spaces, replaces an unknown
output token by the source token it attends to most, and does not apply nmt's Unicode normalization
({model.tokenizer.normalize or "none"}) before SentencePiece (whose own normalization covers it for almost all text).
"""
