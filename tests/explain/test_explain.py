"""`nmt explain`: the page's numbers are the model's (checked here by paths independent of nmt/explain/numbers.py: hooks
on the model's modules and PyTorch's own attention), its final choice is `nmt translate`'s, it loads in a headless
Chromium without errors and without fetching anything, it stays small, and bad input is one error line."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from nmt import checkpoint, search
from nmt.data.batching import collate
from nmt.explain.command import explain_sentence, load
from nmt.explain.numbers import dequantized
from nmt.search import SearchSettings
from tests.helpers.browser import wait_for
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.paths import DEMO_MODEL

CHECKPOINT = DEMO_MODEL  # a fixed small demo model (test_golden.py)
SENTENCE = "three hundred forty-two euros"
THIRTY_WORDS = ("the three red cars and the two small houses near the old bridge cost four hundred twenty-one euros "
                "on the second of may and the train leaves at nine o'clock")


def page_data(page: Path) -> dict[str, Any]:
    """The JSON the page carries (what its renderer draws)."""
    text = page.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="explain-data">(.*?)</script>', text, re.S)
    assert found, "no data in the page"
    return json.loads(found.group(1))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run dir holding the demo model as its averaged.pt."""
    run = tmp_path_factory.mktemp("explain-run") / "run"
    run.mkdir()
    shutil.copy(CHECKPOINT, run / "averaged.pt")
    return run


@pytest.fixture(scope="module")
def explained(run_dir, tmp_path_factory) -> tuple[Path, dict[str, Any], str]:
    """`nmt explain` run end to end on a run dir: the page, its data and what the terminal got."""
    page = tmp_path_factory.mktemp("explain") / "page.html"
    result = run_cli("explain", "--checkpoint", run_dir, SENTENCE, "--output", page)
    assert result.exit_code == 0, result.stderr + repr(result.exception)
    return page, page_data(page), result.stdout


@pytest.fixture(scope="module")
def model():
    return checkpoint.load(CHECKPOINT).build_model().eval()


def source(data: dict[str, Any]) -> torch.Tensor:
    return torch.tensor([data["source"]["ids"]])


def translate(ckpt: Path, text: str, *options: str) -> str:
    result = run_cli("translate", "--checkpoint", ckpt, *options, input=text + "\n")
    assert result.exit_code == 0, result.stderr
    return result.stdout.rstrip("\n")


# --------------------------------------------------------------------------- the numbers


def test_the_encoder_output_on_the_page_is_model_encode(explained, model):
    _, data, _ = explained
    memory = model.encode(source(data))[0][0]
    shown = torch.tensor(data["memory"]["rows"])
    assert data["memory"]["shape"] == list(memory.shape)
    torch.testing.assert_close(shown, memory[:, : shown.size(1)], rtol=1e-3, atol=1e-3)


def layer_inputs(model, src: torch.Tensor) -> list[torch.Tensor]:
    """What each encoder layer's self-attention really received (a hook on the model's own forward pass)."""
    seen: list[torch.Tensor] = []
    hooks = [layer.self_attn.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach()))
             for layer in model.encoder_layers]
    try:
        model.encode(src)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def test_the_worked_example_is_the_attention_layer_on_those_dimensions(explained, model):
    _, data, _ = explained
    H = model.n_heads
    for layer, panel, x in zip(model.encoder_layers, data["encoder"], layer_inputs(model, source(data)), strict=True):
        ex = panel["self_attn"]["example"]
        B, S, D = x.shape
        q, k, v = layer.self_attn.qkv_proj(x).view(B, S, 3, H, D // H).permute(2, 0, 3, 1, 4)  # [B, H, S, Dh] each
        heads = F.scaled_dot_product_attention(q, k, v)  # PyTorch's own equation 1, not the model's code
        h, i, n = ex["head"], ex["query"], len(ex["output"])
        torch.testing.assert_close(torch.tensor(ex["output"]), heads[0, h, i, :n], rtol=1e-3, atol=1e-3)
        weights = torch.tensor(ex["weights"])
        by_hand = (weights[:, None] * torch.tensor(ex["v"])).sum(0)  # the weighted sum the page shows
        torch.testing.assert_close(by_hand, torch.tensor(ex["output"]), rtol=1e-2, atol=2e-3)
        torch.testing.assert_close(torch.tensor(ex["scaled"]).softmax(-1), weights, rtol=1e-2, atol=1e-3)
        torch.testing.assert_close(torch.tensor(ex["dot"]), (k[0, h] @ q[0, h, i]), rtol=1e-3, atol=1e-3)


def test_every_head_is_the_models_attention_and_each_row_sums_to_one(explained, model):
    _, data, _ = explained
    src, tgt_in = source(data), torch.tensor([data["target"]["ids"]])
    encoder = model.encoder_attention(src)[:, 0]  # [L, H, S, S]
    cross = model.decoder_attention(src, tgt_in)[:, 0]  # [L, H, T, S]
    step = 1 / 255
    for i, layer in enumerate(data["encoder"]):
        shown = dequantized(layer["self_attn"]["weights"])
        torch.testing.assert_close(shown, encoder[i], rtol=0, atol=step)
        torch.testing.assert_close(shown.sum(-1), torch.ones(shown.shape[:-1]), rtol=0, atol=shown.size(-1) * step)
    for i, layer in enumerate(data["decoder"]):
        torch.testing.assert_close(dequantized(layer["cross_attn"]["weights"]), cross[i], rtol=0, atol=step)
        masked = dequantized(layer["self_attn"]["weights"])
        assert masked.triu(1).eq(0).all(), "a query attends to a later position"
        torch.testing.assert_close(masked.sum(-1), torch.ones(masked.shape[:-1]), rtol=0, atol=masked.size(-1) * step)


def test_the_softmax_steps_score_the_translation_as_the_search_did(explained, model):
    _, data, _ = explained
    out = data["output"]
    assert len(out["steps"]) == len(data["target"]["ids"])
    assert abs(out["logprob"] - data["search_logprob"]) < 1e-2
    logits = model.decode(torch.tensor([data["target"]["ids"]]), *model.encode(source(data)))[0]
    for t, step in enumerate(out["steps"]):
        probs = logits[t].softmax(-1)
        assert step["chosen_id"] == (data["target"]["ids"][1:] + [3])[t]
        assert abs(step["prob"] - probs[step["chosen_id"]].item()) < 1e-3
        assert [p for _, _, p in step["top"]] == sorted((p for _, _, p in step["top"]), reverse=True)


# --------------------------------------------------------------------------- the beam


def beams_and_finished(beam: dict[str, Any], size: int) -> list[list[str]]:
    """Replay the beam panel as the page does: a step's beams are the previous step's kept candidates, in order.
    Returns the finished hypotheses' pieces."""
    beams, finished = [[]], []
    for step in beam["steps"]:
        assert len(step["candidates"]) == 2 * size
        kept = [beams[parent] + [piece] for parent, piece, _, status in step["candidates"] if status == "kept"]
        finished += [beams[parent] for parent, _, _, status in step["candidates"] if status == "finished"]
        assert len(kept) == (0 if step["done"] else size)
        beams = kept
    return finished


def test_the_beams_final_choice_is_what_nmt_translate_outputs(explained):
    _, data, stdout = explained
    beam = data["beam"]
    finished = beams_and_finished(beam, data["decode"]["beam"])
    assert [f["pieces"] for f in beam["finished"]] == finished
    chosen = beam["finished"][beam["chosen"]]
    assert chosen["score"] == max(f["score"] for f in beam["finished"])
    assert chosen["pieces"] == data["target"]["pieces"][1:]
    expected = translate(CHECKPOINT, SENTENCE)
    assert data["translation"] == expected and expected.strip()
    assert f"translation  {expected}" in stdout


@pytest.mark.parametrize("options", [("--beam", "2", "--length-penalty", "1.5"), ("--beam", "1")])
def test_overridden_search_settings_match_translate_too(tmp_path, options):
    page = tmp_path / "p.html"
    result = run_cli("explain", "--checkpoint", CHECKPOINT, "forty-one red cars", "-o", page, *options, "--top-k", "3")
    assert result.exit_code == 0, result.stderr
    data = page_data(page)
    beam = int(options[1])
    assert data["decode"]["beam"] == beam and data["decode"]["length_penalty"] == float(dict(
        zip(options[::2], options[1::2])).get("--length-penalty", 0.6))
    assert all(len(s["top"]) == 3 for s in data["output"]["steps"])
    assert all(len(s["candidates"]) == 2 * beam for s in data["beam"]["steps"])
    assert data["translation"] == translate(CHECKPOINT, "forty-one red cars", *options)  # beam 1: greedy search


def test_the_trace_changes_nothing_and_says_what_was_kept():
    translator = load(CHECKPOINT)
    model, ids = translator.model, translator.special
    lines = ["three hundred forty-two euros", "two red cars", "on the fifth of may"]
    batch = collate(translator.tokenizer.encode_src(lines), [[]] * 3, pad=ids.pad, bos=ids.bos, eos=ids.eos)
    settings = SearchSettings(beam=3, nbest=3)
    steps = []
    traced = search.run(model, batch.src, settings, ids, trace=steps.append)
    assert [[(h.tokens, h.score) for h in hyps] for hyps in traced] == \
        [[(h.tokens, h.score) for h in hyps] for hyps in search.run(model, batch.src, settings, ids)]
    for step in steps:
        for row, done in enumerate(step.done):
            status = step.status[row]
            assert len(status) == 6 and status.count("kept" if not done else "stopped") == 3
            assert status.count("finished") <= 3 and all(s in ("kept", "finished", "pruned", "stopped") for s in status)
            assert step.scores[row] == sorted(step.scores[row], reverse=True)


# --------------------------------------------------------------------------- the page


def test_the_page_loads_in_chromium_without_errors_and_fetches_nothing(explained, chromium):
    page, data, _ = explained
    text = page.read_text(encoding="utf-8")
    assert "default-src 'none'" in text and "connect-src 'none'" in text  # the page's own CSP forbids fetching
    assert not re.search(r'(?:src|href)\s*=\s*"(?!#)', text), "the page links a file"
    chromium.get(page.as_uri())
    assert wait_for(chromium, "return document.querySelector('.nx-final')"), "the page did not render"
    assert chromium.execute_script("return document.querySelector('.nx-final').textContent") == data["translation"]
    requests = chromium.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert requests == [], requests
    m = data["model"]
    heatmaps = chromium.execute_script("return document.querySelectorAll('canvas.nx-heatmap').length")
    assert heatmaps == m["n_heads"] * (m["encoder_layers"] + 2 * m["decoder_layers"]) + 2  # + the PE and the mask
    js = chromium.execute_script("return [...document.querySelectorAll('.nx-sum-js')].map(e => e.textContent)")
    shown = chromium.execute_script("return [...document.querySelectorAll('.nx-sum-model')].map(e => e.textContent)")
    assert len(js) == m["encoder_layers"] + m["decoder_layers"]
    for by_hand, model_says in zip(js, shown):  # the page's own sum agrees with the model's output
        a, b = (torch.tensor([float(x) for x in s.strip("[, …]").split(", ")]) for s in (by_hand, model_says))
        torch.testing.assert_close(a, b, rtol=1e-2, atol=2e-3)
    for ref in ("§3.2.1, eq. 1", "§3.2.2", "§3.3, eq. 2", "§3.4", "§3.5", "§3.1", "§3.2.3", "§6.1"):
        assert ref in chromium.execute_script("return document.body.textContent"), ref
    logs = chromium.get_log("browser")
    assert not logs, logs


# --------------------------------------------------------------------------- size, limits, errors, the command


def test_a_30_word_page_is_small(tmp_path):
    page = tmp_path / "thirty.html"
    result = run_cli("explain", "--checkpoint", CHECKPOINT, THIRTY_WORDS, "-o", page)
    assert result.exit_code == 0, result.stderr
    data = page_data(page)
    assert len(THIRTY_WORDS.split()) == 30 and data["model"]["src_len"] > 30
    assert page.stat().st_size < 2 * 2**20
    assert not data["notes"]


def test_a_500_word_sentence_is_truncated_with_a_note(tmp_path):
    page = tmp_path / "long.html"
    long = " ".join(["three hundred forty-two euros"] * 125)  # 500 words
    result = run_cli("explain", "--checkpoint", CHECKPOINT, long, "-o", page)
    assert result.exit_code == 0, result.stderr
    data = page_data(page)
    limit = load(CHECKPOINT).max_src()
    assert data["model"]["src_len"] == limit + 1  # + EOS
    assert data["notes"] and f"at most {limit}" in data["notes"][0] and "note" in result.stdout
    assert data["encoder"][0]["self_attn"]["weights"]["pooled"]
    assert page.stat().st_size < 4 * 2**20


@pytest.mark.parametrize("sentence", ["", "   \t"])
def test_an_empty_sentence_is_one_error_line(sentence, tmp_path):
    assert_one_line_error(run_cli("explain", "--checkpoint", CHECKPOINT, sentence, "-o", tmp_path / "x.html"),
                          "nothing to explain")
    assert not (tmp_path / "x.html").exists()


def test_a_checkpoint_without_a_tokenizer_is_one_error_line(tmp_path):
    state = dict(checkpoint.load(CHECKPOINT))
    del state["tokenizer"]
    bad = tmp_path / "no-tokenizer.pt"
    torch.save(state, bad)
    assert_one_line_error(run_cli("explain", "--checkpoint", bad, SENTENCE), "lacks 'tokenizer'")
    state["tokenizer"] = {"src_model": "not bytes"}
    torch.save(state, bad)
    assert_one_line_error(run_cli("explain", "--checkpoint", bad, SENTENCE), "tokenizer")


def test_other_mistakes_are_one_error_line(tmp_path):
    assert_one_line_error(run_cli("explain", "--checkpoint", tmp_path / "none.pt", SENTENCE), "not found")
    assert_one_line_error(run_cli("explain", "--checkpoint", tmp_path, SENTENCE), "no checkpoint in")
    assert_one_line_error(run_cli("explain", "--checkpoint", CHECKPOINT, SENTENCE, "--top-k", "0", "-o",
                                  tmp_path / "x.html"), "--top-k")


def test_the_command_writes_beside_the_run_and_says_so(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(CHECKPOINT, run / "last.pt")
    result = run_cli("explain", "--checkpoint", run, SENTENCE)
    assert result.exit_code == 0, result.stderr
    assert (run / "explain.html").is_file() and f"wrote        {run / 'explain.html'}" in result.stdout
    assert "Q, K, V [4 heads" in result.stdout and "logits [" in result.stdout
    help_text = run_cli("explain", "--help").stdout
    assert "§3.2" in help_text and "--top-k" in help_text and "length penalty" in help_text


def test_explain_sentence_serves_other_callers(run_dir):
    translator = load(run_dir)
    data = explain_sentence(translator, SENTENCE, top_k=2, query=99)  # a query past the end: the last position
    assert data["encoder"][0]["self_attn"]["example"]["query"] == data["model"]["src_len"] - 1
    assert json.loads(json.dumps(data, allow_nan=False)) == data
