"""`nmt info PATH`: what a checkpoint, a run dir or a data dir holds, as tables or as one JSON object.

`describe` returns plain dicts (the JSON, with stable keys: sizes in bytes, times in seconds); `render` turns them
into rich tables. No model is built: a checkpoint is loaded once, a data dir's meta.json is read, a run dir's
checkpoint files are listed by name and only the one `translate` would use is loaded.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import zipfile
from pathlib import Path
from typing import Any

import torch
import yaml
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from nmt import checkpoint
from nmt.checkpoint import Checkpoint
from nmt.config.experiment import Config, ModelConfig, config_from_dict, recorded_bleu_tokenize
from nmt.data.datadir import META_FILE, DataDir, outputs
from nmt.errors import CheckpointError, NmtError, first_line
from nmt.rundir import RunDir


def run(path: str | Path, json_out: bool = False) -> None:
    """Print what PATH is: tables on stdout, or one JSON line with `json_out`."""
    info = describe(path)
    if json_out:
        print(json.dumps(_finite(info), allow_nan=False))
    else:
        Console(highlight=False).print(render(info))


def describe(path: str | Path) -> dict[str, Any]:
    """The facts about a checkpoint file, run dir or data dir; anything else is a one-line NmtError."""
    path = Path(path)
    if not path.exists():
        raise NmtError(f"no such file or directory: {path}")
    if path.is_dir():
        if (path / META_FILE).is_file():
            return describe_data_dir(path)
        if _looks_like_run_dir(RunDir(path)):
            return describe_run_dir(path)
        raise NmtError(f"{path} is neither a run dir (no config.yaml, metrics.jsonl or checkpoints) "
                       f"nor a data dir (no {META_FILE})")
    # a .pt (or any torch zip archive) gets checkpoint.load's precise diagnosis; other files are just foreign
    if path.is_file() and (path.suffix == ".pt" or zipfile.is_zipfile(path)):
        return describe_checkpoint(path)
    raise NmtError(f"{path} is not an nmt checkpoint (.pt), run dir or data dir")


def _looks_like_run_dir(run: RunDir) -> bool:
    files = (run.config_file, run.metrics_file, run.last, run.best, run.averaged)
    return any(p.is_file() for p in files) or bool(run.step_checkpoints())


# ---------------------------------------------------------------- checkpoint


def describe_checkpoint(path: Path) -> dict[str, Any]:
    ckpt = checkpoint.load(path)
    cfg, tokenizer = ckpt.config, ckpt.tokenizer()
    src_size, tgt_size = ckpt.vocab_sizes
    return {
        "type": "checkpoint",
        "path": str(path),
        "size_bytes": path.stat().st_size,
        "kind": ckpt.kind,
        "averaged_from": ckpt.averaged_from,
        "imported_from": ckpt.imported_from,
        "src_lang": tokenizer.src_lang,
        "tgt_lang": tokenizer.tgt_lang,
        "src_vocab_size": src_size,
        "tgt_vocab_size": tgt_size,
        "joint_vocab": tokenizer.joint,
        "imported_vocab": tokenizer.mapped,
        "model": dataclasses.asdict(cfg.model),
        # as Transformer does: the decoder input and output always share; the encoder too when asked and joint
        "tied_embeddings": "src+tgt+output" if cfg.model.share_all_embeddings and tokenizer.joint else "tgt+output",
        "parameters": count_parameters(ckpt.weights),
        "dtype": _dtype(ckpt.weights),
        "training": _training(ckpt),
        "best": _stored_best(ckpt.progress, cfg),
        "data_fingerprint": ckpt.data_fingerprint,
    }


def count_parameters(weights: dict[str, Any]) -> int:
    """Elements of the distinct tensors of a state dict: a tied matrix is one storage under several names
    (as the model saves it and checkpoint.average keeps it) and counts once."""
    return sum(weights[name].numel() for name in checkpoint.tensors_by_storage(weights))


def _dtype(weights: dict[str, Any]) -> str | None:
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in weights.values()
                     if isinstance(t, torch.Tensor) and t.is_floating_point()})
    return "/".join(dtypes) or None


def _training(ckpt: Checkpoint) -> dict[str, Any] | None:
    progress = ckpt.progress
    if progress is None:
        return None
    return {"step": _number(ckpt.train_state.get("step")), "epoch": _number(progress.get("epoch")),
            "elapsed_s": _number(progress.get("elapsed")), "processes": ckpt.processes}


def _number(value: Any) -> int | float | None:
    """A counter as stored, or None when it is not a number (a hand-made or foreign checkpoint)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _stored_best(progress: dict[str, Any] | None, cfg: Config) -> dict[str, Any] | None:
    """The best validation score so far, which only training checkpoints carry."""
    value = _number((progress or {}).get("best"))
    return {"metric": cfg.train.best_by, "value": value, **_tok(cfg)} if value is not None else None


def _tok(cfg: Config | None) -> dict[str, str]:
    """The sacreBLEU tokenizer of validation BLEU (13a in runs from before it was recorded)."""
    bleu = cfg is not None and cfg.train.best_by == "bleu"
    return {"tokenize": recorded_bleu_tokenize(cfg.train.bleu_tokenize)} if bleu else {}  # type: ignore[union-attr]


# ---------------------------------------------------------------- run dir


def describe_run_dir(path: Path) -> dict[str, Any]:
    run = RunDir(path)
    problems: list[str] = []
    cfg = _run_config(run, problems)
    chosen = _for_translation(run)
    return {
        "type": "run_dir",
        "path": str(path),
        "config": cfg.to_dict() if cfg else None,
        "checkpoints": _checkpoint_files(run),
        "translate_checkpoint": str(chosen) if chosen else None,
        "metrics": _metrics(run, cfg, problems),
        "checkpoint": _chosen_info(chosen, problems),
        "problems": problems,
    }


def _run_config(run: RunDir, problems: list[str]) -> Config | None:
    if not run.config_file.is_file():
        problems.append(f"no {run.config_file.name}")
        return None
    try:
        return config_from_dict(yaml.safe_load(run.config_file.read_text(encoding="utf-8")) or {})
    except (NmtError, yaml.YAMLError, UnicodeDecodeError) as e:
        problems.append(f"{run.config_file} unreadable ({first_line(e, 120)})")
        return None


def _for_translation(run: RunDir) -> Path | None:
    try:
        return run.for_translation()
    except CheckpointError:  # no checkpoint yet: a run dir still worth describing
        return None


def _chosen_info(chosen: Path | None, problems: list[str]) -> dict[str, Any] | None:
    """The translate checkpoint's info; a damaged one is reported, not fatal (the rest still says a lot)."""
    if chosen is None:
        return None
    try:
        return describe_checkpoint(chosen)
    except CheckpointError as e:
        problems.append(str(e))
        return None


def _checkpoint_files(run: RunDir) -> list[dict[str, Any]]:
    """Step checkpoints oldest first, then last/best/averaged; last.pt is a hard link, so its step is known."""
    steps = run.step_checkpoints()
    files: list[tuple[Path, int | None]] = [(p, step) for step, p in steps]
    for p in (run.last, run.best, run.averaged):
        if p.is_file():
            files.append((p, next((s for s, q in steps if os.path.samefile(p, q)), None)))
    return [{"name": p.name, "step": step, "size_bytes": p.stat().st_size} for p, step in files]


def _metrics(run: RunDir, cfg: Config | None, problems: list[str]) -> dict[str, Any] | None:
    """Last step logged and best validation score (with its step), from metrics.jsonl."""
    try:
        records = run.read_metrics()
    except NmtError as e:
        problems.append(str(e))
        return None
    valid = [r for r in records if r["type"] == "valid"]
    metric = cfg.train.best_by if cfg else ("bleu" if any("bleu" in r for r in valid) else "loss")
    scored = [r for r in valid if isinstance(r.get(metric), (int, float)) and math.isfinite(r[metric])]
    # first of equals: training only counts a strict improvement as a new best
    best = (max if metric == "bleu" else min)(scored, key=lambda r: r[metric]) if scored else None
    return {
        "last_step": int(records[-1]["step"]) if records else None,
        "validations": len(valid),
        "best": {"metric": metric, "value": best[metric], "step": int(best["step"]), **_tok(cfg)} if best else None,
    }


# ---------------------------------------------------------------- data dir


def describe_data_dir(path: Path) -> dict[str, Any]:
    data = DataDir.open(path)
    meta = data.meta
    try:
        (src, tgt), (src_size, tgt_size) = data.langs, data.vocab_sizes
        splits = {name: _split(counts) for name, counts in (meta.get("splits") or {}).items()}
    except (KeyError, TypeError, AttributeError) as e:
        raise NmtError(f"{path / META_FILE} is incomplete ({type(e).__name__}: {e}); "
                       "run `nmt prepare --force`") from None
    files = meta.get("spm_files") or {}
    return {
        "type": "data_dir",
        "path": str(path),
        "src_lang": src,
        "tgt_lang": tgt,
        "src_vocab_size": src_size,
        "tgt_vocab_size": tgt_size,
        "joint_vocab": bool(meta.get("joint_vocab", files.get("src") == files.get("tgt"))),
        "spm_type": meta.get("spm_type"),
        "splits": splits,
        "filters": meta.get("filters"),
        "fingerprint": data.fingerprint,
        "files": [{"name": name, "size_bytes": _disk_size(path / name)} for name in [META_FILE, *outputs(meta)]],
    }


def _split(counts: dict[str, Any]) -> dict[str, Any]:
    return {"pairs": counts["pairs"], "src_tokens": counts.get("src_tokens"), "tgt_tokens": counts.get("tgt_tokens")}


def _disk_size(path: Path) -> int | None:
    """Bytes of a file, or of all files under a directory (a split); None when missing."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.is_file() else None


# ---------------------------------------------------------------- output


def _finite(value: Any) -> Any:
    """NaN/inf (a diverged run's scores) as null: JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def render(info: dict[str, Any]) -> Group:
    """The tables for one describe() result."""
    kind = info["type"]
    if kind == "checkpoint":
        return Group(_checkpoint_table(info))
    if kind == "run_dir":
        return Group(*_run_tables(info))
    return Group(*_data_tables(info))


def _facts(title: str, rows: list[tuple[str, Any]]) -> Table:
    """A two-column table of (label, value); rows whose value is None are left out."""
    table = Table(title=Text(title), show_header=False, title_justify="left")
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for label, value in rows:
        if value is not None:
            table.add_row(label, Text(str(value)))
    return table


def _checkpoint_table(c: dict[str, Any]) -> Table:
    m, t, best = c["model"], c["training"] or {}, c["best"]
    kinds = {"training": "training checkpoint (resumable)", "averaged": "averaged weights",
             "imported": "imported pretrained model", "weights": "weights only (best)"}
    return _facts(f"checkpoint {c['path']}", [
        ("kind", kinds[c["kind"]]),
        ("averaged from", ", ".join(Path(p).name for p in c["averaged_from"] or []) or None),
        ("imported from", c["imported_from"]),
        ("languages", f"{c['src_lang']} -> {c['tgt_lang']}"),
        ("vocabulary", f"{c['src_vocab_size']:,} / {c['tgt_vocab_size']:,}"
                       f" ({'joint' if c['joint_vocab'] else 'separate'}"
                       f"{', imported ids' if c['imported_vocab'] else ''})"),
        ("layers", f"{m['encoder_layers']} encoder, {m['decoder_layers']} decoder"),
        ("dimensions", f"d_model {m['d_model']}, {m['n_heads']} heads, ffn {m['d_ff']}"),
        ("norm", "pre-norm" if m["pre_norm"] else "post-norm (paper)"),
        ("differs from the paper", _variant(m)),
        ("tied embeddings", c["tied_embeddings"]),
        ("dropout", f"{m['dropout']} (attention {m['attention_dropout']}, activation {m['activation_dropout']})"),
        ("max positions", m["max_positions"]),
        ("parameters", f"{c['parameters']:,}"),
        ("dtype", c["dtype"]),
        ("step", t.get("step")),
        ("epoch", t.get("epoch")),
        ("training time", _duration(t.get("elapsed_s"))),
        ("processes", t.get("processes")),
        ("best valid", _score(best)),
        ("data fingerprint", _short(c["data_fingerprint"])),
        ("file size", _size(c["size_bytes"])),
    ])


def _variant(m: dict[str, Any]) -> str | None:
    """The model keys where a (published, e.g. Marian) model differs from the paper's, or None."""
    paper = dataclasses.asdict(ModelConfig())
    keys = ("activation", "position_layout", "scale_embedding", "output_bias")
    return ", ".join(f"{k} {m[k]}" for k in keys if m.get(k, paper[k]) != paper[k]) or None


def _run_tables(r: dict[str, Any]) -> list[Any]:
    cfg, metrics = r["config"] or {}, r["metrics"] or {}
    t, m, best = cfg.get("train") or {}, cfg.get("model") or {}, metrics.get("best")
    chosen = Path(r["translate_checkpoint"]).name if r["translate_checkpoint"] else None
    summary = _facts(f"run {r['path']}", [
        ("data dir", (cfg.get("data") or {}).get("dir")),
        ("model", f"{m['encoder_layers']}+{m['decoder_layers']} layers, d_model {m['d_model']}, {m['n_heads']} heads, "
                  f"ffn {m['d_ff']}, {'pre' if m['pre_norm'] else 'post'}-norm" if m else None),
        ("batches", f"{t['max_tokens']:,} tokens x {t['update_freq']}" if t else None),
        ("schedule", f"{t['schedule']}, lr {t['lr']:g}, warmup {t['warmup']:,}" if t else None),
        ("max updates", f"{t['max_updates']:,}" if t else None),
        ("last step", metrics.get("last_step")),
        ("validations", metrics.get("validations")),
        ("best valid", f"{_score(best)} at step {best['step']}" if best else None),
        ("translate uses", chosen or "none (no checkpoint yet)"),
        *(("problem", p) for p in r["problems"]),
    ])
    files = Table(title="checkpoints", title_justify="left")
    for name, justify in (("file", "left"), ("step", "right"), ("size", "right"), ("", "left")):
        files.add_column(name, justify=justify)  # type: ignore[arg-type]
    for f in r["checkpoints"]:
        mark = "<- translate" if f["name"] == chosen else ""
        files.add_row(f["name"], "" if f["step"] is None else str(f["step"]), _size(f["size_bytes"]), mark)
    return [summary, files] + ([_checkpoint_table(r["checkpoint"])] if r["checkpoint"] else [])


def _data_tables(d: dict[str, Any]) -> list[Table]:
    filters = d["filters"] or {}
    dropped = ", ".join(f"{k} {v:,}" for k, v in filters.items() if k not in ("read", "kept") and v)
    summary = _facts(f"data dir {d['path']}", [
        ("languages", f"{d['src_lang']} -> {d['tgt_lang']}"),
        ("vocabulary", f"{d['src_vocab_size']:,} / {d['tgt_vocab_size']:,} "
                       f"({'joint' if d['joint_vocab'] else 'separate'}, {d['spm_type'] or '?'})"),
        ("cleaning", f"read {filters['read']:,}, kept {filters['kept']:,}" + (f", dropped {dropped}" if dropped else "")
         if "read" in filters and "kept" in filters else None),
        ("fingerprint", _short(d["fingerprint"])),
    ])
    splits = Table(title="splits", title_justify="left")
    for name in ("split", "pairs", "src tokens", "tgt tokens"):
        splits.add_column(name, justify="left" if name == "split" else "right")
    for name, s in d["splits"].items():
        splits.add_row(name, *("" if s[k] is None else f"{s[k]:,}" for k in ("pairs", "src_tokens", "tgt_tokens")))
    files = Table(title="files", title_justify="left")
    files.add_column("file")
    files.add_column("size", justify="right")
    for f in d["files"]:
        files.add_row(f["name"], "missing" if f["size_bytes"] is None else _size(f["size_bytes"]))
    return [summary, splits, files]


def _score(best: dict[str, Any] | None) -> str | None:
    """BLEU as papers print it (with its tokenizer), a loss as the training log does."""
    if best is None or best["metric"] != "bleu":
        return None if best is None else f"loss {best['value']:.3f}"
    return f"bleu {best['value']:.2f}" + (f" (tokenize {best['tokenize']})" if "tokenize" in best else "")


def _short(fingerprint: str | None) -> str | None:
    """Enough of a sha256 to compare by eye (--json has it whole)."""
    return f"{fingerprint[:16]}..." if fingerprint else None


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    exponent = min(int(math.log(n, 1024)), 3)
    return f"{n / 1024**exponent:.1f} {('KiB', 'MiB', 'GiB')[exponent - 1]}"


def _duration(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"
