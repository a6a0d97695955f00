"""`nmt export --to hf` of pre-norm models, proven by `transformers` itself: the directory is a
PegasusForConditionalGeneration (Pegasus' layers are nmt's pre-norm layers, with the final LayerNorm of each
stack and Marian's sine/cosine halves), which AutoModelForSeq2SeqLM and AutoTokenizer (MarianTokenizer) load
offline; its logits equal nmt's to float precision — on the two committed pre-norm models and on one with random
weights, LayerNorms and logits bias — and generate() translates the 100 test lines as `nmt translate` does (greedy
and beam 4, generate's average length penalty).

The models: tests/fixtures/export-prenorm.pt (4+4 layers, gelu, halves, the demo corpus' vocabulary) and
tests/fixtures/prenorm-model.pt (configs/multi30k.yaml's options, tiny: relu, the paper's interleaved sinusoids, a
Multi30k vocabulary).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from nmt import checkpoint  # noqa: E402
from nmt.config.experiment import DecodeConfig  # noqa: E402
from nmt.errors import NmtError  # noqa: E402
from nmt.interop.export import export  # noqa: E402
from nmt.interop.export import hf as export_hf  # noqa: E402
from nmt.interop.modelspec import describe  # noqa: E402
from nmt.translation.translator import Translator  # noqa: E402
from tests.helpers.cli import assert_one_line_error, run_cli  # noqa: E402
from tests.helpers.exporting import hf_translate, nmt_translate, same  # noqa: E402
from tests.helpers.paths import EXPORT_PRENORM, FIXTURES  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # MarianTokenizer's
MODELS = {"prenorm": EXPORT_PRENORM, "multi30k": FIXTURES / "prenorm-model.pt"}


def load(directory: Path) -> tuple[object, object]:
    """The directory as a user loads it: the Auto classes, offline (nothing on the hub is asked for)."""
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(directory, local_files_only=True).eval()
    tok = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    tok.punc_normalizer = lambda text: text  # Moses punctuation normalization only if sacremoses is installed
    return model, tok


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("hf-prenorm")
    out = {}
    for kind, ckpt in MODELS.items():
        directory = export(ckpt, "hf", root / kind)
        model, tok = load(directory)
        out[kind] = {"dir": directory, "model": model, "tok": tok, "ckpt": ckpt}
    return out


def random_prenorm(path: Path) -> Path:
    """export-prenorm.pt with random weights everywhere (LayerNorm gains and biases far from 1 and 0, a logits
    bias), the paper's interleaved sinusoids and swish: what training happened to leave cannot hide a mismatch."""
    state = checkpoint.load(EXPORT_PRENORM)
    generator = torch.Generator().manual_seed(7)
    seen = set()
    for name, t in state["model"].items():
        if t.data_ptr() in seen:  # the tied embeddings: one matrix
            continue
        seen.add(t.data_ptr())
        noise = torch.randn(t.shape, generator=generator)
        # 0.1: about the scale of nmt's Xavier initialisation at d_model 128. Much larger weights (0.3) make
        # attention so peaked that float32 rounding in another summation order (the permuted model dimension)
        # moves logits by ~5e-4 in either engine: ill-conditioning, not a difference of the models
        t.copy_(1 + 0.5 * noise if "norm" in name and name.endswith("weight") else 0.1 * noise)
    vocab = state["model"]["tgt_embed.weight"].shape[0]
    state["model"]["output.bias"] = torch.randn(vocab, generator=generator)
    state["config"]["model"].update(position_layout="interleaved", activation="swish", output_bias=True)
    checkpoint.save(state, path)
    return path


def assert_logits_equal(model, tok, ckpt: Path, lines: list[str]) -> float:
    """Teacher-forced logits of transformers and of nmt on `lines`; returns the largest difference."""
    translator = Translator(checkpoint.load(ckpt), DecodeConfig(), dtype="fp32")
    inputs = tok(lines, return_tensors="pt", padding=True)
    assert [[i for i in ids if i != translator.special.pad][:-1] for ids in inputs["input_ids"].tolist()] == \
        translator.tokenizer.encode_src(lines)  # the same source ids, </s> appended as nmt appends EOS
    start = torch.full((len(lines), 1), translator.special.bos)
    decoder_in = torch.cat([start, inputs["input_ids"][:, :8]], dim=1)
    with torch.no_grad():
        theirs = model(**inputs, decoder_input_ids=decoder_in).logits
        ours = translator.model(inputs["input_ids"], decoder_in)
    assert ours.abs().max() > 1.0
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=1e-4)
    difference = float((theirs - ours).abs().max())
    print(f"{ckpt.name}: max |logit difference| {difference:.2e} (logits up to {float(ours.abs().max()):.1f})")
    return difference


@pytest.mark.parametrize("kind", MODELS)
def test_a_pegasus_model_with_nmts_logits(exported, export_lines, kind):
    e = exported[kind]
    assert isinstance(e["model"], transformers.PegasusForConditionalGeneration)
    assert isinstance(e["tok"], transformers.MarianTokenizer)
    assert_logits_equal(e["model"], e["tok"], e["ckpt"], export_lines[:16])


def test_random_weights_logits_and_greedy_equal_nmts(export_lines, tmp_path):
    ckpt = random_prenorm(tmp_path / "random.pt")
    model, tok = load(export(ckpt, "hf", tmp_path / "hf"))
    assert model.final_logits_bias.abs().max() > 0 and (model.model.encoder.layer_norm.weight - 1).abs().max() > 0.5
    assert_logits_equal(model, tok, ckpt, export_lines[:16])
    lines = export_lines[:20]
    assert same("random", "greedy", nmt_translate(ckpt, lines, 1, 1.0), hf_translate(model, tok, lines, 1)) == 20


@pytest.mark.parametrize("kind", MODELS)
def test_generate_translates_as_nmt(exported, export_lines, kind):
    e = exported[kind]
    alpha = json.loads((e["dir"] / "generation_config.json").read_text())["length_penalty"]
    for beam in (1, 4):
        what = "greedy" if beam == 1 else f"beam {beam}"
        ours = nmt_translate(e["ckpt"], export_lines, beam, alpha)
        assert same(kind, what, ours, hf_translate(e["model"], e["tok"], export_lines, beam)) >= 99
    assert len(set(ours)) > 50  # real, varied translations


def test_saved_again_it_reloads_to_the_same_translations(exported, export_lines, tmp_path):
    """save_pretrained of the loaded model and tokenizer (what a user pushes after fine-tuning) reloads to the
    same translations. (pipeline("translation") is gone from transformers 5, which these tests run.)"""
    e = exported["multi30k"]
    lines = export_lines[:20]
    expected = hf_translate(e["model"], e["tok"], lines, 4)
    e["model"].save_pretrained(tmp_path / "saved")
    e["tok"].save_pretrained(tmp_path / "saved")
    model, tok = load(tmp_path / "saved")
    assert isinstance(model, transformers.PegasusForConditionalGeneration)
    assert hf_translate(model, tok, lines, 4) == expected


def test_files_config_and_model_card(exported):
    e = exported["prenorm"]
    assert {p.name for p in e["dir"].iterdir()} == {  # the post-norm export's files
        "config.json", "model.safetensors", "source.spm", "target.spm", "vocab.json", "tokenizer_config.json",
        "generation_config.json", "README.md"}
    config = json.loads((e["dir"] / "config.json").read_text())
    assert config["model_type"] == "pegasus" and config["architectures"] == ["PegasusForConditionalGeneration"]
    assert json.loads((e["dir"] / "tokenizer_config.json").read_text())["tokenizer_class"] == "MarianTokenizer"
    card = (e["dir"] / "README.md").read_text()
    assert "PegasusForConditionalGeneration.from_pretrained(path)" in card and "pre-norm Transformer" in card
    assert "tags:\n- translation\n- pegasus" in card


def test_two_embeddings_are_refused_in_one_line(tmp_path):
    """Pegasus has one embedding matrix: a pre-norm model with an untied source embedding cannot go there."""
    model = describe(checkpoint.load(EXPORT_PRENORM))
    model.config = dataclasses.replace(model.config, share_all_embeddings=False)
    with pytest.raises(NmtError, match=r"goes to Hugging Face as Pegasus.*an untied source embedding: export it "
                                       r"with --to ct2"):
        export_hf.write(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_exports_a_pre_norm_model(tmp_path):
    result = run_cli("export", "--checkpoint", EXPORT_PRENORM, "--to", "hf", "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "pegasus"
    result = run_cli("export", "--checkpoint", EXPORT_PRENORM, "--to", "hf", "-o", tmp_path / "a",
                     "--quantization", "int8")
    assert_one_line_error(result, "--quantization int8: --to hf writes float32")
