"""The `nmt` command line: each command parses options, loads the config and calls one function. The commands
around a trained model (average, score, plot, info, import, export) live in nmt.cli.tools."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from nmt.cli import tools  # noqa: F401  (registers the commands around a trained model)
from nmt.cli.common import (
    CompileOpt,
    ConfigOpt,
    DeviceOpt,
    DtypeOpt,
    QuantizeOpt,
    SetOpt,
    app,
    load_options_config,
    print_error,
    settings_of,
    user_errors,
)

try:  # Typer >= 0.22 carries its own click, whose exceptions all derive from this public class
    from typer import TyperException as ParserError
except ImportError:  # older Typer runs on click itself
    from click import ClickException as ParserError


@app.command()
@user_errors
def prepare(
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    train: Annotated[str | None, typer.Option(
        help="Training data: file prefix (data/train -> data/train.en + data/train.de), a .tsv, a TMX translation "
             "memory (.tmx, .tmx.gz), a local dataset (save_to_disk dir, .jsonl/.csv/.parquet) or a Hugging Face "
             "dataset name.")] = None,
    valid: Annotated[str | None, typer.Option(help="Validation data (same forms as --train).")] = None,
    test: Annotated[str | None, typer.Option(help="Test data (same forms as --train).")] = None,
    src_lang: Annotated[str | None, typer.Option(help="Source language code (file suffix / column).")] = None,
    tgt_lang: Annotated[str | None, typer.Option(help="Target language code (file suffix / column).")] = None,
    data_dir: Annotated[str | None, typer.Option("--data-dir", "-o", help="Output data dir (data.dir).")] = None,
    vocab_size: Annotated[int | None, typer.Option(help="SentencePiece vocabulary size.")] = None,
    num_proc: Annotated[int | None, typer.Option(help="Processes for encoding.")] = None,
    tokenizer_from: Annotated[str | None, typer.Option(
        help="Encode with this checkpoint's tokenizer instead of training SentencePiece: data to fine-tune that "
             "model on (train --init-from), e.g. one made by `nmt import` (data.tokenizer_from).")] = None,
    demo: Annotated[bool, typer.Option(
        "--demo", help="Generate the built-in corpus and prepare it: English->German numbers, dates and noun phrases, "
                       "or English->Chinese (Simplified) when --src-lang/--tgt-lang is zh (zh-CN, zh-Hans).")] = False,
    force: Annotated[bool, typer.Option(help="Overwrite a data dir that holds a different preparation.")] = False,
    progress: Annotated[bool | None, typer.Option(
        "--progress/--no-progress",
        help="A bar per stage on stderr: reading, SentencePiece, encoding (default: when stderr is a terminal)."),
    ] = None,
) -> None:
    """Clean parallel text, train SentencePiece and store encoded, length-indexed data."""
    from nmt.data import prepare as command

    cfg = load_options_config(config, settings_of(overrides, **{
        "data.train": train, "data.valid": valid, "data.test": test, "data.src_lang": src_lang,
        "data.tgt_lang": tgt_lang, "data.dir": data_dir, "data.vocab_size": vocab_size, "data.num_proc": num_proc,
        "data.tokenizer_from": tokenizer_from,
    }))
    command.run(cfg, demo=demo, force=force, progress=progress)


@app.command()
@user_errors
def train(
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    data_dir: Annotated[str | None, typer.Option(help="Prepared data dir (data.dir).")] = None,
    run_dir: Annotated[str | None, typer.Option(help="Where checkpoints and logs go (train.run_dir).")] = None,
    init_from: Annotated[str | None, typer.Option(
        help="Fine-tune: start from this checkpoint's weights and model config (e.g. one made by `nmt import`) "
             "with a fresh optimizer and schedule; the data must be prepared with --tokenizer-from it "
             "(train.init_from).")] = None,
    force: Annotated[bool, typer.Option(
        help="Start over in a run dir that holds another experiment (deletes its checkpoints).")] = False,
    progress: Annotated[bool | None, typer.Option(
        "--progress/--no-progress", help="Progress bar (default: when stderr is a terminal).")] = None,
) -> None:
    """Train the Transformer; resumes automatically from the run dir's newest intact checkpoint.

    Multi-GPU / multi-process: torchrun --nproc_per_node N -m nmt train --config ...
    """
    from nmt.train import loop as command

    cfg = load_options_config(config, settings_of(overrides, **{"data.dir": data_dir, "train.run_dir": run_dir,
                                                  "train.init_from": init_from}))
    try:
        command.run(cfg, force=force, progress=progress)
    except BrokenPipeError:  # `nmt train 2>&1 | head`: the log reader left and the run stopped unfinished
        raise typer.Exit(141) from None  # 128 + SIGPIPE, as a shell reports it; never 0 (= finished)


@app.command()
@user_errors
def translate(
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    checkpoint: Annotated[Path | None, typer.Option(
        help="Checkpoint to load (default: averaged.pt, else best.pt, else last.pt of train.run_dir).")] = None,
    input: Annotated[Path | None, typer.Option(
        "--input", "-i", help="Read this file instead of stdin. A document (.md, .html/.htm, .srt, .vtt, .docx, "
                              ".pptx, .odt, .epub) is translated keeping its format; other files line by line."
    )] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write this file instead of stdout (required for docx, pptx, odt, epub): a new or "
                               "regular file is replaced atomically (through a symlink, the file it points to); a "
                               "FIFO or a device such as /dev/null or /dev/stdout is written through. Refused if it "
                               "is the --input file, unless --force.")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Allow --output to be the --input file: the translation goes to a temp file that "
                        "replaces the input at the end.")] = False,
    format: Annotated[str | None, typer.Option(
        "--format", help="Translate --input as this format: txt (paragraphs between blank lines), md, html, srt, "
                         "vtt, docx, pptx, odt, epub, or lines (line by line, whatever the extension). Default: "
                         "from the extension.")] = None,
    beam: Annotated[int | None, typer.Option(help="Beam size (1 = greedy).")] = None,
    nbest: Annotated[int | None, typer.Option(
        help="Print the K best translations of each input line, one per output line, as "
             "'LINE_NO<TAB>text<TAB>score' (score: log-prob / length penalty, as the beam ranks them).")] = None,
    length_penalty: Annotated[float | None, typer.Option(
        help="Length penalty alpha (its form: decode.length_penalty_type, gnmt or average).")] = None,
    max_tokens: Annotated[int | None, typer.Option(
        help="Padded source tokens per batch: sentences x the longest source (+ EOS).")] = None,
    target_lang: Annotated[str | None, typer.Option(
        help="Target language of a multilingual model: puts its code >>LANG<< (e.g. fra) before every line "
             "(decode.prefix).")] = None,
    glossary: Annotated[Path | None, typer.Option(
        help="Terms the output must hold: a UTF-8 file of 'source<TAB>target' lines (an empty target: keep the "
             "source's words untranslated). Whole words, any case; list inflected forms separately. Lines without "
             "terms are translated exactly as without it; in a line that misses a term, the term takes the place of "
             "the words aligned to its source word, or a constrained beam search's output where that is as likely "
             "and no longer (nmt/translation/terminology.py).")] = None,
    scores: Annotated[bool, typer.Option(
        "--scores", help="Append '<TAB>log-prob' (the sum of token log-probabilities, EOS included) to each "
                         "output line, n-best lines included.")] = False,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto",
    threads: Annotated[int, typer.Option(
        help="CPU threads at most (0 = one per core); each batch runs on the cores other programs leave free.")] = 0,
    quantize: QuantizeOpt = None,
    compile: CompileOpt = False,
    attention: Annotated[Path | None, typer.Option(
        help="Save a cross-attention heatmap PNG per sentence into this dir (needs nmt\\[plot]).")] = None,
    attention_layer: Annotated[int, typer.Option(
        help="Decoder layer for --attention and --alignment (-1 = last).")] = -1,
    all_heads: Annotated[bool, typer.Option(
        "--all-heads", help="With --attention: also a grid of every head of every layer.")] = False,
    encoder_attention: Annotated[bool, typer.Option(
        "--encoder-attention", help="With --attention: also plot encoder self-attention.")] = False,
    alignment: Annotated[Path | None, typer.Option(
        help="Write the best translation's word alignment (the symmetrized cross-attention links documents use; "
             "Pharaoh 'i-j': source word i, target word j, whitespace words), one line per input line.")] = None,
    progress: Annotated[bool | None, typer.Option(
        "--progress/--no-progress", help="Progress bar on stderr (default: when stderr is a terminal).")] = None,
) -> None:
    """Translate text, one output line per input line (stdin -> stdout by default), or a document keeping its
    format (--input report.md, or --format; see --input).

    Without --config, the search settings (beam, length penalty, ...) are
    those the checkpoint was trained with; --beam, --nbest, --length-penalty,
    --max-tokens and --set decode.KEY=VALUE override them.
    """
    from nmt.translation.command import TranslateOptions, translate_file

    settings = settings_of(overrides)
    changes = {"beam": beam, "nbest": nbest, "length_penalty": length_penalty, "max_tokens": max_tokens,
               "prefix": f">>{target_lang}<<" if target_lang else None}
    opts = TranslateOptions(
        checkpoint=checkpoint, device=device, dtype=dtype, threads=threads, quantize=quantize, compile=compile,
        scores=scores, attention_dir=attention, attention_layer=attention_layer, all_heads=all_heads,
        encoder_attention=encoder_attention, alignment=alignment, progress=progress, format=format,
        glossary=glossary, force=force, config_given=config is not None,
    )
    translate_file(load_options_config(config, settings, decode=changes), opts, input, output)


@app.command()
@user_errors
def serve(
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    checkpoint: Annotated[list[Path] | None, typer.Option(
        help="Checkpoint to serve (default: averaged.pt, else best.pt, else last.pt of train.run_dir). Repeat it to "
             "serve several language pairs from one server: requests are routed by their source and target.")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on (serve.host, default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (serve.port, default 5000; 0 = any free port).")] = None,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto",
    threads: Annotated[int, typer.Option(
        help="CPU threads of the model at most (0 = one per core); each batch runs on the cores other programs leave "
             "free.")] = 0,
    quantize: QuantizeOpt = None,
    compile: CompileOpt = False,
    api_key: Annotated[str | None, typer.Option(
        envvar="NMT_API_KEY", help="Require this key on translation requests: LibreTranslate's api_key field or an "
                                   "'Authorization: Bearer KEY' header (403 otherwise).")] = None,
    access_log: Annotated[bool, typer.Option(
        "--access-log/--no-access-log", help="Log each request on stderr.")] = True,
    glossary: Annotated[Path | None, typer.Option(
        help="Terms every translation must hold (serve.glossary; file format: nmt translate --glossary). A "
             "/v1/translate request may add its own in its glossary field.")] = None,
) -> None:
    """Serve translations over HTTP with dynamic batching (needs nmt\\[serve]): LibreTranslate-compatible
    POST /translate, POST /detect and GET /languages, native POST /v1/translate, GET /health, GET /v1/info, and a
    web page at /. Several --checkpoint: one model per language pair, each with its own batches.

    Limits (queue, deadlines, rate limits, connections, CORS, allowed hosts) and batching: --set
    serve.KEY=VALUE (see nmt/config/serve.py and docs/serve.md, Deploying). Without --config, the search settings
    are those the checkpoint was trained with; --set decode.KEY=VALUE overrides them. On Ctrl-C or SIGTERM:
    stops accepting, finishes the queued requests that fit in serve.shutdown_timeout, answers the rest 503, exits
    0.
    """
    from nmt.serve import ServeOptions, run  # run: FastAPI, or the error line naming the serve extra

    settings = settings_of(overrides, **{"serve.host": host, "serve.port": port, "serve.glossary": glossary})
    opts = ServeOptions(checkpoints=checkpoint or [], device=device, dtype=dtype, threads=threads, quantize=quantize,
                        compile=compile, api_key=api_key, access_log=access_log, config_given=config is not None)
    run(load_options_config(config, settings), opts)


@app.command()
@user_errors
def distill(
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    pipeline_dir: Annotated[str | None, typer.Option(
        "--dir", help="The pipeline dir: pipeline.json and one folder per stage (distill.dir).")] = None,
    teacher: Annotated[str | None, typer.Option(
        help="The teacher: an nmt checkpoint or run dir, or an imported OPUS-MT checkpoint (distill.teacher).")
    ] = None,
    comet: Annotated[str | None, typer.Option(
        metavar="DIR", help="Also score the test set with COMET from this local COMET model dir (distill.comet; "
                            "docs/distill.md).")] = None,
    force: Annotated[bool, typer.Option(
        help="Go on in a pipeline dir made with other settings: the stages they change are redone.")] = False,
    progress: Annotated[bool | None, typer.Option(
        "--progress/--no-progress", help="Progress bars (default: when stderr is a terminal).")] = None,
) -> None:
    """Distil a big teacher into a small student: clean the corpus (data.train) with evidence, translate it with the
    teacher (or take distill.teacher_translations), prepare and train the student (the config's model and train
    sections) on the teacher's output, score teacher and student on data.test (BLEU, chrF, and COMET with --comet),
    and write DIR/report.html (scores, decoding speed, sizes, the filters' evidence).

    Each stage is recorded in DIR/pipeline.json; a rerun skips the finished stages and resumes the unfinished one
    (the teacher at its next chunk, training at its newest checkpoint). `nmt info DIR` shows the stages. Keys:
    --set distill.KEY=VALUE (see nmt/config/distill.py and docs/distill.md).
    """
    from nmt.distill.pipeline import run

    cfg = load_options_config(config, settings_of(overrides, **{"distill.dir": pipeline_dir,
                                                                "distill.teacher": teacher, "distill.comet": comet}))
    run(cfg, force=force, progress=progress)


# `nmt --help` lists the pipeline, then the commands around a trained model, then serving
ORDER = ("prepare", "train", "translate", "average", "score", "plot", "info", "import", "export", "distill",
         "explain", "serve")
app.registered_commands.sort(key=lambda c: ORDER.index(c.name or c.callback.__name__))


def main(args: list[str] | None = None) -> None:
    """The `nmt` entry point. Runs the app like Typer does, except that an option-parser mistake (a bad
    value, an unknown option or command) is one `error:` line like every other user error, instead of
    a usage box; a bare `nmt` still prints the help."""
    command = typer.main.get_command(app)
    argv = sys.argv[1:] if args is None else list(args)
    if not argv:  # a bare `nmt`: the help, with click's no_args_is_help exit status
        command.main(args=["--help"], prog_name="nmt", standalone_mode=False)
        sys.exit(2)
    try:
        code = command.main(args=argv, prog_name="nmt", standalone_mode=False)
    except ParserError as e:
        ctx = getattr(e, "ctx", None)  # usage errors know their command
        where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        print_error(" ".join(e.format_message().split()) + where)
        code = e.exit_code
    except typer.Abort:
        print_error("aborted")
        code = 1
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
