"""What every `nmt` command shares: the Typer app, the common options, and user mistakes as one `error:` line."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from nmt.errors import NmtError

app = typer.Typer(
    name="nmt",
    help="Train and run Transformer translation models: prepare -> train -> translate -> score.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

F = TypeVar("F", bound=Callable[..., Any])

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c",
                 help="YAML config (sections data/model/train/decode/serve/distill); defaults apply without it."),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a config key, e.g. --set train.lr=5e-4 (repeatable)."),
]
# how `translate` and `serve` run the model (nmt.translation.translator.ModelOptions)
DeviceOpt = Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")]
DtypeOpt = Annotated[str, typer.Option(
    help="auto | fp32 | bf16 | fp16 (fp16 on CUDA only). auto: on a GPU bf16 where native (Ampere and newer), "
         "else fp16; on a CPU bf16 for models of d_model >= 256 where native (AVX512-BF16 or AMX), else fp32.")]
QuantizeOpt = Annotated[str | None, typer.Option(
    help="'int8': every Linear layer in int8 on the CPU (weights with a scale per output channel, activations "
         "quantized per call), faster; a few lines may translate differently.")]
CompileOpt = Annotated[bool, typer.Option(
    "--compile", help="Each step of greedy and beam search as one call, several times faster at small batches. On "
                      "a CPU (float32, or --quantize int8) the encoder and the steps are compiled (AOTInductor): the "
                      "first use of each row count compiles it (about a minute on two cores) and saves it beside the "
                      "checkpoint (CHECKPOINT.compiled/), so later runs only load it; with --quantize int8 the "
                      "compiled steps read int8 weights (their matrix multiplies take bf16 input). On a CUDA GPU "
                      "(any --dtype) each step is recorded once per batch shape as a CUDA graph and replayed. "
                      "Batches of more than 128 rows (sentences x beam) and searches that need attention "
                      "(--alignment, --attention, glossaries, documents) or sample run as without it.")]


def print_error(message: str) -> None:
    typer.echo(f"error: {message}", err=True)


def _os_error(e: OSError) -> str:
    where = " -> ".join(str(f) for f in (e.filename, e.filename2) if f is not None)
    reason = " ".join(str(e.strerror or e).split())
    return f"{reason}: {where}" if where else reason


def user_errors(fn: F) -> F:
    """Turn user mistakes into one line on stderr and exit 1 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NmtError as e:
            print_error(str(e))
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            print_error("interrupted")
            raise typer.Exit(130) from None
        except BrokenPipeError:  # e.g. `nmt translate | head`
            sys.stderr.close()
            raise typer.Exit(0) from None
        except OSError as e:  # a full disk, a missing permission, a directory where a file goes: the machine's state
            print_error(_os_error(e))
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def settings_of(overrides: list[str] | None, **direct: Any) -> list[str]:
    """--set values, then the dedicated options that were given, all as section.key=value."""
    return list(overrides or []) + [f"{k}={v}" for k, v in direct.items() if v is not None]


def load_options_config(config: Path | None, settings: list[str], **sections: dict[str, Any]):
    """Config file <- --set <- dedicated options (as strings in `settings`, or typed: decode={"beam": 5})."""
    from nmt.config.experiment import apply_dict, load_config

    cfg = load_config(config, settings)
    given = {name: {k: v for k, v in values.items() if v is not None} for name, values in sections.items()}
    return apply_dict(cfg, given, origin="the options") if any(given.values()) else cfg
