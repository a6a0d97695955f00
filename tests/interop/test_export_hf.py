"""`nmt export --to hf`, proven by `transformers` itself: MarianMTModel / MarianTokenizer load the directory,
compute nmt's logits to float precision (the interleaved sinusoids converted by a permutation of the model
dimension), and generate() translates the 100 test lines as `nmt translate` does with generate's length
penalty (the average form); `nmt import` of the directory gives back the same translations.

Beam search with a length limit: at max_new_tokens generate forces EOS with log-probability 0, nmt (like
fairseq) scores EOS with its real log-probability (see tests/interop/test_marian.py), so a line that runs into the
limit may differ; such lines are printed with the count.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from nmt import checkpoint  # noqa: E402
from nmt.config.experiment import DecodeConfig  # noqa: E402
from nmt.errors import NmtError  # noqa: E402
from nmt.interop.export import export  # noqa: E402
from nmt.interop.marian import import_model  # noqa: E402
from nmt.translation.translator import Translator  # noqa: E402
from tests.helpers.cli import assert_one_line_error, nmt_process, run_cli  # noqa: E402
from tests.helpers.exporting import hf_translate, nmt_translate, same  # noqa: E402
from tests.helpers.paths import DEMO_MODEL  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # MarianTokenizer's
KINDS = ("tiny", "separate", "marian")


@pytest.fixture(scope="module")
def exported(export_models, tmp_path_factory) -> dict[str, dict]:
    """kind -> the exported directory, with its MarianMTModel and MarianTokenizer loaded."""
    root = tmp_path_factory.mktemp("hf")
    out = {}
    for kind in KINDS:
        directory = export(export_models[kind], "hf", root / kind)
        tok = transformers.MarianTokenizer.from_pretrained(directory)
        tok.punc_normalizer = lambda text: text  # Moses punctuation normalization only if sacremoses is installed
        out[kind] = {"dir": directory, "model": transformers.MarianMTModel.from_pretrained(directory).eval(),
                     "tok": tok, "ckpt": export_models[kind]}
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_logits_equal_nmts_to_float_precision(exported, export_lines, kind):
    e = exported[kind]
    translator = Translator(checkpoint.load(e["ckpt"]), DecodeConfig(), dtype="fp32")
    lines = export_lines[:16]
    inputs = e["tok"](lines, return_tensors="pt", padding=True)
    assert [[i for i in ids if i != translator.special.pad][:-1] for ids in inputs["input_ids"].tolist()] == \
        translator.tokenizer.encode_src(lines)  # the same source ids, </s> appended as nmt appends EOS
    start = torch.full((len(lines), 1), translator.special.bos)
    decoder_in = torch.cat([start, inputs["input_ids"][:, :8]], dim=1)
    with torch.no_grad():
        theirs = e["model"](**inputs, decoder_input_ids=decoder_in).logits
        ours = translator.model(inputs["input_ids"], decoder_in)
    assert ours.abs().max() > 1.0
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_generate_translates_as_nmt_and_import_gives_it_back(exported, export_lines, kind, tmp_path):
    e = exported[kind]
    generation = json.loads((e["dir"] / "generation_config.json").read_text())
    alpha = generation["length_penalty"]
    back = import_model(str(e["dir"]), tmp_path / "back.pt")
    for beam in (1, 4):
        what = "greedy" if beam == 1 else f"beam {beam}"
        ours = nmt_translate(e["ckpt"], export_lines, beam, alpha)
        assert same(kind, what, ours, hf_translate(e["model"], e["tok"], export_lines, beam)) >= 99
        assert same(kind, f"{what} after nmt import", ours, nmt_translate(back, export_lines, beam, alpha)) >= 99
    assert len(set(ours)) > 50  # real, varied translations


def test_files_config_and_model_card(exported, export_models):
    e = exported["tiny"]
    assert {p.name for p in e["dir"].iterdir()} == {
        "config.json", "model.safetensors", "source.spm", "target.spm", "vocab.json", "tokenizer_config.json",
        "generation_config.json", "README.md"}
    generation = json.loads((e["dir"] / "generation_config.json").read_text())
    described = checkpoint.load(export_models["tiny"]).decode_config()
    assert generation["decoder_start_token_id"] == 2 and generation["bad_words_ids"] == [[0], [2]]
    assert generation["num_beams"] == described.beam and generation["length_penalty"] == described.length_penalty
    assert e["model"].config.decoder_start_token_id == 2 and e["model"].config.share_encoder_decoder_embeddings
    vocab = json.loads((e["dir"] / "vocab.json").read_text())
    assert [vocab[p] for p in ("<pad>", "<unk>", "<s>", "</s>")] == [0, 1, 2, 3]
    card = (e["dir"] / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["pipeline_tag"] == "translation" and front["language"] == ["en", "de"]
    assert "GNMT" in card and "length_penalty_type=average" in card and "permutation" in card
    separate = exported["separate"]
    assert (separate["dir"] / "target_vocab.json").is_file() and separate["tok"].separate_vocabs
    assert not separate["model"].config.share_encoder_decoder_embeddings
    marian = json.loads((exported["marian"]["dir"] / "generation_config.json").read_text())
    assert marian["decoder_start_token_id"] == marian["pad_token_id"] == exported["marian"]["tok"].pad_token_id


def test_model_card_of_a_run_dir_has_data_and_bleu(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(DEMO_MODEL, run / "last.pt")
    (run / "config.yaml").write_text(yaml.safe_dump({"data": {"train": "corpus/train", "src_lang": "en",
                                                              "tgt_lang": "de"},
                                                     "train": {"valid_bleu_sentences": 200}}))
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"type": "train", "step": 100, "loss": 3.0}, {"type": "valid", "step": 100, "loss": 2.0, "bleu": 12.5},
        {"type": "valid", "step": 200, "loss": 1.9, "bleu": 11.0}]) + "\n")
    card = (export(run, "hf", tmp_path / "out") / "README.md").read_text()
    assert "train `corpus/train`" in card and "validation BLEU 12.50 at update 100" in card
    assert "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in card


def test_quantization_is_refused_in_one_line(export_models, tmp_path):
    # pre-norm models export as Pegasus: tests/interop/test_export_hf_prenorm.py
    with pytest.raises(NmtError, match=r"--quantization int8: --to hf writes float32"):
        export(export_models["tiny"], "hf", tmp_path / "out", quantization="int8")


def test_push_uploads_the_finished_directory(tmp_path, monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    calls = []

    def create_repo(self, repo_id, exist_ok=False, **kwargs):
        calls.append(("create_repo", repo_id, exist_ok))

    def upload_folder(self, folder_path, repo_id, **kwargs):
        calls.append(("upload_folder", repo_id, Path(folder_path), sorted(p.name for p in Path(folder_path).iterdir())))

    monkeypatch.setenv("HF_TOKEN", "hf_test")
    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    out = export(DEMO_MODEL, "hf", tmp_path / "out", push="me/en-de")
    assert calls[0] == ("create_repo", "me/en-de", True)
    assert calls[1][:3] == ("upload_folder", "me/en-de", out) and "model.safetensors" in calls[1][3]


def test_cli_refusals_are_one_line(export_models, tmp_path):
    demo = DEMO_MODEL
    result = run_cli("export", "--checkpoint", export_models["tiny"], "--to", "hf", "-o", tmp_path / "a",
                     "--quantization", "int8")
    assert_one_line_error(result, "--quantization int8: --to hf writes float32")
    assert not (tmp_path / "a").exists()
    (tmp_path / "b").mkdir()
    result = run_cli("export", "--checkpoint", demo, "--to", "hf", "-o", tmp_path / "b")
    assert_one_line_error(result, "exists: pass --force")
    # no token: refused before anything is written; a token but no network: the upload fails in one line
    args = ("export", "--checkpoint", str(demo), "--to", "hf", "--push", "me/en-de")
    proc = nmt_process(*args, "-o", str(tmp_path / "c"), HF_TOKEN="", HF_HOME=str(tmp_path / "hf-home"))
    assert_one_line_error(proc, "--push me/en-de: no Hugging Face token")
    assert not (tmp_path / "c").exists()
    proc = nmt_process(*args, "-o", str(tmp_path / "d"), HF_TOKEN="hf_test", HF_HUB_OFFLINE="1")
    assert_one_line_error(proc, "but uploading it to me/en-de on the Hugging Face hub failed", "hf upload me/en-de")
    assert (tmp_path / "d" / "model.safetensors").is_file()  # the export itself stands
