"""The `distill` section (nmt/config/distill.py): every key set by YAML or --set, each bad value a one-line
ConfigError naming its key, and the shipped distillation configs."""

from __future__ import annotations

import pytest

from nmt.config.distill import EXPORT_TARGETS, DistillConfig
from nmt.config.experiment import Config, config_from_dict, load_config
from nmt.errors import ConfigError
from nmt.interop.export import TARGETS
from tests.helpers.paths import CONFIGS


def test_every_key_can_be_set_with_set():
    values = {"dir": "p", "teacher": "t.pt", "teacher_test_translations": "test.hyp", "teacher_beam": 2,
              "teacher_device": "cpu", "chunk_lines": 7, "max_chars": 50, "max_ratio": 2.5, "dedup": False,
              "copies": False, "digits": False, "script_share": 0.25, "langid_min_prob": 0.5, "sample": 3,
              "references": 0.5, "seed": 9, "int8_finetune_updates": 20, "int8_finetune_lr": 1e-4,
              "speed_rounds": 5, "speed_lines": 32, "speed_lines_single": 4, "export": ["ct2", "argos"],
              "comet": "wmt22-comet-da", "comet_batch_size": 8, "comet_device": "cuda", "teacher_nbest": 2,
              "teacher_sampling": True, "teacher_sampling_topk": 5, "teacher_sampling_topp": 0.9,
              "teacher_sampling_temperature": 0.7, "monolingual": "mono.de", "reverse_teacher": "runs/de-en"}
    assert set(values) | {"teacher_translations"} == set(DistillConfig.__dataclass_fields__)
    cfg = load_config(None, [f"distill.{k}={v}" for k, v in values.items()])
    assert {k: getattr(cfg.distill, k) for k in values} == values
    assert load_config(None, ["distill.teacher_translations=hyp.de"]).distill.teacher_translations == "hyp.de"


@pytest.mark.parametrize("override, message", [
    ("distill.chunk_lines=0", "distill.chunk_lines must be > 0"),
    ("distill.teacher_beam=-1", "distill.teacher_beam must be >= 0"),
    ("distill.max_chars=-5", "distill.max_chars must be >= 0"),
    ("distill.max_ratio=0.5", "distill.max_ratio must be >= 1"),
    ("distill.references=1.5", r"distill.references must be in \[0, 1\]"),
    ("distill.script_share=-0.1", r"distill.script_share must be in \[0, 1\]"),
    ("distill.langid_min_prob=2", r"distill.langid_min_prob must be in \[0, 1\]"),
    ("distill.int8_finetune_updates=-1", "distill.int8_finetune_updates must be >= 0"),
    ("distill.speed_rounds=-1", "distill.speed_rounds must be >= 0"),
    ("distill.speed_lines_single=-2", "distill.speed_lines_single must be >= 0"),
    ("distill.comet_batch_size=0", "distill.comet_batch_size must be > 0"),
    ("distill.int8_finetune_lr=-1e-4", r"distill.int8_finetune_lr must be >= 0 \(0: a fiftieth of the student's\)"),
    ("distill.dir=", "distill.dir"),
    ("distill.teacher_nbest=0", "distill.teacher_nbest must be > 0"),
    ("distill.teacher_sampling_topk=-1", "distill.teacher_sampling_topk must be >= 0"),
    ("distill.teacher_sampling_topp=0", r"distill.teacher_sampling_topp must be in \(0, 1\]"),
    ("distill.teacher_sampling_temperature=0", "distill.teacher_sampling_temperature must be > 0"),
    ("distill.monolingual=mono.de", "distill.monolingual is set but distill.reverse_teacher is not"),
    ("distill.reverse_teacher=rev.pt", "distill.reverse_teacher is set but distill.monolingual is not"),
    ("distill.chunk_lines=many", "config key 'distill.chunk_lines' expects int"),
    ("distill.refrences=0.5", "did you mean 'references'"),
    ("distill.export=ct3", r"distill.export: unknown target 'ct3' \(choose from ct2, argos, hf; \[\] exports "
                           r"nothing\)"),
    ("distill.export=[ct2, 8]", "distill.export: unknown target 8"),
    ("distill.export=ct2,hf,ct2", "distill.export names a target twice: ct2, hf, ct2"),
    ("distill.export=", "config key 'distill.export' must not be null"),
])
def test_bad_values_are_one_line_errors(override, message):
    with pytest.raises(ConfigError, match=message) as e:
        load_config(None, [override])
    assert "\n" not in str(e.value)


def test_export_targets_are_a_list_or_a_comma_string():
    """Either form is one list, so pipeline.json records one setting; [] exports nothing; the default is ct2."""
    assert load_config(None, ["distill.export=ct2, argos"]).distill.export == ["ct2", "argos"]
    assert load_config(None, ["distill.export=[hf]"]).distill.export == ["hf"]
    assert load_config(None, ["distill.export=[]"]).distill.export == []
    assert Config().distill.export == ["ct2"] and load_config(None).distill.export == ["ct2"]
    assert set(EXPORT_TARGETS) == set(TARGETS)  # what the config accepts is what nmt export writes


def test_a_beam_below_the_nbest_is_refused():
    with pytest.raises(ConfigError, match="distill.teacher_beam 2 is below distill.teacher_nbest 3") as e:
        load_config(None, ["distill.teacher_beam=2", "distill.teacher_nbest=3"])
    assert "\n" not in str(e.value)
    load_config(None, ["distill.teacher_beam=3", "distill.teacher_nbest=3"])  # a beam of 3 gives 3
    with pytest.raises(ConfigError, match="distill.teacher_nbest and distill.teacher_sampling need a teacher model"):
        load_config(None, ["distill.teacher_translations=hyp.de", "distill.teacher_sampling=true"])


def test_two_teachers_are_refused():
    with pytest.raises(ConfigError, match="give one teacher"):
        load_config(None, ["distill.teacher=a.pt", "distill.teacher_translations=hyp.de"])


def test_a_saved_config_without_the_section_still_loads():
    saved = Config().to_dict()
    del saved["distill"]  # checkpoints written before the section existed
    assert config_from_dict(saved).distill == DistillConfig()


@pytest.mark.parametrize("name", ["distill-demo.yaml", "student-multi30k.yaml"])
def test_shipped_students_have_a_deep_encoder_and_a_shallow_decoder(name):
    cfg = load_config(CONFIGS / name)
    assert cfg.model.decoder_layers == 1 and cfg.model.encoder_layers > cfg.model.decoder_layers
    assert cfg.distill.teacher and cfg.data.train and cfg.data.test
