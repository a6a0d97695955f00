"""A search's steps as CUDA graphs (nmt.search.graphed, `--compile` on a GPU), on the CPU: a graph's warm-up and
recording are stood in for by running the step (what a replay computes: the program's kernels again, over the same
tensors), so everything around the graphs is tested here: the whole cache read with the later positions masked,
source lengths and capacities rounded up, sentences padded to a bucket, a cache's tensors reused by later searches
of its shape, a step's inputs copied in and its outputs copied out, the shapes kept. The same hypotheses as the
model's own decoding, for greedy and beam search, n-best, min_len and length limits. tests/gpu/test_gpu_graphed.py
runs the real CUDA graphs."""

from __future__ import annotations

import pytest
import torch

from nmt import search
from nmt.data.batching import source_batches
from nmt.search import SearchSettings, graphed
from nmt.search.graphed import GraphedDecoder, Recorded
from nmt.translation.translator import ModelOptions, Translator
from tests.helpers.graphs import StandIn
from tests.helpers.hypotheses import (
    FOUR,
    LINES,
    PADDED_CASES,
    THREE,
    assert_same,
    assert_same_translations,
    compiled_and_eager,
)
from tests.helpers.paths import DEMO_MODEL

LONG = ["A very long sentence about " + " and ".join(["a dog", "a cat", "a red ball"] * 6) + "."]


@pytest.fixture()
def translator():
    t = Translator.load(DEMO_MODEL, None, ModelOptions(threads=1, config_given=False))
    t.graphs = StandIn()
    t.compiled = GraphedDecoder(t.model, t.graphs.warm_up, t.graphs.record)
    return t


@pytest.mark.parametrize("lines, decode", [
    *PADDED_CASES,
    (FOUR, dict(beam=4)),
    (THREE, dict(beam=4, nbest=3)),
    (LONG + THREE, dict(beam=4)),  # a source of more than one ROUND
])
def test_graphed_steps_find_the_models_hypotheses(translator, lines, decode):
    got, want = compiled_and_eager(translator, lines, **decode)
    assert_same_translations(got, want)
    assert translator.graphs.warm_ups == 1  # one search, one shape: recorded once, the other steps replayed


def test_a_later_search_of_the_same_shape_replays_over_the_same_tensors(translator):
    compiled_and_eager(translator, FOUR, beam=4)  # the first search: records
    (cache,) = translator.compiled.local.caches.values()
    tensors = [cache.self_kv.data_ptr(), cache.cross_kv.data_ptr(), cache.lineage.data_ptr()]
    shuffled = [FOUR[2], FOUR[0], FOUR[3], FOUR[1]]  # other sources, the same shape once rounded
    got, want = compiled_and_eager(translator, shuffled, beam=4)
    assert_same_translations(got, want)
    (again,) = translator.compiled.local.caches.values()
    assert again is cache and [cache.self_kv.data_ptr(), cache.cross_kv.data_ptr(), cache.lineage.data_ptr()] == tensors
    assert translator.graphs.warm_ups == 1 and translator.graphs.replays > 10  # replayed in the second search too


def test_caches_are_kept_up_to_the_budget_the_least_recently_used_freed_first(translator, monkeypatch):
    def search(lines):  # 4, 8 and 16 rows at beam 4
        translator.translate_chunk(lines, decode=translator.decode_with(beam=4))
        return [shape.rows for shape in translator.compiled.local.caches]

    small, middle, big = LINES[:1], LINES, FOUR
    assert [search(lines) for lines in (small, middle, big, small)] == [[4], [4, 8], [4, 8, 16], [8, 16, 4]]
    assert translator.graphs.warm_ups == 3  # the fourth search found its cache and its graph
    sizes = {shape.rows: shape.nbytes for shape in translator.compiled.local.caches}
    translator.compiled.local.caches.clear()
    monkeypatch.setattr(graphed, "BUDGET", sizes[8] + sizes[16])  # room for two of them
    assert [search(lines) for lines in (small, middle, big, small)] == [[4], [4, 8], [8, 16], [16, 4]]
    assert translator.graphs.warm_ups == 3 + 4
    monkeypatch.setattr(graphed, "BUDGET", 1)
    assert search(middle) == [8]  # over any budget: the search's own cache alone


def test_a_replays_outputs_are_copies_and_its_inputs_are_copied_in():
    stand_in = StandIn()
    owned = torch.zeros(3)

    class AddInPlace(torch.nn.Module):
        def forward(self, x, acc):
            acc.add_(x)  # a step's write into the cache: in place, into the tensor it was recorded with
            return (acc * 2,)

    run = Recorded(AddInPlace(), [owned], stand_in.warm_up, stand_in.record, announce=print)
    first = run(torch.ones(3), owned)[0]
    second = run(torch.full((3,), 5.0), owned)[0]
    assert first.tolist() == [2.0] * 3 and second.tolist() == [12.0] * 3  # x copied in; the first result kept
    assert owned.tolist() == [6.0] * 3 and stand_in.warm_ups == 1 and stand_in.replays == 1


def test_a_decoder_serves_searches_in_and_out_of_inference_mode(translator):
    """Graphs recorded in a search in inference mode (as nmt translate runs) replay in a plain no_grad search
    (nmt.search.run alone) and back: the tensors they write in place are not inference tensors."""
    ids = [seq for seq, _ in translator.source_ids(FOUR)]
    (_, batch), = source_batches(ids, 10_000, translator.special)
    settings, special = SearchSettings(beam=4, nbest=2), translator.special
    want = search.run(translator.model, batch.src, settings, special)
    with torch.inference_mode():
        first = search.run(translator.compiled, batch.src, settings, special)
    second = search.run(translator.compiled, batch.src, settings, special)
    with torch.inference_mode():
        third = search.run(translator.compiled, batch.src, settings, special)
    for got in (first, second, third):
        assert_same(got, want)
    assert translator.graphs.warm_ups == 1


def test_a_step_that_cannot_be_recorded_runs_as_it_is_and_says_so(translator):
    """An operator a CUDA graph cannot hold (a recording that raises) leaves the step running without a graph, over
    the same tensors: the same hypotheses, one announcement, no second attempt."""
    said, attempts = [], []

    def refuse(fn, inputs, outputs):
        attempts.append(fn)
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    translator.compiled = GraphedDecoder(translator.model, translator.graphs.warm_up, refuse, said.append)
    for lines in (FOUR, FOUR[::-1]):  # the second search finds the step that was not recorded
        got, want = compiled_and_eager(translator, lines, beam=4)
        assert_same_translations(got, want)
    assert len(attempts) == 1 and translator.graphs.warm_ups == 1
    assert said == ["a decoding step could not be recorded as a CUDA graph, so it runs without one: operation not "
                    "permitted when stream is capturing"]
