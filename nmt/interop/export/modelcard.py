"""The README.md (Hugging Face model card) of `nmt export --to hf`: YAML front matter (language tags,
`pipeline_tag: translation`, license, tags), how to call the model, what it is, the search settings and how
they differ from nmt's, and — when the checkpoint lies in a run dir — the training data and the best
validation BLEU with its sacreBLEU signature."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from nmt.config.experiment import recorded_bleu_tokenize
from nmt.errors import NmtError
from nmt.interop.modelspec import ModelDescription
from nmt.rundir import RunDir


def model_card(model: ModelDescription, generation: dict[str, Any], model_class: str = "MarianMTModel") -> str:
    """The card of a directory whose config.json names `model_class` (nmt.interop.export.hf.CLASSES)."""
    src, tgt = model.langs
    cfg, decode = model.config, model.decode
    family = "pegasus" if model_class.startswith("Pegasus") else "marian"  # the transformers family that runs it
    remote = model_class == "NmtPreNormMTModel"  # the modeling file shipped beside the weights
    norm = "pre-norm Transformer (a final LayerNorm after each stack)" if cfg.pre_norm else "post-norm Transformer"
    front = {"language": list(dict.fromkeys([src, tgt])), "license": "unknown", "library_name": "transformers",
             "pipeline_tag": "translation",
             "tags": ["translation", family, "nmt", *(["custom_code"] if remote else [])]}
    run = run_facts(model.source)
    vocab = (f"one joint vocabulary of {len(model.src_vocab)} entries" if model.joint
             else f"separate vocabularies ({len(model.src_vocab)} source, {len(model.tgt_vocab)} target entries)")
    origin = f"imported from `{model.imported_from}` and " if model.imported_from else ""
    lines = [
        "---", yaml.safe_dump(front, sort_keys=False, allow_unicode=True).strip(), "---", "",
        f"# {src}-{tgt} translation ({model.source.name})", "",
        f"A Transformer translation model {origin}exported with `nmt export "
        f"--to hf` (the nmt toolkit), as a Hugging Face `{model_class}`"
        + {"MarianMTModel": "", "PegasusForConditionalGeneration": " (Pegasus' layers are nmt's pre-norm layers "
           "exactly; the tokenizer is Marian's)", "NmtPreNormMTModel": " (MarianMTModel made pre-norm by "
           "modeling_nmt_prenorm.py, shipped here: load it with `trust_remote_code=True`)"}[model_class] + ".", "",
        "## How to use", "", "```python",
        "from transformers import AutoModelForSeq2SeqLM, MarianTokenizer" if remote
        else f"from transformers import {model_class}, MarianTokenizer", "",
        'path = "."  # this directory, or its hub repo id',
        "tokenizer = MarianTokenizer.from_pretrained(path)",
        "model = AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True)" if remote
        else f"model = {model_class}.from_pretrained(path)",
        f'batch = tokenizer(["{example(src)}"], return_tensors="pt", padding=True)',
        "print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))", "```", "",
        "## Model", "",
        f"- {norm}, {cfg.encoder_layers} encoder and {cfg.decoder_layers} decoder layers, d_model "
        f"{cfg.d_model}, {cfg.n_heads} heads, feed-forward {cfg.d_ff} ({cfg.activation}), sinusoidal positions, "
        f"embeddings {'scaled by sqrt(d_model)' if cfg.scale_embedding else 'unscaled'}",
        f"- SentencePiece tokenization (source.spm, target.spm), {vocab}",
        "- exported exactly: nmt's interleaved sinusoids are Marian's sine/cosine halves after one fixed "
        "permutation of the model dimension, applied to every weight that touches it"
        if cfg.position_layout == "interleaved" else "- weights as nmt has them (Marian's sine/cosine halves)",
        "",
        "## Search settings", "",
        f"generation_config.json: beam {generation['num_beams']}, length penalty {generation['length_penalty']}, "
        f"max_length {generation['max_length']}, decoding from token {generation['decoder_start_token_id']} and "
        "never emitting `<pad>`" + (" or `<s>`" if len(generation["bad_words_ids"]) > 1 else "") + ".",
        "",
    ]
    if decode.length_penalty_type == "gnmt":
        lines += [
            "nmt scores beam hypotheses with the GNMT length penalty, log-prob / ((5 + L) / 6) ** alpha; "
            "`generate()` has only the average form, log-prob / L ** alpha, with the same alpha here. Beam "
            "search can therefore pick another hypothesis than `nmt translate` on some sentences; "
            "`nmt translate --set decode.length_penalty_type=average` reproduces generate's choice, and greedy "
            "search (num_beams=1) is identical.", ""]
    lines += [
        f"nmt bounds a translation at {decode.max_len_a:g} x source length + {decode.max_len_b} tokens; "
        "generate() at max_length tokens. MarianTokenizer applies neither nmt's Unicode normalization of the "
        "training data nor its control-character cleaning: give it clean text.", ""]
    if run:
        lines += ["## Training", "", *run, ""]
    return "\n".join(lines)


def example(lang: str) -> str:
    return {"en": "How are you?", "de": "Wie geht es dir?", "fr": "Comment vas-tu ?"}.get(lang, "...")


def run_facts(checkpoint: Path) -> list[str]:
    """What the run dir holding `checkpoint` records: the training data, the best validation BLEU."""
    run = RunDir(checkpoint.parent)
    facts = []
    config: dict[str, Any] = {}
    if run.config_file.is_file():
        try:
            config = yaml.safe_load(run.config_file.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            config = {}
    data = config.get("data") if isinstance(config.get("data"), dict) else {}
    splits = [f"{split} `{data[split]}`" for split in ("train", "valid", "test") if data.get(split)]
    if splits:
        dataset = f" (configuration {data['hf_config']})" if data.get("hf_config") else ""
        facts.append(f"- data: {', '.join(splits)}{dataset}, {data.get('src_lang')}-{data.get('tgt_lang')}")
    try:
        records = run.read_metrics() if run.metrics_file.is_file() else []
    except NmtError:
        records = []
    scored = [r for r in records if r.get("type") == "valid" and isinstance(r.get("bleu"), (int, float))
              and math.isfinite(r["bleu"])]
    if scored:
        best = max(scored, key=lambda r: r["bleu"])
        train = config.get("train") if isinstance(config.get("train"), dict) else {}
        n = train.get("valid_bleu_sentences")
        sentences = f"the first {n} validation sentences" if n else "the validation set"
        tokenize = recorded_bleu_tokenize(train.get("bleu_tokenize"))
        facts.append(f"- validation BLEU {best['bleu']:.2f} at update {int(best['step'])} (greedy search, "
                     f"{sentences}, sacreBLEU `{bleu_signature(tokenize)}`)")
    steps = [r for r in records if r.get("type") == "train"]
    if steps:
        facts.append(f"- {int(steps[-1]['step'])} updates")
    return facts


def bleu_signature(tokenize: str = "13a") -> str:
    """The signature of the BLEU nmt's validation computed with this tokenizer (this sacreBLEU version)."""
    try:
        from nmt.score import score
        return str(score(["a"], [["a"]], metrics=("bleu",), tokenize=tokenize)["bleu"]["signature"])
    except Exception:  # sacreBLEU missing or changed, or its tokenizer's extra: the card goes without
        return f"nrefs:1|case:mixed|eff:no|tok:{tokenize}|smooth:exp"
