"""Writes tests/data/marian-en-de/: the Hugging Face Marian model (a MarianMTModel and its MarianTokenizer, as
save_pretrained writes them) that tests/export_models.py brings in with `nmt import` as its "marian" kind.

It is tests/test_marian.py's model (swish, sin/cos halves, scaled embeddings, a non-zero final_logits_bias, <pad>
last, one vocabulary) trained for 2,000 updates on the whole demo corpus rather than 200 on its short sentences:
the engines' beam searches stop by different rules (CTranslate2 at beam x patience finished hypotheses, nmt and
transformers while an unfinished one could still win), which agree on a model that has learnt where its
translations end. Measured on the 100 export test lines at beam 4 (CTranslate2 patience 2): 200 updates 91
identical, 500 95, 1,000 98, 2,000 100. Committed rather than trained in the tests: 2,000 updates take 5 minutes.

    python -m tests.data.make_marian_model      # from the repository root (about 5 minutes on 2 cores)
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch
import transformers

from nmt.demo.files import write_demo
from tests.test_marian import _train, marian_config, save, spm_pieces, train_spm

OUT = Path(__file__).resolve().parent / "marian-en-de"
UPDATES = 2000


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw = write_demo(Path(tmp) / "raw", seed=1)
        en = Path(raw["train"] + ".en").read_text(encoding="utf-8").splitlines()
        de = Path(raw["train"] + ".de").read_text(encoding="utf-8").splitlines()
        src_spm, tgt_spm = train_spm(en[:3000], 200), train_spm(de[:3000], 200)
        vocab = ["</s>", "<unk>", *dict.fromkeys(spm_pieces(src_spm) + spm_pieces(tgt_spm)), "<pad>"]
        torch.manual_seed(0)
        model = transformers.MarianMTModel(marian_config(len(vocab), len(vocab), len(vocab) - 1, True))
        tok = save(Path(tmp) / "model", model, src_spm, tgt_spm, vocab)
        _train(model, tok, en, de, steps=UPDATES)
        with torch.no_grad():
            model.final_logits_bias.normal_(0, 0.1, generator=torch.Generator().manual_seed(1))
        model.save_pretrained(Path(tmp) / "model" / "hf")
        shutil.rmtree(OUT, ignore_errors=True)
        shutil.copytree(Path(tmp) / "model" / "hf", OUT)
    print(f"wrote {OUT}: {', '.join(sorted(p.name for p in OUT.iterdir()))}")


if __name__ == "__main__":
    main()
