"""What the demo model learned: German says units before tens, and its cross-attention shows it."""

from __future__ import annotations

import numpy as np
import pytest

from nmt.config.experiment import Config, DecodeConfig
from nmt.demo.german import number_to_de, number_to_en
from nmt.translation.translator import Translator


@pytest.fixture(scope="module")
def translator(demo_run) -> Translator:
    return Translator.load(demo_run / "averaged.pt", Config(decode=DecodeConfig(beam=4)))


def find(pieces: list[str], word: str) -> int | None:
    """Index of the only piece that contains `word` (None when the segmentation is ambiguous)."""
    hits = [i for i, p in enumerate(pieces) if word in p.replace("\u2581", "")]
    return hits[0] if len(hits) == 1 else None


def crossing(translator: Translator, n: int) -> tuple[float, float] | None:
    """For 'forty-two' -> 'zweiundvierzig': how much more the German unit attends to the English unit
    than to the English tens, and the German tens to the English tens than to the English unit."""
    tens_en, unit_en = number_to_en(n).split("-")
    unit_de, tens_de = number_to_de(n).split("und")
    result = translator.translate_chunk([number_to_en(n)], need_attention=True)[0]
    hyp = result.hypotheses[0]
    if result.text[0] != number_to_de(n):
        return None
    src = translator.tokenizer.src_id_pieces(result.src_ids)
    tgt = translator.tokenizer.tgt_pieces(hyp.tokens)
    s_tens, s_unit = find(src, tens_en), find(src, unit_en)
    t_unit, t_tens = find(tgt, unit_de), find(tgt, tens_de)
    if None in (s_tens, s_unit, t_unit, t_tens) or t_unit == t_tens or s_tens == s_unit:
        return None
    a = hyp.attention.numpy()
    return a[t_unit, s_unit] - a[t_unit, s_tens], a[t_tens, s_tens] - a[t_tens, s_unit]


def test_attention_rows_are_distributions_over_the_source(translator):
    result = translator.translate_chunk(["three hundred forty-two euros"], need_attention=True)[0]
    attn = result.hypotheses[0].attention
    assert attn.shape == (len(result.hypotheses[0].tokens) + 1, len(result.src_ids) + 1)
    np.testing.assert_allclose(attn.sum(-1).numpy(), 1.0, atol=1e-4)
    assert (attn >= 0).all()


def test_units_before_tens_shows_as_crossed_attention(translator):
    measured = [c for n in range(21, 100) if n % 10 for c in [crossing(translator, n)] if c is not None]
    assert len(measured) >= 20, "the demo model should translate most two-digit numbers exactly"
    unit_margin, tens_margin = np.mean(measured, axis=0)
    # the first German piece (the unit) looks at the *last* English word, the second at the first:
    # an anti-diagonal block, i.e. the reordering the task needs
    print(f"{len(measured)} numbers: unit margin {unit_margin:.2f}, tens margin {tens_margin:.2f}")
    assert unit_margin > 0.1 and tens_margin > 0.1, (unit_margin, tens_margin)
