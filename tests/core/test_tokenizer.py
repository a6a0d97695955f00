from __future__ import annotations

import io
import json
import pickle
import random

import pytest

from nmt.config.experiment import DataConfig, check_data
from nmt.data.datadir import DataDir, spm_files, write_tokenizer
from nmt.demo.german import generate_pairs
from nmt.errors import NmtError
from nmt.tokenizer import NMT_IDS, Tokenizer, train_spm

PAD_ID, UNK_ID, BOS_ID, EOS_ID = NMT_IDS.pad, NMT_IDS.unk, NMT_IDS.bos, NMT_IDS.eos

PAIRS = generate_pairs(2000, seed=5)
EN = [en for en, _ in PAIRS]
DE = [de for _, de in PAIRS]


@pytest.fixture(scope="module")
def joint() -> Tokenizer:
    model = train_spm(EN + DE, vocab_size=400, seed=1)
    return Tokenizer(model, src_lang="en", tgt_lang="de", normalize="NFC")


@pytest.fixture(scope="module")
def separate() -> Tokenizer:
    return Tokenizer(train_spm(iter(EN), 200, model_type="unigram"), train_spm(iter(DE), 300),
                     src_lang="en", tgt_lang="de")


def test_special_ids(joint):
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert joint.tgt_pieces([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
    ids = joint.encode_src(EN[:200])
    assert all(ids) and not any(i in (PAD_ID, BOS_ID, EOS_ID) for seq in ids for i in seq)  # no bos/eos added
    assert not any(UNK_ID in seq for seq in ids)  # every character was seen in training


def test_roundtrip(joint, separate):
    for tok in (joint, separate):
        assert tok.decode_tgt(tok.encode_tgt(DE[:300])) == DE[:300]
    assert joint.decode_tgt(joint.encode_src(EN[:50])) == EN[:50]  # joint: one vocabulary


def test_decode_strips_specials_and_stops_at_eos(joint):
    ids = joint.encode_tgt(["das rote Auto"])[0]
    assert joint.decode_tgt([[BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]]) == ["das rote Auto"]
    assert joint.decode_tgt([[*ids, EOS_ID, *ids]]) == ["das rote Auto"]
    assert joint.decode_tgt([[PAD_ID, PAD_ID], [], [EOS_ID]]) == ["", "", ""]
    assert joint.decode_tgt([[*ids, 10**6, -5]]) == ["das rote Auto"]  # ids outside the vocab are dropped
    assert joint.decode_tgt([]) == []


def test_joint_vs_separate(joint, separate):
    assert joint.joint and joint.src_vocab_size == joint.tgt_vocab_size == 400
    assert joint.encode_src(["zwei rote Autos"]) == joint.encode_tgt(["zwei rote Autos"])
    assert spm_files(joint.joint, "en", "de") == {"src": "spm.model", "tgt": "spm.model"}
    assert not separate.joint and (separate.src_vocab_size, separate.tgt_vocab_size) == (200, 300)
    assert spm_files(separate.joint, "en", "de") == {"src": "spm.en.model", "tgt": "spm.de.model"}
    assert separate.encode_src(["the red car"]) != separate.encode_tgt(["the red car"])
    assert separate.src_pieces("the red car")[0].startswith("\u2581")


def test_pickle_and_state(joint, separate):
    for tok in (joint, separate):
        for copy in (pickle.loads(pickle.dumps(tok)), Tokenizer.from_state(tok.to_state())):
            assert copy.joint == tok.joint and copy.normalize == tok.normalize
            assert copy.encode_src(EN[:20]) == tok.encode_src(EN[:20])
            assert copy.encode_tgt(DE[:20]) == tok.encode_tgt(DE[:20])
    with pytest.raises(NmtError, match="tokenizer state"):
        Tokenizer.from_state({"nothing": 1})


def test_state_survives_torch_weights_only(joint):
    torch = pytest.importorskip("torch")
    import nmt.checkpoint  # noqa: F401  (allows the bytes in torch.load(weights_only=True): torch 2.4 needs it)
    buffer = io.BytesIO()
    torch.save({"tokenizer": joint.to_state()}, buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)["tokenizer"]
    assert Tokenizer.from_state(state).encode_tgt(DE[:5]) == joint.encode_tgt(DE[:5])


def test_save_and_load_data_dir(tmp_path, separate):
    files = write_tokenizer(separate, tmp_path)
    assert files == {"spm_files": {"src": "spm.en.model", "tgt": "spm.de.model"}}
    meta = {"version": 1, "src_lang": "en", "tgt_lang": "de", "joint_vocab": False, **files,
            "options": {"normalize": "NFKC"}}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    loaded = DataDir.open(tmp_path).tokenizer()
    assert not loaded.joint and loaded.normalize == "NFKC"
    assert loaded.encode_tgt(DE[:10]) == separate.encode_tgt(DE[:10])
    (tmp_path / "spm.de.model").unlink()
    with pytest.raises(NmtError, match=r"missing tokenizer model .*spm\.de\.model"):
        DataDir.open(tmp_path).tokenizer()
    with pytest.raises(NmtError, match="run `nmt prepare` first"):
        DataDir.open(tmp_path / "nowhere")


def test_odd_unicode_encodes_and_decodes(joint):
    odd = ["", "   ", "\x00\x01\x1b[31m red \x7f", "😀🚗 emoji " * 3, "a\u2028b\u2029c\x85d",
           "\ud800 lone surrogate", "ünïcödé " * 300, "x" * 2000, "\U0010ffff\ufeff\u200b", "e\u0301"]
    ids = joint.encode_src(odd)
    assert len(ids) == len(odd) and ids[0] == [] and ids[1] == []
    texts = joint.decode_tgt(ids)
    assert len(texts) == len(odd) and all(isinstance(t, str) and "\n" not in t for t in texts)
    assert "\x00" not in joint.src_pieces("a\x00b") and joint.src_pieces("") == []
    assert joint.encode_src(["e\u0301"]) == joint.encode_src(["\u00e9"])  # NFC applied like in prepare


def test_training_is_deterministic_and_sample_capped():
    assert train_spm(EN, 300, seed=3) == train_spm(EN, 300, seed=3)
    train_spm(EN, 1000)  # fine with all 2000 sentences ...
    with pytest.raises(NmtError, match=r"vocab size 1000 is too large for this data \(max \d+\)"):
        train_spm(EN, 1000, sample_cap=150)  # ... too large for a 150-sentence sample
    with pytest.raises(NmtError, match=r"data.spm_sample must be > 100"):
        check_data(DataConfig(spm_sample=100))  # the rule lives with the config


def test_sample_is_drawn_from_the_whole_stream():
    rng = random.Random(0)

    def lines(letters: str) -> list[str]:
        def word() -> str:
            return "".join(rng.choice(letters) for _ in range(5))

        return [" ".join(word() for _ in range(8)) for _ in range(4000)]

    first, second = lines("abcdefghijklm"), lines("nopqrstuvwxyz")
    tok = Tokenizer(train_spm(first + second, 200, sample_cap=500))  # 500 of 8000, not the first 500
    pieces = tok.tgt_pieces(list(range(4, tok.tgt_vocab_size)))
    assert sum(any(c in "nopqrstuvwxyz" for c in p) for p in pieces) > 50
    assert sum(any(c in "abcdefghijklm" for c in p) for p in pieces) > 50


def test_vocab_size_errors():
    with pytest.raises(NmtError, match=r"vocab size 5000 is too large for this data \(max \d+\)"):
        train_spm(EN[:100], 5000)
    with pytest.raises(NmtError, match=r"vocab size 10 is too small for this data"):
        train_spm(EN[:100], 10, model_type="unigram")
    with pytest.raises(NmtError, match="data.spm_type must be 'bpe' or 'unigram'"):  # the rule lives with the config
        check_data(DataConfig(spm_type="word2vec"))
    with pytest.raises(NmtError, match="SentencePiece training failed: .*word2vec"):  # one line if called directly
        train_spm(EN, 300, model_type="word2vec")


def test_invalid_model_bytes():
    with pytest.raises(NmtError, match="not a valid SentencePiece model"):
        Tokenizer(b"not a model")


def test_short_lists_stay_out_of_sentencepieces_thread_pool(joint, monkeypatch):
    """A one-sentence request must not pay SentencePiece's thread pool (2-4 ms a call): short lists are encoded and
    decoded line by line in this thread, long ones in the pool, with the same result."""
    import nmt.tokenizer as tokenizer_mod

    lines = EN[:100]
    pooled_ids, pooled_text = joint.encode_src(lines), joint.decode_tgt(joint.encode_tgt(DE[:100]))
    list_calls = []
    for processor in {joint._src, joint._tgt}:
        for name in ("encode", "decode"):
            method = getattr(processor, name)

            def spy(items, *args, _method=method, **kwargs):
                if isinstance(items, list) and items and isinstance(items[0], (str, list)):
                    list_calls.append(len(items))
                return _method(items, *args, **kwargs)

            monkeypatch.setattr(processor, name, spy)
    assert joint.encode_src(lines[:1]) == pooled_ids[:1]
    assert joint.decode_tgt(joint.encode_tgt(DE[:3])) == pooled_text[:3]
    assert list_calls == []  # line by line
    assert joint.encode_src(lines) == pooled_ids and joint.decode_tgt(joint.encode_tgt(DE[:100])) == pooled_text
    assert list_calls and min(list_calls) >= tokenizer_mod.SPM_POOL_FROM  # the pool, for long lists only
