"""nmt.checkpoint.Checkpoint, the one owner of the checkpoint's keys, and Translator.load, the one way to open
a checkpoint for translation."""

from __future__ import annotations

import pytest
import torch

from nmt import checkpoint
from nmt.checkpoint import Checkpoint
from nmt.config.experiment import Config, load_config
from nmt.errors import CheckpointError
from nmt.translation.translator import ModelOptions, Translator
from tests.helpers.paths import DEMO_MODEL

GOLDEN = DEMO_MODEL  # written by format version 1


def test_a_version_1_file_loads_with_the_output_projection_under_its_new_names():
    raw = torch.load(GOLDEN, weights_only=True)
    assert raw["version"] == 1 and "output.weight" not in raw["model"]
    ckpt = checkpoint.load(GOLDEN)
    assert isinstance(ckpt, Checkpoint) and ckpt.path == GOLDEN and ckpt["version"] == checkpoint.VERSION
    assert ckpt.weights["output.weight"] is ckpt.weights["tgt_embed.weight"]  # tied: one tensor, two names
    model = ckpt.build_model()  # strict load: every name fits
    assert model.output.weight is model.tgt_embed.weight


def test_version_1_output_bias_is_renamed():
    weights = {"tgt_embed.weight": torch.zeros(3, 2), "output_bias": torch.ones(3)}
    checkpoint._upgrade_weights_v1(weights)
    assert "output_bias" not in weights and torch.equal(weights["output.bias"], torch.ones(3))


def test_accessors_and_kinds(tmp_path):
    ckpt = checkpoint.load(GOLDEN)
    tokenizer, cfg = ckpt.tokenizer(), ckpt.config
    made = Checkpoint.create(ckpt.weights, cfg, tokenizer, ckpt.vocab_sizes, langs=("en", "de"),
                             data_fingerprint="abc")
    assert made.kind == "weights" and made.train_state is None and made.progress is None and made.processes is None
    assert made.langs == ("en", "de") and made.data_fingerprint == "abc" and made.imported_from is None
    trained = made.with_training({"step": 7, "rng": [1, 2], "progress": {"epoch": 2}})
    assert trained.kind == "training" and trained.processes == 2 and trained.progress == {"epoch": 2}
    assert made.kind == "weights"  # with_training makes a new checkpoint
    trained.save(tmp_path / "t.pt")
    again = checkpoint.load(tmp_path / "t.pt")
    assert again.kind == "training" and again.vocab_sizes == ckpt.vocab_sizes and again.model_config == cfg.model
    assert type(torch.load(tmp_path / "t.pt", weights_only=True)) is dict  # the file holds a plain mapping
    imported = Checkpoint.create(ckpt.weights, cfg, tokenizer, ckpt.vocab_sizes, langs=("en", "de"),
                                 imported_from="Helsinki-NLP/opus-mt-en-de")
    assert imported.kind == "imported"


@pytest.mark.parametrize("key, value, message", [
    ("vocab", {"src": "many"}, "vocabulary sizes are missing or corrupt"),
    ("model", [1, 2], "weights are not a state dict"),
    ("config", "nonsense", "config is not a mapping"),
    ("tokenizer", {"src_model": 3}, ""),
])
def test_a_damaged_field_is_a_one_line_error_naming_the_file(tmp_path, key, value, message):
    ckpt = checkpoint.load(GOLDEN)
    ckpt[key] = value
    ckpt.save(tmp_path / "bad.pt")
    bad = checkpoint.load(tmp_path / "bad.pt")
    read = {"vocab": lambda: bad.vocab_sizes, "model": lambda: bad.weights, "config": lambda: bad.config,
            "tokenizer": bad.tokenizer}[key]
    with pytest.raises(CheckpointError) as e:
        read()
    assert str(e.value).startswith(str(tmp_path / "bad.pt")) and message in str(e.value)
    assert "\n" not in str(e.value)


def test_translator_load_takes_the_search_settings_from_the_config_or_the_checkpoint():
    """With a config (--config given), its decode section; without, the checkpoint's own with the user's
    decode overrides on top; non-decode overrides are not search settings."""
    saved = checkpoint.load(GOLDEN).decode_config()
    cfg = Config()
    cfg.decode.beam = saved.beam + 2
    assert Translator.load(GOLDEN, cfg, ModelOptions(dtype="fp32")).decode.beam == saved.beam + 2
    cfg = load_config(None, ["decode.nbest=2", "train.lr=1"])  # as `nmt translate --set ...` loads it
    cfg.decode.beam = saved.beam + 2  # a value the user did not set (not in cfg.given): the checkpoint's stays
    own = Translator.load(GOLDEN, cfg, ModelOptions(dtype="fp32", config_given=False))
    assert own.decode.beam == saved.beam and own.decode.nbest == 2
    assert Translator.load(GOLDEN).decode == saved


def test_search_settings_change_per_call_without_changing_the_translator():
    t = Translator.load(GOLDEN, opts=ModelOptions(dtype="fp32", config_given=False))
    default = t.decode
    lines = ["three hundred forty-two", "the big red dogs"]
    nbest = t.translate_chunk(lines, decode=t.decode_with(beam=4, nbest=3))
    assert all(len(r.hypotheses) == 3 for r in nbest) and t.decode is default
    greedy = t.translate_chunk(lines, decode=t.decode_with(beam=1))
    again = t.translate_chunk(lines, decode=t.decode_with(beam=1, nbest=1))
    assert [r.text[0] for r in greedy] == [r.text[0] for r in again]
    assert all(len(r.hypotheses) == 1 for r in greedy)


@pytest.mark.parametrize("key, value, message", [
    ("d_model", 2**20, "src_embed.weight is [400, 64], the config makes [400, 1048576]"),
    ("d_ff", 2**30, "encoder_layers.0.ffn.w1.weight is [128, 64]"),
    ("encoder_layers", 10**9, "model.encoder_layers=1000000000, its weights hold 2"),
    ("max_positions", 2**30, "256.0 GiB positional table"),
])
def test_a_config_that_does_not_fit_the_weights_is_refused_before_the_model_is_allocated(tmp_path, key, value,
                                                                                          message):
    """Sizes that would take the machine's memory (or fail in an allocation with a traceback) are compared
    with the stored tensors first: a one-line error naming the file, with no model built."""
    ckpt = checkpoint.load(GOLDEN)
    ckpt["config"]["model"][key] = value
    ckpt.save(tmp_path / "bad.pt")
    bad = checkpoint.load(tmp_path / "bad.pt")
    with pytest.raises(CheckpointError) as e:
        bad.build_model()
    assert str(e.value).startswith(f"checkpoint {tmp_path / 'bad.pt'}: ") and message in str(e.value)
    assert "\n" not in str(e.value)
    ckpt["vocab"]["tgt"] = 2**40  # a vocabulary size the weights do not have either
    ckpt["config"]["model"][key] = checkpoint.load(GOLDEN)["config"]["model"][key]
    with pytest.raises(CheckpointError, match="tgt_embed.weight is \\[400, 64\\]"):
        ckpt.check_model_shapes()
