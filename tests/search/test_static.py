"""Decoding with static shapes (nmt.search.static): the same hypotheses as nmt's own decoding (nmt.cache's growing,
shrinking cache), for greedy and beam search, n-best and attention, on an untrained model and on the committed demo
model; its step's shapes never change within a search; what it cannot serve is refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from nmt import search
from nmt.search import SearchSettings, static
from nmt.search.static import StaticDecoder, decoder_step, next_lineage, static_step
from nmt.translation.translator import ModelOptions, Translator
from tests.helpers.hypotheses import assert_same
from tests.helpers.paths import DEMO_MODEL
from tests.helpers.tables import IDS, random_inputs, random_model


def searched(model, src: torch.Tensor, **settings) -> list[list]:
    return search.run(model, src, SearchSettings(**settings), IDS)


@pytest.mark.parametrize("settings", [
    dict(beam=1),
    dict(beam=4),
    dict(beam=4, nbest=4, length_penalty=1.0),
    dict(beam=3, need_attention=True),
    dict(beam=2, poll_every=3, max_len_a=0.0, max_len_b=5),
])
def test_static_shapes_find_the_same_hypotheses(settings):
    model, src = random_model(), random_inputs(6)
    with torch.inference_mode():
        assert_same(searched(StaticDecoder(model), src, **settings), searched(model, src, **settings))


def test_the_demo_model_translates_the_same_with_static_shapes():
    translator = Translator.load(DEMO_MODEL, None, ModelOptions(threads=1, config_given=False))
    lines = ["A man is riding a bicycle.", "Two dogs play in the snow near a small red house.", "Hello!",
             "The children are eating ice cream on the beach while their parents read."]
    for beam in (1, 4):
        decode = translator.decode_with(beam=beam, nbest=beam)
        want = translator.translate_chunk(lines, decode=decode)
        model, translator.model = translator.model, StaticDecoder(translator.model)
        try:
            got = translator.translate_chunk(lines, decode=decode)
        finally:
            translator.model = model
        assert [t.text for t in got] == [t.text for t in want]
        assert_same([t.hypotheses for t in got], [t.hypotheses for t in want])


@pytest.mark.parametrize("beam", [1, 4])
def test_no_step_reads_a_position_after_its_own(monkeypatch, beam):
    """A step reads the cache's positions up to its own (StaticCache.prefix): a cache whose unwritten positions hold
    NaN from position 2 on (self_cache zeroes only 0 and 1) finds the same hypotheses as nmt's own decoding."""
    def poisoned(cross_kv, positions, rows):
        kv = real(cross_kv, positions, rows)
        kv[2:] = float("nan")
        return kv

    real = static.self_cache
    monkeypatch.setattr(static, "self_cache", poisoned)
    model, src = random_model(), random_inputs(4)
    with torch.inference_mode():
        assert_same(searched(StaticDecoder(model), src, beam=beam), searched(model, src, beam=beam))


def test_a_sentences_rows_read_one_copy_of_its_source():
    """A static cache holds the source's keys/values once per sentence, and its rows' cross-attention over that copy
    (with the weights) is what each row's own copy would give."""
    model, src = random_model().eval(), random_inputs(3)
    with torch.inference_mode():
        memory, src_pad_mask = model.encode(src)
        cache = StaticDecoder(model).init_cache(memory, src_pad_mask, 10, rows=4)
        assert cache.cross_kv.size(2) == 3 and cache.memory_mask.size(0) == 3 and cache.self_kv.size(3) == 12
        attention = model.decoder_layers[0].cross_attn
        query = torch.randn(12, 1, model.d_model, generator=torch.Generator().manual_seed(1))
        view = SimpleNamespace(memory_kv=cache.cross_kv[0].unbind(0))
        shared = attention(query, None, cache.memory_mask, cache=view, need_weights=True)
        own = attention(query, memory.repeat_interleave(4, 0), cache.memory_mask.repeat_interleave(4, 0),
                        need_weights=True)
    for got, want in zip(shared, own, strict=True):
        torch.testing.assert_close(got, want)


def test_every_step_has_the_same_shapes_but_the_positions_it_reads():
    model, src = random_model(), random_inputs(5)
    shapes = set()

    def recording(*args, **kwargs):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        shapes.add(tuple(tuple(a.shape)[1:] if a is args[3] else tuple(a.shape) for a in tensors))
        prefixes.append(args[3].size(0))
        return static_step(*args, **kwargs)

    decoder, prefixes = StaticDecoder(model), []
    decoder.step_fn = recording
    with torch.inference_mode():
        searched(decoder, src, beam=4, max_len_a=0.0, max_len_b=7)
    # tokens, pos, keys/values (but their positions), source keys/values, mask: one shape each, every step
    assert len(shapes) == 1
    assert prefixes == [2, 2, 3, 4, 5, 6, 7, 8]  # the positions read: up to the step's, at least 2


def test_the_step_reads_its_cache_and_leaves_the_writing_to_its_caller():
    """decoder_step only reads the cache (a compiled program writing into a slice of its input copies all of it);
    static_step writes its keys/values at pos and nothing else."""
    model, src = random_model(), random_inputs(3)
    decoder = StaticDecoder(model)
    with torch.inference_mode():
        memory, src_pad_mask = decoder.encode(src)
        cache = decoder.init_cache(memory, src_pad_mask, max_len=6)
        cache.self_kv.zero_()  # read whole below: no garbage after the prefix (self_cache leaves it unwritten)
        tokens = torch.full((src.size(0),), IDS.bos)
        for _ in range(3):  # positions 0-2 written by static_step
            decoder.decode_step(tokens, cache)
        before = cache.self_kv.clone()
        args = (model, tokens, cache.pos, cache.self_kv, cache.cross_kv, cache.memory_mask)
        logits, _, new = decoder_step(*args)
        assert torch.equal(cache.self_kv, before) and new.shape == (1, *before.shape[1:])
        # the positions up to pos (the step's prefix) are all a step reads
        torch.testing.assert_close(decoder_step(model, tokens, cache.pos, cache.prefix(), *args[4:])[0], logits)
        assert torch.equal(static_step(*args)[0], logits)
    assert torch.equal(cache.self_kv[3:4], new) and torch.equal(cache.self_kv[:3], before[:3])
    assert torch.equal(cache.self_kv[4:], before[4:])


def test_a_lineage_reads_the_cache_as_the_reorders_would_have_copied_it():
    """The compiled beam step's cache: each row's keys/values written in its own place, never moved, and read through
    next_lineage's lineage, the step's prefix of both (as the package has them), gives the logits of a cache whose
    rows were reordered (copied) at every step."""
    model, src = random_model(), random_inputs(3)
    decoder = StaticDecoder(model)
    with torch.inference_mode():
        memory, src_pad_mask = decoder.encode(src)
        copied = decoder.init_cache(memory, src_pad_mask, max_len=7)
        copied.self_kv.zero_()  # read whole below
        kept, tokens = copied.self_kv.clone(), torch.full((src.size(0),), IDS.bos)
        lineage = torch.arange(3).expand(7, -1).contiguous()  # [T, N]
        for pos, parents in enumerate([[0, 1, 2], [2, 0, 0], [1, 1, 0], [0, 2, 1]]):
            at, P = torch.tensor(pos), max(pos + 1, 2)
            want, _, new = decoder_step(model, tokens, at, copied.self_kv, copied.cross_kv, copied.memory_mask)
            got, _, kept_new = decoder_step(model, tokens, at, kept[:P], copied.cross_kv, copied.memory_mask,
                                            lineage=lineage[:P])
            torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
            parents = torch.tensor(parents)
            copied.self_kv = copied.self_kv.index_copy(0, at[None], new).index_select(3, parents)
            kept.index_copy_(0, at[None], kept_new)
            lineage[:P] = next_lineage(lineage[:P], parents, at)
            tokens = want.argmax(-1)[parents]
    assert lineage[:4].T.tolist() == [[0, 0, 1, 0], [2, 2, 0, 2], [0, 0, 1, 1]]  # positions read from other rows


def test_constrained_and_sampled_search_are_refused():
    model, src = random_model(), random_inputs(2)
    with torch.inference_mode(), pytest.raises(ValueError, match="greedy and beam"):
        searched(StaticDecoder(model), src, beam=2, sampling=True)
