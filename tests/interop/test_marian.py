"""`nmt import` of Hugging Face Marian (OPUS-MT) models, checked against `transformers` itself.

No hub here: the tests load the small committed MarianMTModel (tests/fixtures/marian-en-de, made by
tests/fixtures/make_marian_model.py: swish, sin/cos halves, scale_embedding, a non-zero final_logits_bias,
Marian's vocabulary order with <pad> last, its MarianTokenizer's SentencePiece models trained there, 2,000 updates
on the demo corpus so that it stops its translations by itself, saved with save_pretrained). Variants with separate
vocabularies and with target-language codes are the same function under other ids, built from its weights.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from nmt import checkpoint  # noqa: E402
from nmt.config.experiment import DecodeConfig, load_config  # noqa: E402
from nmt.data.datadir import DataDir  # noqa: E402
from nmt.data.prepare import prepare  # noqa: E402
from nmt.demo.files import write_demo  # noqa: E402
from nmt.errors import NmtError  # noqa: E402
from nmt.interop.marian import import_model  # noqa: E402
from nmt.rundir import RunDir  # noqa: E402
from nmt.tokenizer import Tokenizer  # noqa: E402
from nmt.train.loop import train  # noqa: E402
from nmt.translation.translator import Translator  # noqa: E402
from tests.helpers.cli import assert_one_line_error, nmt_process, run_cli  # noqa: E402
from tests.helpers.marian import marian_config, save  # noqa: E402
from tests.helpers.paths import MARIAN_MODEL  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # MarianTokenizer's
MAX_NEW = 100  # generate's max_new_tokens; nmt: 99 tokens + EOS
CODES = (">>deu<<", ">>fra<<")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The trained shared-vocabulary model, the committed one (tests/fixtures/make_marian_model.py: trained here,
    it took a fifth of this module's time), in a copy of its directory: (dir, model, tokenizer, vocab, spms, test
    lines: the demo corpus' last 200 short sentences)."""
    root = tmp_path_factory.mktemp("marian")
    shutil.copytree(MARIAN_MODEL, root / "base" / "hf")
    raw = write_demo(root / "raw", seed=1)
    en = [e for e in Path(raw["train"] + ".en").read_text(encoding="utf-8").splitlines() if len(e) <= 40]
    ids = json.loads((MARIAN_MODEL / "vocab.json").read_text(encoding="utf-8"))
    vocab = sorted(ids, key=ids.get)
    assert [ids[p] for p in vocab] == list(range(len(vocab))) and vocab[-1] == "<pad>"
    spms = tuple((MARIAN_MODEL / f"{side}.spm").read_bytes() for side in ("source", "target"))
    model = transformers.MarianMTModel.from_pretrained(root / "base" / "hf").eval()
    tok = transformers.MarianTokenizer.from_pretrained(root / "base" / "hf")
    return {"dir": root / "base" / "hf", "model": model, "tok": tok, "vocab": vocab, "spm": spms,
            "lines": en[-200:], "root": root}


def variant(base: dict, name: str, src_vocab: list[str], tgt_vocab: list[str] | None):
    """The base model's function under other vocabularies: each embedding row (and logits bias entry) follows
    its piece; pieces the base lacks (language codes) get fixed random rows."""
    old = {p: i for i, p in enumerate(base["vocab"])}
    weights = base["model"].state_dict()
    shared, bias = weights["model.shared.weight"], weights["final_logits_bias"][0]
    g = torch.Generator().manual_seed(2)

    def rows(vocab: list[str]) -> torch.Tensor:
        return torch.stack([shared[old[p]] if p in old else torch.randn(shared.shape[1], generator=g) * 0.3
                            for p in vocab])

    tgt = tgt_vocab or src_vocab
    model = transformers.MarianMTModel(marian_config(len(src_vocab), len(tgt), src_vocab.index("<pad>"),
                                                     tgt_vocab is None))
    new = {k: v for k, v in weights.items() if "embed_tokens" not in k and "shared" not in k and k != "lm_head.weight"}
    new["final_logits_bias"] = torch.stack([bias[old[p]] if p in old else torch.tensor(-1.0) for p in tgt])[None]
    if tgt_vocab is None:
        new["model.shared.weight"] = rows(src_vocab)
    else:
        new["model.encoder.embed_tokens.weight"] = rows(src_vocab)
        new["model.decoder.embed_tokens.weight"] = rows(tgt)
    model.load_state_dict(new, strict=False)
    model.tie_weights()
    model.eval()
    tok = save(base["root"] / name, model, *base["spm"], src_vocab, tgt_vocab)
    return base["root"] / name / "hf", model, tok


def hf_translate(model, tok, lines: list[str], beam: int) -> tuple[list[str], list[bool]]:
    """generate()'s translations, and whether each ended before max_new_tokens."""
    inputs = tok(lines, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**inputs, num_beams=beam, do_sample=False, max_new_tokens=MAX_NEW, length_penalty=1.0,
                             early_stopping=False)
    ended = (out[:, 1:] != model.config.pad_token_id).sum(1) < MAX_NEW
    return tok.batch_decode(out, skip_special_tokens=True), ended.tolist()


def nmt_translate(path: Path, lines: list[str], beam: int, **decode) -> list[str]:
    settings = DecodeConfig(beam=beam, max_len_a=0.0, max_len_b=MAX_NEW - 1, length_penalty=1.0,
                            length_penalty_type="average", **decode)
    translator = Translator(checkpoint.load(path), settings, dtype="fp32")
    return [r.text[0] for r in translator.translate_chunk(lines)]


def assert_same_as_hf(path: Path, model, tok, lines: list[str], **decode) -> None:
    """Greedy: identical strings. Beam 4 with generate's length penalty: identical wherever generate ended
    the translation itself. At its length limit generate forces EOS with log-probability 0, nmt (like
    fairseq) with EOS's real log-probability, so hypotheses cut off there rank differently."""
    hf_lines = [f"{decode['prefix']} {line}" for line in lines] if decode.get("prefix") else lines
    greedy, _ = hf_translate(model, tok, hf_lines, 1)
    assert nmt_translate(path, lines, 1, **decode) == greedy
    beam, ended = hf_translate(model, tok, hf_lines, 4)
    ours = nmt_translate(path, lines, 4, **decode)
    assert sum(ended) >= 180, "the test model should end most translations itself"
    assert [o for o, e in zip(ours, ended) if e] == [b for b, e in zip(beam, ended) if e]
    assert len(set(ours)) > 100  # real, varied translations, not one string repeated


def test_imported_model_computes_hf_logits(base, tmp_path):
    out = import_model(str(base["dir"]), tmp_path / "m.pt")
    state = checkpoint.load(out)
    assert state["config"]["model"]["activation"] == "swish" and state["config"]["model"]["position_layout"] == "halves"
    assert state["config"]["decode"]["length_penalty_type"] == "average"
    translator = Translator(state, DecodeConfig(), dtype="fp32")
    inputs = base["tok"](base["lines"][:16], return_tensors="pt", padding=True)
    assert translator.tokenizer.encode_src(base["lines"][:16]) == [
        [i for i in ids if i != base["model"].config.pad_token_id][:-1] for ids in inputs["input_ids"].tolist()]
    pad = base["model"].config.pad_token_id
    decoder_in = torch.cat([torch.full((16, 1), pad), inputs["input_ids"][:, :6]], dim=1)  # starts from <pad>
    with torch.no_grad():
        expected = base["model"](**inputs, decoder_input_ids=decoder_in).logits
        ours = translator.model(inputs["input_ids"], decoder_in)
    assert expected.abs().max() > 1.0  # the logits bias and trained weights at work
    torch.testing.assert_close(ours, expected, atol=1e-4, rtol=1e-4)


def test_greedy_and_beam_translations_equal_hf_generate(base, tmp_path):
    out = import_model(str(base["dir"]), tmp_path / "m.pt")
    assert_same_as_hf(out, base["model"], base["tok"], base["lines"])


def test_separate_vocabularies(base, tmp_path):
    """Source and target ids in two different orders (<pad> last in both, as config.json has one pad id)."""
    pieces = base["vocab"][:-1]
    src_vocab = [*pieces[:2], *reversed(pieces[2:]), "<pad>"]
    tgt_vocab = [*pieces[:2], *pieces[3::2], *pieces[2::2], "<pad>"]
    directory, model, tok = variant(base, "separate", src_vocab, tgt_vocab)
    out = import_model(str(directory), tmp_path / "m.pt")
    state = checkpoint.load(out)
    assert state["tokenizer"]["tgt_vocab"] == tgt_vocab and not Translator(state, DecodeConfig()).tokenizer.joint
    assert_same_as_hf(out, model, tok, base["lines"])


def test_target_language_prefix(base, tmp_path):
    vocab = [*base["vocab"][:2], *CODES, *base["vocab"][2:]]
    directory, model, tok = variant(base, "multilingual", vocab, None)
    out = import_model(str(directory), tmp_path / "m.pt")
    assert_same_as_hf(out, model, tok, base["lines"], prefix=">>fra<<")
    typed = nmt_translate(out, [f">>fra<< {line}" for line in base["lines"][:20]], 1)  # the code in the text
    assert typed == nmt_translate(out, base["lines"][:20], 1, prefix=">>fra<<")
    assert typed != nmt_translate(out, base["lines"][:20], 1, prefix=">>deu<<")
    with pytest.raises(NmtError, match=r">>xx<<.*not in the model's source vocabulary.*>>deu<<, >>fra<<"):
        nmt_translate(out, ["x"], 1, prefix=">>xx<<")


def test_cli_import_then_translate_and_info(base, tmp_path):
    """The commands in-process (tests.helpers.cli.run_cli: nmt's entry point; a child would import transformers
    again, seconds)."""
    ckpt = tmp_path / "opus.pt"
    result = run_cli("import", str(base["dir"]), "-o", str(ckpt), "--src-lang", "en", "--tgt-lang", "de")
    assert result.exit_code == 0, result.stderr
    lines = base["lines"][:20]
    result = run_cli("translate", "--checkpoint", str(ckpt), "--beam", "1", "--dtype", "fp32", "--no-progress",
                     "--set", "decode.max_len_a=0", "--set", f"decode.max_len_b={MAX_NEW - 1}",
                     input="\n".join(lines).encode() + b"\n")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == hf_translate(base["model"], base["tok"], lines, 1)[0]
    info = run_cli("info", str(ckpt), "--json")
    assert info.exit_code == 0, info.stderr
    described = json.loads(info.stdout)
    assert described["kind"] == "imported" and described["imported_from"] == str(base["dir"])
    assert described["model"]["activation"] == "swish" and described["model"]["position_layout"] == "halves"
    text = run_cli("info", str(ckpt)).stdout
    assert "imported pretrained model" in text and "activation swish" in text


def broken_copy(base: dict, tmp_path: Path) -> Path:
    directory = tmp_path / "copy"
    directory.mkdir()
    for f in base["dir"].iterdir():
        (directory / f.name).write_bytes(f.read_bytes())
    return directory


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "source.spm").unlink(), r"missing source\.spm"),
    (lambda d: (d / "model.safetensors").unlink(), r"missing model weights"),
    (lambda d: edit_json(d / "config.json", model_type="bart"), r"config\.json: model_type 'bart' is not a Marian"),
    (lambda d: edit_json(d / "config.json", normalize_before=True), r"normalize_before=True is not supported"),
    (lambda d: edit_json(d / "config.json", activation_function="gelu_fast"), r"activation_function='gelu_fast'"),
    (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:5000]),
     r"model\.safetensors: corrupt or unreadable weights"),
    (lambda d: edit_json(d / "vocab.json", **{"▁extra": len(json.loads((d / "vocab.json").read_text()))}),
     r"vocab\.json has \d+ entries but the weights' embedding has \d+ rows"),
    (lambda d: edit_json(d / "vocab.json", **{"▁a": 10_000}), r"vocab\.json: ids must be"),
])
def test_bad_inputs_are_one_line_errors_naming_the_file(base, tmp_path, damage, message):
    directory = broken_copy(base, tmp_path)
    damage(directory)
    with pytest.raises(NmtError, match=message):
        import_model(str(directory), tmp_path / "m.pt")
    assert not (tmp_path / "m.pt").exists()


def test_cli_error_is_one_line(base, tmp_path):
    directory = broken_copy(base, tmp_path)
    edit_json(directory / "config.json", model_type="t5")
    proc = nmt_process("import", str(directory), "-o", str(tmp_path / "m.pt"))
    assert assert_one_line_error(proc) == (
        f"error: {directory / 'config.json'}: model_type 't5' is not a Marian model (nmt imports MarianMTModel / "
        "OPUS-MT checkpoints)")


def test_hub_names_download_through_huggingface_hub(base, tmp_path, monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    asked = {}

    def snapshot_download(name, allow_patterns):
        asked.update(name=name, patterns=allow_patterns)
        return str(base["dir"])

    monkeypatch.setattr(huggingface_hub, "list_repo_files", lambda name: ["model.safetensors", "pytorch_model.bin"])
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    out = import_model("Helsinki-NLP/opus-mt-en-de", tmp_path / "m.pt")
    assert checkpoint.load(out)["imported_from"] == "Helsinki-NLP/opus-mt-en-de"
    assert asked["name"] == "Helsinki-NLP/opus-mt-en-de"
    assert "model.safetensors" in asked["patterns"] and "pytorch_model.bin" not in asked["patterns"]


def test_offline_hub_name_is_one_line_error(tmp_path):
    proc = nmt_process("import", "Helsinki-NLP/opus-mt-en-de", "-o", str(tmp_path / "m.pt"), HF_HUB_OFFLINE="1")
    assert_one_line_error(proc, "cannot download Helsinki-NLP/opus-mt-en-de from the Hugging Face hub")
    # HF_HUB_OFFLINE is read when huggingface_hub is imported: a child above, in-process here
    assert_one_line_error(run_cli("import", str(tmp_path / "nowhere"), "-o", str(tmp_path / "m.pt")),
                          "not a directory saved by save_pretrained")


# ---------------------------------------------------------------- fine-tuning


def valid_loss(ckpt: Path, data: Path) -> float:
    """The per-token loss of a checkpoint on a data dir's valid split."""
    import contextlib

    from nmt.train.validate import validation_loss

    state = checkpoint.load(ckpt)
    special = state.tokenizer().special_ids
    return validation_loss(state.build_model().eval(), DataDir.open(data).split("valid"), 1024, 0.0, special,
                           torch.device("cpu"), contextlib.nullcontext)["loss"]


def fine_tune_config(data: Path, run: Path, ckpt: Path, *overrides: str):
    return load_config(None, [
        f"data.dir={data}", f"train.run_dir={run}", f"train.init_from={ckpt}", "train.max_tokens=1024",
        "train.lr=1e-3", "train.warmup=5", "train.log_every=1", "train.valid_every=1000", "train.save_every=10",
        "train.valid_bleu_sentences=0", "train.average_last=2", "train.max_updates=30", *overrides])


@pytest.fixture(scope="module")
def fine_tune_data(base, tmp_path_factory):
    """The imported model and the demo corpus prepared with its tokenizer (prepare --tokenizer-from)."""
    root = tmp_path_factory.mktemp("fine-tune")
    ckpt = import_model(str(base["dir"]), root / "opus.pt", src_lang="en", tgt_lang="de")
    raw = write_demo(root / "raw", n_train=1000, n_valid=50, n_test=50, seed=7)
    cfg = load_config(None, [f"data.dir={root / 'data'}", f"data.tokenizer_from={ckpt}"]).data
    cfg.train, cfg.valid, cfg.test = raw["train"], raw["valid"], raw["test"]
    prepare(cfg, progress=False)
    return ckpt, root / "data", raw


def test_prepare_with_the_models_tokenizer(base, fine_tune_data):
    ckpt, data, raw = fine_tune_data
    theirs = Tokenizer.from_state(checkpoint.load(ckpt)["tokenizer"])
    tokenizer = DataDir.open(data).tokenizer()
    assert tokenizer.mapped and tokenizer.fingerprint() == theirs.fingerprint()
    first = Path(raw["valid"] + ".en").read_text(encoding="utf-8").splitlines()[0]
    assert DataDir.open(data).split("valid")[0]["src_ids"] == base["tok"](first)["input_ids"][:-1]  # EOS: batching's
    with pytest.raises(NmtError, match=r"translates en->de but data.src_lang/tgt_lang are de->en"):
        prepare(load_config(None, [f"data.dir={data}-x", f"data.tokenizer_from={ckpt}", "data.src_lang=de",
                                   "data.tgt_lang=en", f"data.train={raw['train']}"]).data, progress=False)


def test_fine_tuning_starts_from_the_imported_weights_and_resumes_exactly(base, fine_tune_data, demo_data, tmp_path):
    ckpt, data, raw = fine_tune_data
    summary = train(fine_tune_config(data, tmp_path / "full", ckpt), progress=False)
    assert summary["step"] == 30
    losses = [r["loss"] for r in RunDir(tmp_path / "full").read_metrics() if r["type"] == "train"]
    scratch = train(fine_tune_config(data, tmp_path / "scratch", ckpt, "train.init_from=null", "train.max_updates=1",
                                     "model.d_model=32", "model.n_heads=4", "model.d_ff=64"), progress=False)
    assert scratch["step"] == 1
    scratch_loss = RunDir(tmp_path / "scratch").read_metrics()[0]["loss"]
    assert losses[0] < scratch_loss - 1.0  # the first update already computes with the imported weights
    # and fine-tuning lowers the loss on held-out data (a fixed set: batch-to-batch noise in the training losses of
    # 30 updates can exceed what they learn)
    assert valid_loss(tmp_path / "full" / "last.pt", data) < valid_loss(ckpt, data)
    tuned = checkpoint.load(tmp_path / "full" / "last.pt")
    assert tuned["config"]["model"] == checkpoint.load(ckpt)["config"]["model"]
    translator = Translator(tuned, DecodeConfig(beam=2), dtype="fp32")
    assert translator.tokenizer.mapped and all(r.text[0] for r in translator.translate_chunk(base["lines"][:5]))
    # interrupted at update 20 and resumed: the same weights as the uninterrupted run
    train(fine_tune_config(data, tmp_path / "parts", ckpt, "train.max_updates=20"), progress=False)
    (tmp_path / "parts" / "averaged.pt").unlink(missing_ok=True)
    train(fine_tune_config(data, tmp_path / "parts", ckpt), progress=False)
    full, parts = (checkpoint.load(tmp_path / run / "last.pt")["model"] for run in ("full", "parts"))
    assert all(torch.equal(full[k], parts[k]) for k in full)


def test_fine_tuning_mistakes_are_one_line_errors(fine_tune_data, demo_data, tmp_path):
    ckpt, data, _ = fine_tune_data
    with pytest.raises(NmtError, match=r"model.n_heads=2 conflicts with .*opus.pt, whose model has 4"):
        train(fine_tune_config(data, tmp_path / "a", ckpt, "model.n_heads=2"), progress=False)
    with pytest.raises(NmtError, match=r"is not encoded with the tokenizer of .*nmt prepare --tokenizer-from"):
        train(fine_tune_config(demo_data, tmp_path / "b", ckpt), progress=False)
    summary = train(fine_tune_config(data, tmp_path / "c", ckpt, "model.dropout=0.3", "train.max_updates=2"),
                    progress=False)
    assert summary["step"] == 2
    assert checkpoint.load(tmp_path / "c" / "last.pt")["config"]["model"]["dropout"] == 0.3  # a dropout may be set


def test_pytorch_model_bin_imports_like_safetensors(base, tmp_path):
    """Older exports ship pytorch_model.bin (a torch state dict, tied tensors under every name)."""
    directory = broken_copy(base, tmp_path)
    (directory / "model.safetensors").unlink()
    torch.save(base["model"].state_dict(), directory / "pytorch_model.bin")
    from_bin = checkpoint.load(import_model(str(directory), tmp_path / "bin.pt"))["model"]
    from_safetensors = checkpoint.load(import_model(str(base["dir"]), tmp_path / "st.pt"))["model"]
    assert from_bin.keys() == from_safetensors.keys()
    assert all(torch.equal(from_bin[k], from_safetensors[k]) for k in from_bin)
