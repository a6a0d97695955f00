from __future__ import annotations

import pytest

from nmt.config.experiment import Config, config_from_dict, load_config, parse_overrides
from nmt.errors import ConfigError
from tests.helpers.paths import CONFIGS


def test_defaults_are_the_paper_base_model():
    cfg = Config()
    assert (cfg.model.d_model, cfg.model.n_heads, cfg.model.d_ff) == (512, 8, 2048)
    assert (cfg.model.encoder_layers, cfg.model.decoder_layers, cfg.model.dropout) == (6, 6, 0.1)
    assert cfg.train.label_smoothing == 0.1 and cfg.train.betas == [0.9, 0.98] and cfg.train.eps == 1e-9


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_shipped_configs_load(name):
    cfg = load_config(CONFIGS / name)
    assert cfg.model.d_model % cfg.model.n_heads == 0


def test_paper_configs_match_table3():
    base, big = load_config(CONFIGS / "base.yaml"), load_config(CONFIGS / "big.yaml")
    assert (base.model.d_model, base.model.n_heads, base.model.d_ff, base.model.dropout) == (512, 8, 2048, 0.1)
    assert (big.model.d_model, big.model.n_heads, big.model.d_ff, big.model.dropout) == (1024, 16, 4096, 0.3)
    for cfg in (base, big):
        assert cfg.train.warmup == 4000 and cfg.train.label_smoothing == 0.1
        assert 24000 <= cfg.train.max_tokens * cfg.train.update_freq <= 26000


def test_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  d_model: 256\n  n_heads: 4\ntrain:\n  lr: 0.001\n")
    cfg = load_config(path, ["train.lr=5e-4", "model.pre_norm=true", "data.normalize=null", "train.betas=[0.9, 0.99]"])
    assert cfg.model.d_model == 256 and cfg.train.lr == 5e-4 and cfg.model.pre_norm is True
    assert cfg.data.normalize is None and cfg.train.betas == [0.9, 0.99]


def test_int_given_for_float_is_accepted():
    assert load_config(None, ["train.lr=1"]).train.lr == 1.0


def test_unknown_key_suggests_closest(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  d_modle: 256\n")
    with pytest.raises(ConfigError, match=r"unknown key 'model.d_modle'.*did you mean 'd_model'"):
        load_config(path)


def test_unknown_section_and_bad_override_form():
    with pytest.raises(ConfigError, match="unknown section 'modle'.*'model'"):
        load_config(None, ["modle.d_model=3"])
    with pytest.raises(ConfigError, match="section.key=value"):
        load_config(None, ["lr=3"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.d_model=abc", "model.d_model' expects int"),
        ("train.max_tokens=-5", "train.max_tokens must be > 0"),
        ("train.length_multiple=0", "train.length_multiple must be >= 1"),
        ("train.compile_mode=fast", r"train.compile_mode must be default\|reduce-overhead\|max-autotune\|"),
        ("train.compile_mode=reduce-overhead", "train.compile_mode reduce-overhead needs train.compile: true"),
        ("model.n_heads=7", "multiple of model.n_heads"),
        ("train.amp=fp8", "train.amp"),
        ("model.pre_norm=3", "model.pre_norm' expects bool"),
        ("model.dropout=1.5", "dropouts"),
        ("decode.nbest=9", "decode.nbest"),
        ("model.activation=tanh", "model.activation must be relu|gelu|swish"),
        ("model.position_layout=random", "model.position_layout must be interleaved|halves"),
    ],
)
def test_bad_values_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_missing_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_roundtrip_through_dict():
    cfg = load_config(None, ["model.d_model=64", "model.n_heads=2"])
    assert config_from_dict(cfg.to_dict()) == cfg


def test_parse_overrides_types():
    out = parse_overrides(["a.b=1", "a.c=x", "b.d=1.5", "b.e=true"])
    assert out == {"a": {"b": 1, "c": "x"}, "b": {"d": 1.5, "e": True}}
