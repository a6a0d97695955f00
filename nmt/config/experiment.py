"""Experiment configuration: dataclass sections loaded from YAML with `--set a.b=c` overrides.

Every key is checked: an unknown key or a value of the wrong type is a one-line `ConfigError`
that names the key and suggests the closest valid one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from nmt.config.distill import DistillConfig, check_distill
from nmt.config.serve import ServeConfig, check_serve
from nmt.config.values import check_type, closest
from nmt.errors import ConfigError, first_line


@dataclass
class DataConfig:
    """Where raw text comes from and how `nmt prepare` turns it into a data dir."""

    dir: str = "data"  # prepared data dir (output of prepare, input of train)
    src_lang: str = "en"
    tgt_lang: str = "de"
    # Inputs: a file prefix (`data/train` -> data/train.en + data/train.de), a .tsv file, a .tmx (.tmx.gz) file,
    # or a `datasets` name / local dataset dir (with hf_* options below). None = split absent.
    train: str | None = None
    valid: str | None = None
    test: str | None = None
    hf_config: str | None = None  # `datasets` configuration name (e.g. "de-en")
    hf_train_split: str = "train"
    hf_valid_split: str = "validation"
    hf_test_split: str = "test"
    src_column: str | None = None  # column holding the source text (default: src_lang)
    tgt_column: str | None = None  # column holding the target text (default: tgt_lang)
    # Cleaning (training split only; valid/test are never dropped).
    normalize: str | None = "NFC"  # Unicode normalization form, or null
    max_len: int = 256  # max SentencePiece tokens per side (training pairs only)
    max_ratio: float = 3.0  # max len(longer)/len(shorter) in tokens (training pairs only)
    dedup: bool = False
    # SentencePiece
    tokenizer_from: str | None = None  # a checkpoint whose tokenizer encodes the data (no SentencePiece training)
    vocab_size: int = 8000
    spm_type: str = "bpe"  # bpe | unigram
    joint_vocab: bool = True
    # share of the corpus' characters the vocabulary must hold; null (auto): 0.9995 when a language of the pair is
    # Chinese/Japanese/Korean (as SentencePiece advises) unless its characters fit in half the vocabulary, else 1.0
    character_coverage: float | None = None
    byte_fallback: bool | None = None  # rare characters as UTF-8 byte pieces, never <unk>; null (auto): on for CJK
    spm_sample: int = 2_000_000  # cap on sentences used to train SentencePiece
    num_proc: int = 1  # processes for encoding
    seed: int = 1


@dataclass
class ModelConfig:
    """The Transformer of Vaswani et al. 2017 (defaults: the paper's base model)."""

    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    pre_norm: bool = False  # paper: post-norm
    max_positions: int = 1024
    share_all_embeddings: bool = True  # encoder+decoder+output tied when the vocabulary is joint
    # Where other published models (OPUS-MT / Marian) differ from the paper; the defaults are the paper's.
    activation: str = "relu"  # relu | gelu | swish: the feed-forward network's nonlinearity
    position_layout: str = "interleaved"  # interleaved: sin/cos alternate (paper) | halves: all sin, then all cos
    scale_embedding: bool = True  # embeddings x sqrt(d_model) (§3.4)
    output_bias: bool = False  # a fixed bias on the output logits (Marian's final_logits_bias)


@dataclass
class TrainConfig:
    """Optimisation, precision, checkpointing, validation."""

    run_dir: str = "runs/latest"
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    # auto | bf16 | fp16 | none. auto: bf16 on CUDA with native bf16, fp16 on older CUDA; on CPU bf16 where
    # the CPU has native bf16 (AVX512-BF16/AMX) and d_model >= 256 (where it pays), else none
    amp: str = "auto"
    threads: int = 0  # CPU threads (0 = torch default)
    compile: bool = False  # torch.compile the model: on a GPU faster updates after a compile of about a minute
    # torch.compile's mode: default | reduce-overhead (adds CUDA graphs: each forward and backward replayed as one
    # launch; with train.packed one recording serves the run) | max-autotune | max-autotune-no-cudagraphs
    # (nmt.train.compiling; on a CPU the CUDA graph modes compile as default does)
    compile_mode: str = "default"
    # the loss's chunks as one torch.compile'd function of a fixed shape (nmt.loss_compiled): fused passes over the
    # bf16 logits, no index_add_; for a GPU (on a CPU ~0.6x the eager loss's time, after ~30 s of compiling)
    compile_loss: bool = False
    seed: int = 1
    # padded tokens per batch: sentences x the longest side in it (source + EOS or target + BOS/EOS, whichever is
    # longer), what the batch's tensors hold; also the validation loss's batches (train.packed: each side's sum)
    max_tokens: int = 4096
    update_freq: int = 1  # gradient accumulation: batches per update
    # each batch's source and target lengths padded up to a multiple of this (in max_tokens' count too): 8 gives
    # tensor cores and torch.compile fewer, rounder shapes, at a cost in padding (docs/gpu.md: Multi30k's target
    # slots 99.5% real at 1, 81% at 8)
    length_multiple: int = 1
    # each batch's sentences end to end in one row of max_tokens + 1 (to a multiple of length_multiple), budgeted
    # by their summed lengths: no padding, one shape every update, varlen FlashAttention on a GPU (docs/gpu.md);
    # on a CPU correct but slow (a dense [tokens x tokens] mask); needs model.attention_dropout 0
    packed: bool = False
    max_updates: int = 100_000
    max_epochs: int = 0  # 0 = unlimited
    max_minutes: float = 0.0  # training time budget (0 = unlimited); averaging happens inside it
    lr: float = 7e-4  # peak learning rate (schedule: inverse_sqrt); scale factor for `noam`
    schedule: str = "inverse_sqrt"  # inverse_sqrt (fairseq: linear warmup to lr) | noam (paper)
    warmup: int = 4000
    warmup_init_lr: float = 1e-7
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1e-9
    weight_decay: float = 0.0
    clip_norm: float = 0.0  # 0 = no clipping
    label_smoothing: float = 0.1
    log_every: int = 100
    valid_every: int = 1000
    valid_bleu_sentences: int = 500  # greedy-decode this many valid sentences for BLEU (0 = skip BLEU)
    best_metric: str = "bleu"  # bleu | loss (loss when valid_bleu_sentences is 0: no BLEU is computed)
    # sacreBLEU tokenizer of validation BLEU; auto: chosen for the target language (zh for Chinese...:
    # nmt.score.bleu_tokenizer), then written into the run's config and checkpoints, which a resumed run keeps
    bleu_tokenize: str = "auto"
    patience: int = 0  # validations without improvement before stopping (0 = never)
    save_every: int = 1000
    keep_last: int = 5  # step checkpoints kept; at least average_last are (averaging reads them): max of the two
    average_last: int = 5  # average this many last checkpoints into averaged.pt at the end (0/1 = off)
    max_bad_updates: int = 10  # abort after this many consecutive NaN/inf updates
    tensorboard: bool = False  # also write the metrics as TensorBoard scalars to RUN_DIR/tensorboard
    resume_on_new_data: bool = False  # continue a run whose data dir was prepared again (else an error)
    # start from this checkpoint's weights (and model config) with a fresh optimizer and schedule: fine-tuning
    # an imported or earlier model. Ignored once the run dir has checkpoints of its own (they are resumed)
    init_from: str | None = None

    @property
    def checkpoints_kept(self) -> int:
        """keep_last, but never fewer than average_last: the averaging at the end reads them."""
        return max(self.keep_last, self.average_last)

    @property
    def best_by(self) -> str:
        """The metric best.pt and patience follow: BLEU only when validation computes it, else the loss."""
        return "bleu" if self.best_metric == "bleu" and self.valid_bleu_sentences > 0 else "loss"


def recorded_bleu_tokenize(value: str | None) -> str:
    """The tokenizer a run's validation BLEU used, from its recorded train.bleu_tokenize: runs from before it was
    recorded (or that computed no BLEU) say auto or nothing, and their BLEU was 13a."""
    return "13a" if value in (None, "auto") else str(value)


@dataclass
class DecodeConfig:
    """Search settings for `nmt translate` (and greedy validation)."""

    beam: int = 4
    length_penalty: float = 0.6  # alpha of the length penalty
    # gnmt: logprob / ((5 + L) / 6) ** alpha (Wu et al. 2016) | average: logprob / L ** alpha (Hugging Face
    # generate, Marian; alpha 1 = mean token log-prob). L = output tokens, EOS included
    length_penalty_type: str = "gnmt"
    max_len_a: float = 1.0  # max target length = a * src_len + b
    max_len_b: int = 50
    # padded source tokens per batch: sentences x the longest source in it (+ EOS), as translate, serve and the
    # validation BLEU batch
    max_tokens: int = 4096
    chunk_lines: int = 2000  # lines read, sorted and translated together (bounds memory)
    nbest: int = 1
    max_input_tokens: int = 1000  # longer inputs are truncated with a warning
    prefix: str | None = None  # a source vocabulary entry put before every line, e.g. >>fra<< (multilingual OPUS-MT)
    min_len: int = 0  # output tokens before EOS may be written (fairseq's --min-len; 1: never an empty output)
    sampling: bool = False  # sample, not search (fairseq's --sampling): `beam` samples, the best `nbest` kept
    sampling_topk: int = 0  # from the k most likely tokens (0: all)
    sampling_topp: float = 1.0  # from the fewest most likely tokens holding this probability (1: all)
    sampling_temperature: float = 1.0
    sampling_seed: int = 0


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)

    def __post_init__(self) -> None:
        self.given: set[str] = set()  # "section.key" set by a config file or --set (the rest are defaults)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SECTIONS = {f.name: f.type for f in fields(Config)}


def apply_dict(cfg: Config, data: dict[str, Any], origin: str = "config") -> Config:
    """Merge a nested {section: {key: value}} dict into `cfg`, validating every key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: top level must be a mapping of sections {sorted(SECTIONS)}")
    for section, values in data.items():
        if section not in SECTIONS:
            raise ConfigError(f"{origin}: unknown section '{section}'{closest(str(section), list(SECTIONS))}")
        if values is None:
            continue
        if not isinstance(values, dict):
            raise ConfigError(f"{origin}: section '{section}' must be a mapping")
        target = getattr(cfg, section)
        valid = {f.name: f.type for f in fields(target)}
        for key, value in values.items():
            if key not in valid:
                raise ConfigError(
                    f"{origin}: unknown key '{section}.{key}'{closest(str(key), list(valid))}"
                )
            setattr(target, key, check_type(f"{section}.{key}", value, valid[key]))
            cfg.given.add(f"{section}.{key}")
    check_config(cfg)
    return cfg


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """`["train.lr=5e-4", "model.pre_norm=true"]` -> nested dict; values are parsed as YAML scalars."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair or "." not in pair.split("=", 1)[0]:
            raise ConfigError(f"--set expects section.key=value, got '{pair}'")
        dotted, raw = pair.split("=", 1)
        section, key = dotted.strip().split(".", 1)
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        out.setdefault(section, {})[key] = value
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Defaults <- YAML file <- `--set` overrides."""
    cfg = Config()
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            raise ConfigError(f"{p}: not valid YAML ({first_line(e)})") from None
        apply_dict(cfg, data, origin=str(p))
    if overrides:
        apply_dict(cfg, parse_overrides(overrides), origin="--set")
    return cfg


def config_from_dict(data: dict[str, Any]) -> Config:
    """Rebuild a Config saved with `to_dict()` (e.g. inside a checkpoint)."""
    return apply_dict(Config(), data, origin="saved config")


# Model keys a fine-tuning run may set for itself: regularisation, not architecture
FINE_TUNING_KEYS = ("dropout", "attention_dropout", "activation_dropout")


def inherit_model(saved: ModelConfig, cfg: Config, origin: str) -> ModelConfig:
    """The model config of a run that starts from a checkpoint (train.init_from): the checkpoint's, with the
    run's own dropouts where its config sets them. Any other model key the config sets to another value
    than the checkpoint's is a ConfigError: the weights fix the architecture."""
    model = ModelConfig(**asdict(saved))
    for f in fields(ModelConfig):
        if f"model.{f.name}" not in cfg.given:
            continue
        mine, theirs = getattr(cfg.model, f.name), getattr(saved, f.name)
        if f.name in FINE_TUNING_KEYS:
            setattr(model, f.name, mine)
        elif mine != theirs:
            raise ConfigError(f"model.{f.name}={mine!r} conflicts with {origin}, whose model has {theirs!r}: "
                              f"with train.init_from the model is the checkpoint's (only the dropouts may be set)")
    return model


def check_config(cfg: Config) -> None:
    """Every rule on config values lives here (one function per section), each a one-line ConfigError
    naming the key. Called whenever a config is loaded or rebuilt."""
    for check, section in ((check_data, cfg.data), (check_model, cfg.model), (check_train, cfg.train),
                           (check_decode, cfg.decode), (check_serve, cfg.serve),
                           (check_distill, cfg.distill)):
        check(section)
    _check([(not (cfg.train.packed and cfg.model.attention_dropout > 0),
             "train.packed needs model.attention_dropout 0 (the varlen attention kernel has no dropout)")])


def _check(checks: list[tuple[bool, str]]) -> None:
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)


def check_data(d: DataConfig) -> None:
    """Also called by `prepare` itself, which may be handed a DataConfig built in code."""
    _check([
        (d.src_lang != d.tgt_lang, f"data.src_lang and data.tgt_lang are both '{d.src_lang}'"),
        (d.vocab_size >= 8, "data.vocab_size must be >= 8"),
        (d.spm_type in ("bpe", "unigram"), "data.spm_type must be 'bpe' or 'unigram'"),
        (d.max_len > 0, "data.max_len must be > 0"),
        (d.max_ratio >= 1.0, "data.max_ratio must be >= 1"),
        (d.character_coverage is None or 0 < d.character_coverage <= 1,
         "data.character_coverage must be in (0, 1] (or null: chosen for the languages)"),
        (d.num_proc >= 1, "data.num_proc must be >= 1"),
        (d.spm_sample > 100, f"SentencePiece sample cap {d.spm_sample} is too small (data.spm_sample must be > 100)"),
        (d.normalize in (None, "NFC", "NFKC", "NFD", "NFKD"), "data.normalize must be NFC/NFKC/NFD/NFKD or null"),
        (0 <= d.seed < 2**32, f"data.seed must be in [0, 2**32), got {d.seed}"),  # numpy would raise
    ])


def check_model(m: ModelConfig) -> None:
    _check([
        (m.d_model > 0 and m.d_model % max(m.n_heads, 1) == 0,
         "model.d_model must be a positive multiple of model.n_heads"),
        (m.n_heads > 0, "model.n_heads must be > 0"),
        (m.d_ff > 0, "model.d_ff must be > 0"),
        (m.encoder_layers > 0 and m.decoder_layers > 0, "model.*_layers must be > 0"),
        (all(0 <= p < 1 for p in (m.dropout, m.attention_dropout, m.activation_dropout)),
         "model dropouts must be in [0, 1)"),
        (m.max_positions > 0, "model.max_positions must be > 0"),
        (m.activation in ACTIVATIONS, f"model.activation must be {'|'.join(ACTIVATIONS)}"),
        (m.position_layout in ("interleaved", "halves"), "model.position_layout must be interleaved|halves"),
    ])


ACTIVATIONS = ("relu", "gelu", "swish")
LENGTH_PENALTY_TYPES = ("gnmt", "average")  # the forms nmt.search.scoring.length_penalty_divisor computes
# torch.compile's modes (train.compile_mode; nmt.train.compiling says which record CUDA graphs)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def check_train(t: TrainConfig) -> None:
    _check([
        (t.amp in ("auto", "bf16", "fp16", "none"), "train.amp must be auto|bf16|fp16|none"),
        (t.schedule in ("inverse_sqrt", "noam"), "train.schedule must be inverse_sqrt|noam"),
        (t.max_tokens > 0, "train.max_tokens must be > 0"),
        (t.update_freq >= 1, "train.update_freq must be >= 1"),
        (t.length_multiple >= 1, "train.length_multiple must be >= 1"),
        (t.compile_mode in COMPILE_MODES, f"train.compile_mode must be {'|'.join(COMPILE_MODES)}"),
        (t.compile or t.compile_mode == "default", f"train.compile_mode {t.compile_mode} needs train.compile: true"),
        (t.max_updates >= 0, "train.max_updates must be >= 0"),
        (t.max_minutes >= 0, "train.max_minutes must be >= 0"),
        (t.lr > 0, "train.lr must be > 0"),
        (t.warmup >= 0, "train.warmup must be >= 0"),
        (len(t.betas) == 2, "train.betas must be a list of two floats"),
        (0 <= t.label_smoothing < 1, "train.label_smoothing must be in [0, 1)"),
        (t.best_metric in ("bleu", "loss"), "train.best_metric must be bleu|loss"),
        (t.log_every > 0 and t.valid_every > 0 and t.save_every > 0,
         "train.log_every/valid_every/save_every must be > 0"),
        (t.keep_last >= 1, "train.keep_last must be >= 1"),
        (t.max_bad_updates >= 1, "train.max_bad_updates must be >= 1"),
        # values torch/numpy would reject with a traceback
        (0 <= t.seed < 2**32, f"train.seed must be in [0, 2**32), got {t.seed}"),
        (all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in t.betas),
         f"train.betas must be two numbers in [0, 1), got {t.betas}"),
        (t.eps >= 0, f"train.eps must be >= 0, got {t.eps}"),
        (t.weight_decay >= 0, f"train.weight_decay must be >= 0, got {t.weight_decay}"),
        (math.isfinite(t.lr), f"train.lr must be finite, got {t.lr}"),
        (0 <= t.warmup_init_lr < math.inf, f"train.warmup_init_lr must be finite and >= 0, got {t.warmup_init_lr}"),
    ])
    if t.bleu_tokenize != "auto":
        from sacrebleu.metrics import BLEU  # here only: importing it costs ~0.2 s

        _check([(t.bleu_tokenize in BLEU.TOKENIZERS,
                 f"train.bleu_tokenize must be auto or one of sacreBLEU's: {', '.join(BLEU.TOKENIZERS)}")])


def check_decode(d: DecodeConfig) -> None:
    _check([
        (d.beam >= 1, "decode.beam must be >= 1"),
        (1 <= d.nbest <= d.beam, "decode.nbest must be between 1 and decode.beam"),
        (d.max_tokens > 0 and d.chunk_lines > 0, "decode.max_tokens/chunk_lines must be > 0"),
        (d.max_input_tokens > 0, "decode.max_input_tokens must be > 0"),
        (d.length_penalty_type in LENGTH_PENALTY_TYPES,
         f"decode.length_penalty_type must be {'|'.join(LENGTH_PENALTY_TYPES)}"),
        (d.min_len >= 0 and d.sampling_topk >= 0, "decode.min_len and decode.sampling_topk must be >= 0"),
        (0 < d.sampling_topp <= 1 and d.sampling_temperature > 0,
         "decode.sampling_topp must be in (0, 1] and decode.sampling_temperature > 0"),
    ])
