"""`nmt export --to hf` of pre-norm models, proven by `transformers` itself: the directory is a
PegasusForConditionalGeneration (Pegasus' layers are nmt's pre-norm layers, with the final LayerNorm of each
stack and Marian's sine/cosine halves), which AutoModelForSeq2SeqLM and AutoTokenizer (MarianTokenizer) load
offline; its logits equal nmt's to float precision — on the two committed pre-norm models and on one with random
weights, LayerNorms and logits bias — and generate() translates the 100 test lines as `nmt translate` does (greedy
and beam 4, generate's average length penalty). A pre-norm model with two embedding matrices, which Pegasus cannot
hold, is a MarianMTModel made pre-norm by the modeling file shipped in the directory (trust_remote_code=True),
proven the same way on a random-weight one.

The models: tests/fixtures/export-prenorm.pt (4+4 layers, gelu, halves, the demo corpus' vocabulary) and
tests/fixtures/prenorm-model.pt (configs/multi30k.yaml's options, tiny: relu, the paper's interleaved sinusoids, a
Multi30k vocabulary).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from nmt import checkpoint  # noqa: E402
from nmt.config.experiment import DecodeConfig  # noqa: E402
from nmt.interop.export import export, hf_prenorm_modeling  # noqa: E402
from nmt.translation.translator import Translator  # noqa: E402
from tests.helpers.cli import assert_one_line_error, run_cli  # noqa: E402
from tests.helpers.exporting import hf_translate, nmt_translate, same  # noqa: E402
from tests.helpers.paths import EXPORT_PRENORM, EXPORT_SEPARATE, FIXTURES  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # MarianTokenizer's
MODELS = {"prenorm": EXPORT_PRENORM, "multi30k": FIXTURES / "prenorm-model.pt"}


def load(directory: Path, remote: bool = False) -> tuple[object, object]:
    """The directory as a user loads it: the Auto classes, offline (nothing on the hub is asked for); `remote`:
    with trust_remote_code, which the shipped modeling file needs."""
    options = {"local_files_only": True, "trust_remote_code": remote}
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(directory, **options).eval()
    tok = transformers.AutoTokenizer.from_pretrained(directory, **options)
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


def randomized(source: Path, path: Path, **model: object) -> Path:
    """The checkpoint `source` with the config's model settings `model` and random weights everywhere (LayerNorm
    gains and biases far from 1 and 0; final LayerNorms added for pre-norm; a logits bias with output_bias): what
    training happened to leave cannot hide a mismatch."""
    state = checkpoint.load(source)
    state["config"]["model"].update(model)
    d_model = state["config"]["model"]["d_model"]
    if state["config"]["model"]["pre_norm"]:
        for name in ("encoder_norm", "decoder_norm"):
            state["model"].setdefault(f"{name}.weight", torch.ones(d_model))
            state["model"].setdefault(f"{name}.bias", torch.zeros(d_model))
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
    if state["config"]["model"]["output_bias"]:
        state["model"]["output.bias"] = torch.randn(state["model"]["tgt_embed.weight"].shape[0], generator=generator)
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
    ckpt = randomized(EXPORT_PRENORM, tmp_path / "random.pt", position_layout="interleaved", activation="swish",
                      output_bias=True)
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


def test_two_embedding_matrices_go_through_the_shipped_modeling_file(export_lines, tmp_path):
    """Pegasus has one embedding matrix; a pre-norm model with separate vocabularies (export-separate.pt made
    pre-norm, random weights) is the shipped pre-norm MarianMTModel, which transformers runs only when trusted."""
    ckpt = randomized(EXPORT_SEPARATE, tmp_path / "random.pt", pre_norm=True, output_bias=True)
    directory = export(ckpt, "hf", tmp_path / "hf")
    assert (directory / "modeling_nmt_prenorm.py").read_bytes() == Path(hf_prenorm_modeling.__file__).read_bytes()
    config = json.loads((directory / "config.json").read_text())
    assert config["model_type"] == "nmt_prenorm_marian" and not config["share_encoder_decoder_embeddings"]
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_nmt_prenorm.NmtPreNormMTModel"
    assert "trust_remote_code=True" in (directory / "README.md").read_text()
    with pytest.raises(ValueError, match="trust_remote_code"):  # never run post-norm by mistake
        transformers.AutoModelForSeq2SeqLM.from_pretrained(directory, local_files_only=True, trust_remote_code=False)
    model, tok = load(directory, remote=True)
    assert type(model).__name__ == "NmtPreNormMTModel" and isinstance(tok, transformers.MarianTokenizer)
    embeddings = model.model.encoder.embed_tokens.weight, model.model.decoder.embed_tokens.weight
    assert tok.separate_vocabs and not torch.equal(*embeddings)  # two matrices, the output tied to the target's
    assert model.lm_head.weight.data_ptr() == embeddings[1].data_ptr()
    assert_logits_equal(model, tok, ckpt, export_lines[:16])
    lines = export_lines[:20]
    for beam in (1, 4):
        ours = nmt_translate(ckpt, lines, beam, 1.0)
        assert same("two matrices", f"beam {beam}", ours, hf_translate(model, tok, lines, beam)) == 20


def test_cli_exports_a_pre_norm_model(tmp_path):
    result = run_cli("export", "--checkpoint", EXPORT_PRENORM, "--to", "hf", "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "pegasus"
    result = run_cli("export", "--checkpoint", EXPORT_PRENORM, "--to", "hf", "-o", tmp_path / "a",
                     "--quantization", "int8")
    assert_one_line_error(result, "--quantization int8: --to hf writes float32")
