"""The `nmt` commands around a trained model: average, score, plot, info, import, export, explain (registered on the
app of nmt.cli.common; nmt.cli.main imports this module)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt.cli.common import ConfigOpt, SetOpt, app, load_options_config, settings_of, user_errors


@app.command()
@user_errors
def average(
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    run_dir: Annotated[str | None, typer.Option(help="Run dir (train.run_dir).")] = None,
    last: Annotated[int | None, typer.Option(help="How many newest checkpoints (train.average_last).")] = None,
) -> None:
    """Average the last K checkpoints of a run into averaged.pt (as in the paper)."""
    from nmt.rundir import RunDir

    cfg = load_options_config(config, settings_of(overrides, **{"train.run_dir": run_dir}))
    typer.echo(f"wrote {RunDir(cfg.train.run_dir).average(cfg.train.average_last if last is None else last)}",
               err=True)


@app.command()
@user_errors
def score(
    ref: Annotated[list[Path], typer.Option("--ref", "-r", help="Reference file (repeat for several).")],
    hyp: Annotated[Path | None, typer.Option(help="Hypothesis file (default: stdin).")] = None,
    metrics: Annotated[str, typer.Option(help="Comma-separated: bleu,chrf,ter.")] = "bleu,chrf,ter",
    tokenize: Annotated[str | None, typer.Option(help="BLEU tokenizer passed to sacreBLEU (13a, intl, zh, ja-mecab, "
                                                 "char, flores200, none...; default: chosen for the language)")] = None,
    tgt_lang: Annotated[str | None, typer.Option(help="The translation's language, for BLEU's tokenizer (default: "
                                                 "--data-dir's or --checkpoint's, else the first --ref file's suffix: "
                                                 "test.zh -> zh)")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="A data dir whose target language is the hypothesis'.")] = None,
    checkpoint: Annotated[Path | None, typer.Option(help="A checkpoint whose target language is the hypothesis'.")
                          ] = None,
    lowercase: Annotated[bool, typer.Option(help="Case-insensitive scores.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON line instead of text.")] = False,
    comet: Annotated[Path | None, typer.Option(
        metavar="DIR", help="Add COMET, computed offline from this COMET model dir (hparams.yaml, "
                            "checkpoints/model.ckpt: e.g. Unbabel/wmt22-comet-da; docs/score.md). Needs --src.")
                     ] = None,
    src: Annotated[Path | None, typer.Option(help="The source sentences, one per hypothesis line (for COMET).")
                   ] = None,
    comet_batch_size: Annotated[int, typer.Option(min=1, help="Segments per COMET forward pass.")] = 16,
    comet_device: Annotated[str, typer.Option(help="Where COMET runs: cpu, cuda, cuda:N or auto.")] = "cpu",
) -> None:
    """Score a translation against references with sacreBLEU (BLEU, chrF, TER), and with COMET when --comet names a
    local COMET model. BLEU's tokenizer follows the target language as sacreBLEU's own rule does: zh for Chinese,
    ja-mecab (else char) for Japanese, char for Thai, 13a otherwise; the signature printed says which."""
    from nmt import score as command
    from nmt.errors import NmtError

    if src is not None and comet is None:
        raise NmtError("--src is read for COMET only: give --comet DIR too")
    tgt_lang = tgt_lang or target_language(data_dir, checkpoint)
    options = command.CometOptions(comet, src, comet_batch_size, comet_device) if comet is not None else None
    typer.echo(command.run(ref, hyp, metrics=[m.strip() for m in metrics.split(",") if m.strip()],
                           tokenize=tokenize, lowercase=lowercase, json_out=json_out, tgt_lang=tgt_lang,
                           comet=options))


@app.command()
@user_errors
def plot(
    run_dir: Annotated[Path | None, typer.Argument(
        metavar="RUN_DIR", help="A run dir: its metrics.jsonl for the curves; for the other kinds its checkpoint "
                                "(else its config.yaml) when neither --config nor --checkpoint is given.")] = None,
    kind: Annotated[str, typer.Option(
        "--kind", "-k",
        help="curves: loss, perplexity, BLEU and learning rate of RUN_DIR's training. positions: the positional "
             "encoding matrix as a heatmap and a few of its sin/cos dimensions over position (§3.5). masks: the "
             "padding mask of a batch, one sentence's encoder self-attention mask and the causal (look-ahead) mask "
             "of the decoder (§3.2.3). schedule: the learning rate per update over train.max_updates, warmup marked "
             "(§5.3, eq. 3). smoothing: one target token's label-smoothed distribution beside the one-hot one "
             "(§5.4). all: every kind (curves only with RUN_DIR).")] = "curves",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    checkpoint: Annotated[Path | None, typer.Option(
        help="A checkpoint, or a run dir (its averaged.pt, else best.pt, else last.pt): the pictures use its saved "
             "config (then --set), its tokenizer (masks: piece labels) and its target vocabulary (smoothing).")
    ] = None,
    text: Annotated[list[str] | None, typer.Option(
        "--text", "-t", help="masks: a sentence of the batch (repeatable; default: a few examples). With a "
                             "checkpoint its tokenizer splits it into pieces, without one spaces split it into "
                             "tokens. smoothing, with a checkpoint: the target token is the first piece of the first "
                             "sentence.")
    ] = None,
    vocab_size: Annotated[int | None, typer.Option(
        help="smoothing: the vocabulary size V (default: the checkpoint's target vocabulary, else "
             "data.vocab_size).")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="PNG to write (default: RUN_DIR/KIND.png, else ./KIND.png; a directory gets "
                               "KIND.png); with --kind all the directory to write KIND.png files into.")] = None,
) -> None:
    """Plot a run's training curves, or the paper's pictures of a config or checkpoint: positional encodings, attention
    masks, learning-rate schedule, label smoothing (PNG; needs nmt\\[plot]). `nmt plot RUN_DIR` writes
    RUN_DIR/curves.png."""
    from nmt.plot.paper import run

    for path in run(kind, run_dir, output, config=config, overrides=overrides or [], checkpoint=checkpoint,
                    sentences=text or [], vocab_size=vocab_size):
        typer.echo(f"wrote {path}", err=True)


@app.command()
@user_errors
def info(
    path: Annotated[Path, typer.Argument(
        metavar="PATH", help="A checkpoint (.pt), a run dir, a prepared data dir or a distillation pipeline dir.")],
    json_out: Annotated[bool, typer.Option(
        "--json", help="One JSON object (one line) instead of tables: sizes in bytes, times in seconds.")] = False,
) -> None:
    """Say what a checkpoint, run dir, data dir or pipeline dir holds: model, vocabularies, training progress, files;
    a distillation pipeline's stages with their state and figures."""
    from nmt.cli import info as command
    from nmt.distill import state, status

    (status if state.is_pipeline_dir(path) else command).run(path, json_out=json_out)


@app.command("import")
@user_errors
def import_(
    source: Annotated[str, typer.Argument(
        metavar="SOURCE", help="A directory written by MarianMTModel/MarianTokenizer.save_pretrained, or a "
                               "Hugging Face hub name such as Helsinki-NLP/opus-mt-en-de (downloaded; needs "
                               "nmt\\[pretrained]).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The nmt checkpoint to write.")],
    src_lang: Annotated[str | None, typer.Option(
        help="Source language code (default: the tokenizer config's source_lang).")] = None,
    tgt_lang: Annotated[str | None, typer.Option(
        help="Target language code (default: the tokenizer config's target_lang).")] = None,
) -> None:
    """Import a pretrained Marian / OPUS-MT model (Hugging Face format) as an nmt checkpoint.

    The checkpoint holds the weights, the model's SentencePiece models and vocabulary, and generate()'s
    search settings (beam, length penalty in its average form), so `translate`, `score`, `info`, `average`,
    `prepare --tokenizer-from` and `train --init-from` take it like any other. Needs no transformers.
    """
    from nmt.interop.marian import import_model

    import_model(source, output, src_lang=src_lang, tgt_lang=tgt_lang)


@app.command()
@user_errors
def export(
    checkpoint: Annotated[Path, typer.Option(
        help="The checkpoint to export, or a run dir (its averaged.pt, else best.pt, else last.pt).")],
    to: Annotated[str, typer.Option(
        help="ct2: a CTranslate2 model directory; argos: an Argos Translate package (.argosmodel) that "
             "LibreTranslate serves; hf: a Hugging Face MarianMTModel directory.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The directory (or .argosmodel file) to write.")],
    quantization: Annotated[str | None, typer.Option(
        help="ct2/argos weights: none, int8, int8_float32, int16, float16, bfloat16 (ct2 default none, argos "
             "int8).")] = None,
    push: Annotated[str | None, typer.Option(
        help="hf: then upload the directory to this Hugging Face hub repo (needs a token: hf auth login).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace OUTPUT if it exists.")] = False,
) -> None:
    """Export a model for another engine: CTranslate2, Argos Translate / LibreTranslate, or Hugging Face.

    The exported model translates as `nmt translate` does (same weights, vocabulary, special tokens and search
    settings; each target's README says how to call it). What a target cannot express is refused in one line.
    The output is written to a temporary path beside OUTPUT and moved into place when complete.
    """
    from nmt.interop.export import export as run_export

    options = {"quantization": quantization} if quantization is not None else {}
    if push is not None:
        options["push"] = push
    run_export(checkpoint, to, output, force=force, **options)


@app.command()
@user_errors
def explain(
    sentence: Annotated[str, typer.Argument(metavar="SENTENCE", help="The sentence to translate and explain.")],
    checkpoint: Annotated[Path, typer.Option(
        help="The checkpoint, or a run dir (its averaged.pt, else best.pt, else last.pt).")],
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="The HTML page to write (default: explain.html beside the checkpoint).")] = None,
    beam: Annotated[int | None, typer.Option(help="Beam size (default: the checkpoint's decode.beam).")] = None,
    length_penalty: Annotated[float | None, typer.Option(
        help="Length penalty alpha (default: the checkpoint's decode.length_penalty).")] = None,
    top_k: Annotated[int, typer.Option(help="Pieces listed per step of the output softmax.")] = 5,
    query: Annotated[int, typer.Option(help="The position whose attention is worked out by hand.")] = 0,
) -> None:
    """Walk one sentence through the model; write one self-contained HTML page that shows it.

    The page follows "Attention Is All You Need" with the model's real numbers and shapes:
    - the SentencePiece pieces and ids;
    - embeddings x sqrt(d_model) + positional encoding, as a picture and as sin/cos curves (§3.4-3.5);
    - each encoder layer: Q, K, V; equation 1 worked out for one query (scores, softmax, weighted sum);
      every head's self-attention (§3.2); residual + LayerNorm (§3.1); the feed-forward network (§3.3);
    - the decoder: the causal mask, masked self-attention and cross-attention, per head;
    - the output softmax at each step: the top-k pieces and their probabilities (§3.4);
    - beam search: each step's candidates (kept, finished, pruned), and how the length penalty picks the
      translation (§6.1).

    The translation is the one `nmt translate` gives with the checkpoint's search settings. The page fetches
    nothing from elsewhere. Prints the translation, the page's path and the key shapes.
    """
    from nmt.explain.command import run, summary

    data, page = run(checkpoint, sentence, output=output, beam=beam, length_penalty=length_penalty, top_k=top_k,
                     query=query)
    typer.echo(summary(data, page))


def target_language(data_dir: Path | None, checkpoint_path: Path | None) -> str | None:
    """The target language a data dir's meta.json or a checkpoint records (None for neither, or none recorded)."""
    if data_dir is not None:
        from nmt.data.datadir import DataDir

        return DataDir.open(data_dir).langs[1]
    if checkpoint_path is not None:
        from nmt import checkpoint

        langs = checkpoint.load(checkpoint_path).langs
        return langs[1] if langs else None
    return None
