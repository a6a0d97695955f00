"""COMET (nmt.comet): the segment scores of unbabel-comet's own tiny models (tests/fixtures/make_comet_model.py made
them with unbabel-comet 2.2.7 and recorded its scores in expected.json) equal unbabel-comet's to 1e-5: a wmt22-style
sparsemax model, a softmax model with layer norm and a Sigmoid, a referenceless (COMET-QE) one on one layer with max
pooling. Batching, chunking and texts shared between systems leave the scores as they are; `nmt score --comet` prints
and writes them; a wrong directory, a missing encoder, an unsupported model class and an unreadable or incomplete
checkpoint are one-line errors; the encoder is found offline beside the model, as written, or in the Hugging Face
cache."""

from __future__ import annotations

import json
import pathlib
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from nmt import comet
from nmt.errors import NmtError
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.paths import COMET_MODELS

EXPECTED = json.loads((COMET_MODELS / "expected.json").read_text(encoding="utf-8"))
TRIPLES = EXPECTED["triples"]
SRC, MT, REF = ([t[k] for t in TRIPLES] for k in ("src", "mt", "ref"))
MODELS = sorted(EXPECTED["models"])


@pytest.fixture(scope="module")
def loaded() -> dict[str, comet.Comet]:
    return {name: comet.Comet(COMET_MODELS / name) for name in MODELS}


@pytest.mark.parametrize("name", MODELS)
def test_segment_scores_equal_unbabel_comets(loaded, name):
    expected = EXPECTED["models"][name]
    got = loaded[name].score_systems(SRC, {"mt": MT}, REF, batch_size=4)["mt"]
    assert got == pytest.approx(expected["scores"], abs=1e-5)
    assert sum(got) / len(got) == pytest.approx(expected["system_score"], abs=1e-5)
    assert max(expected["scores"]) - min(expected["scores"]) > 1e-2  # the triples tell the models' parts apart


def test_the_fixture_tells_sparsemax_layer_norm_and_pooling_apart(loaded):
    """Each choice COMET's hparams make changes the scores far beyond the tolerance: a test that passes with the
    right one fails with the wrong one."""
    for name, key, wrong in (("tiny-da", "layer_transformation", "softmax"), ("tiny-da-softmax", "layer_norm", False),
                             ("tiny-da", "pool", "cls")):
        model = loaded[name]
        right = model.hparams[key]
        try:
            model.hparams[key] = wrong
            got = model.score_systems(SRC, {"mt": MT}, REF)["mt"]
        finally:
            model.hparams[key] = right
        assert max(abs(a - b) for a, b in zip(got, EXPECTED["models"][name]["scores"])) > 1e-3, key


def test_sparsemax_projects_onto_the_simplex():
    weights = comet.sparsemax(torch.tensor([0.9, -0.4, 0.6]))  # tiny-da's layer weights: one layer dropped
    assert weights.tolist() == pytest.approx([0.65, 0.0, 0.35])
    assert comet.sparsemax(torch.tensor([2.0, 2.0])).tolist() == [0.5, 0.5]


def test_batches_chunks_and_shared_texts_leave_the_scores(loaded, monkeypatch):
    model = loaded["tiny-da"]
    alone = model.score_systems(SRC, {"mt": MT}, REF, batch_size=16)["mt"]
    monkeypatch.setattr(comet, "CHUNK", 5)  # three chunks; the second system repeats the references
    both = model.score_systems(SRC, {"mt": MT, "ref": REF}, REF, batch_size=1)
    assert both["mt"] == pytest.approx(alone, abs=1e-6)
    assert both["ref"] != pytest.approx(both["mt"], abs=1e-3)


def test_a_referenceless_model_needs_no_references_and_a_reference_model_does(loaded):
    assert loaded["tiny-qe"].score_systems(SRC, {"mt": MT})["mt"] == pytest.approx(
        EXPECTED["models"]["tiny-qe"]["scores"], abs=1e-5)
    with pytest.raises(NmtError, match="needs references"):
        loaded["tiny-da"].score_systems(SRC, {"mt": MT})
    with pytest.raises(NmtError, match="11 lines in mt"):
        loaded["tiny-da"].score_systems(SRC, {"mt": MT[:-2]}, REF)


def files(tmp_path: Path, n: int = len(TRIPLES)) -> dict[str, Path]:
    out = {}
    for key, lines in (("src", SRC), ("mt", MT), ("ref", REF)):
        out[key] = tmp_path / f"test.{key}"
        out[key].write_text("".join(line + "\n" for line in lines[:n]), encoding="utf-8")
    return out


def test_nmt_score_prints_and_writes_comet(tmp_path):
    f = files(tmp_path)
    model = COMET_MODELS / "tiny-da"
    text = run_cli("score", "--ref", f["ref"], "--hyp", f["mt"], "--src", f["src"], "--comet", model,
                   "--metrics", "bleu")
    assert text.exit_code == 0, text.stderr
    lines = text.stdout.splitlines()
    expected = EXPECTED["models"]["tiny-da"]["system_score"]
    assert lines[0].startswith("BLEU|") and lines[1] == f"COMET|{comet_signature()} = {expected:.4f}"
    out = run_cli("score", "--ref", f["ref"], "--hyp", f["mt"], "--src", f["src"], "--comet", model, "--json",
                  "--metrics", "chrf", "--comet-batch-size", "3")
    result = json.loads(out.stdout)
    assert list(result) == ["chrf", "comet"] and result["comet"]["score"] == pytest.approx(expected, abs=1e-5)
    assert result["comet"]["segments"] == pytest.approx(EXPECTED["models"]["tiny-da"]["scores"], abs=1e-5)


def comet_signature() -> str:
    from nmt import __version__

    return f"model:tiny-da|encoder:tiny-xlmr|ref:yes|nmt:{__version__}"


def test_nmt_score_refuses_comet_without_sources_and_the_like(tmp_path):
    f = files(tmp_path)
    model = COMET_MODELS / "tiny-da"
    base = ("score", "--ref", f["ref"], "--hyp", f["mt"], "--metrics", "bleu")
    assert_one_line_error(run_cli(*base, "--comet", model), "give --src FILE")
    assert_one_line_error(run_cli(*base, "--src", f["src"]), "give --comet DIR too")
    assert_one_line_error(run_cli(*base, "--comet", model, "--src", f["src"], "--ref", f["ref"]),
                          "one reference, but --ref is given 2 times")
    (tmp_path / "short").mkdir()
    short = files(tmp_path / "short", 5)["src"]
    assert_one_line_error(run_cli(*base, "--comet", model, "--src", short), f"--src {short} has 5 lines",
                          "hypothesis has 13")
    # a COMET-QE model scores without references: several --ref are BLEU's business only
    qe = run_cli(*base, "--comet", COMET_MODELS / "tiny-qe", "--src", f["src"], "--ref", f["ref"])
    assert qe.exit_code == 0 and "COMET|model:tiny-qe" in qe.stdout


def copy_model(tmp_path: Path, name: str = "tiny-da") -> Path:
    return Path(shutil.copytree(COMET_MODELS / name, tmp_path / name))


def set_hparams(model: Path, **values) -> None:
    """hparams.yaml and the checkpoint's saved hyper-parameters (what COMET reads) both changed."""
    file = model / "hparams.yaml"
    file.write_text(yaml.safe_dump({**yaml.safe_load(file.read_text()), **values}))
    ckpt = torch.load(model / comet.CHECKPOINT, weights_only=True)
    ckpt["hyper_parameters"].update(values)
    torch.save(ckpt, model / comet.CHECKPOINT)


def test_a_wrong_directory_is_a_one_line_error(tmp_path):
    with pytest.raises(NmtError, match="no such directory"):
        comet.open_dir(tmp_path / "nowhere")
    with pytest.raises(NmtError, match="no hparams.yaml in it"):
        comet.open_dir(tmp_path)
    model = copy_model(tmp_path)
    (model / comet.CHECKPOINT).unlink()
    with pytest.raises(NmtError, match="no checkpoints/model.ckpt in it"):
        comet.open_dir(model)
    out = run_cli("score", "--ref", files(tmp_path)["ref"], "--hyp", files(tmp_path)["mt"], "--src",
                  files(tmp_path)["src"], "--comet", tmp_path / "nowhere")
    assert_one_line_error(out, "no such directory")


def test_a_missing_encoder_says_where_nmt_looked(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    model = copy_model(tmp_path)
    shutil.rmtree(model / "tiny-xlmr")
    with pytest.raises(NmtError) as e:
        comet.open_dir(model)
    assert "encoder 'tiny-xlmr' (pretrained_model) is not on this machine" in str(e.value)
    assert str(model / "tiny-xlmr") in str(e.value) and "Hugging Face cache" in str(e.value)
    assert "\n" not in str(e.value)


def test_the_encoder_is_found_as_written_and_in_the_hub_cache(tmp_path, monkeypatch, loaded):
    import huggingface_hub.constants

    encoder = COMET_MODELS / "tiny-da" / "tiny-xlmr"
    written = copy_model(tmp_path / "written")
    shutil.rmtree(written / "tiny-xlmr")
    set_hparams(written, pretrained_model=str(encoder))  # an absolute path
    assert comet.open_dir(written).encoder == encoder
    cached = copy_model(tmp_path / "cached")
    shutil.rmtree(cached / "tiny-xlmr")
    snapshot = tmp_path / "hub" / "models--FacebookAI--tiny-xlmr" / "snapshots" / "0123abcd"
    shutil.copytree(encoder, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert comet.open_dir(cached).encoder == snapshot  # "tiny-xlmr" as the hub's FacebookAI/tiny-xlmr
    got = comet.Comet(cached).score_systems(SRC, {"mt": MT}, REF)["mt"]
    assert got == pytest.approx(EXPECTED["models"]["tiny-da"]["scores"], abs=1e-5)
    (snapshot / "tokenizer.json").unlink()
    with pytest.raises(NmtError, match="not on this machine"):
        comet.open_dir(cached)


def test_an_unsupported_model_class_is_named(tmp_path):
    model = copy_model(tmp_path)
    set_hparams(model, class_identifier="unified_metric")
    with pytest.raises(NmtError, match="its class 'unified_metric' is not one nmt computes"):
        comet.open_dir(model)
    set_hparams(model, class_identifier="regression_metric", encoder_model="RemBERT")
    with pytest.raises(NmtError, match="encoder_model 'RemBERT'"):
        comet.open_dir(model)


def test_an_unreadable_or_incomplete_checkpoint_is_a_one_line_error(tmp_path):
    model = copy_model(tmp_path)
    file = model / comet.CHECKPOINT
    file.write_bytes(file.read_bytes()[:1000])  # cut short
    with pytest.raises(NmtError, match="cannot be read with weights_only=True"):
        comet.Comet(model)
    torch.save({"state_dict": {}, "where": pathlib.PurePosixPath("/")}, file)  # an object weights_only refuses
    with pytest.raises(NmtError, match="cannot be read with weights_only=True") as e:
        comet.Comet(model)
    assert "\n" not in str(e.value)
    ckpt = torch.load(COMET_MODELS / "tiny-da" / comet.CHECKPOINT, weights_only=True)
    del ckpt["state_dict"]["encoder.model.encoder.layer.1.output.dense.weight"]
    torch.save(ckpt, file)
    with pytest.raises(NmtError, match="lacks 1 of the weights its hparams need .first: encoder.layer.1.output"):
        comet.Comet(model)
    torch.save({"epoch": 1}, file)
    with pytest.raises(NmtError, match="has no state_dict"):
        comet.Comet(model)


def test_sparsemax_patch_means_softmax(tmp_path):
    """Unbabel's fix of COMET issue #244: hparams.yaml's `sparsemax_patch` is a model trained with softmax."""
    model = copy_model(tmp_path)
    file = model / "hparams.yaml"
    file.write_text(yaml.safe_dump({**yaml.safe_load(file.read_text()), "layer_transformation": "sparsemax_patch"}))
    assert comet.Comet(model).hparams["layer_transformation"] == "softmax"
