"""The whole pipeline as a user runs it, end to end: `python -m nmt` prepare -> train -> translate -> score -> plot
on the demo corpus, each a child process, with one config file chaining the paths (the smoke test of the project;
each command's own tests are in its stage's folder)."""

from __future__ import annotations

import json

from tests.helpers.cli import nmt_process


def test_pipeline_end_to_end(tmp_path, demo_raw):
    """prepare -> train -> translate -> score through the CLI, with the config chaining the paths."""
    config = tmp_path / "tiny.yaml"
    config.write_text(
        "data: {dir: data, vocab_size: 400}\n"
        "model: {d_model: 32, n_heads: 2, d_ff: 64, encoder_layers: 1, decoder_layers: 1}\n"
        "train: {run_dir: runs/tiny, max_updates: 20, max_tokens: 1024, warmup: 5, lr: 0.003, log_every: 5,\n"
        "        valid_every: 10, save_every: 10, valid_bleu_sentences: 10, average_last: 2}\n"
        "decode: {beam: 2}\n"
    )
    prep = nmt_process("prepare", "--config", str(config), "--train", demo_raw["train"], "--valid", demo_raw["valid"],
                       "--test", demo_raw["test"], cwd=tmp_path)
    assert prep.returncode == 0, prep.stderr.decode()
    assert json.loads((tmp_path / "data/meta.json").read_text())["splits"]["train"]["pairs"] == 2000
    tr = nmt_process("train", "--config", str(config), "--no-progress", cwd=tmp_path)
    assert tr.returncode == 0, tr.stderr.decode()
    assert (tmp_path / "runs/tiny/averaged.pt").is_file()
    src = (tmp_path / "data/test.en").read_bytes()
    tl = nmt_process("translate", "--config", str(config), cwd=tmp_path, stdin=src)
    assert tl.returncode == 0, tl.stderr.decode()
    assert "averaged.pt" in tl.stderr.decode()  # the checkpoint choice is printed on stderr
    hyp = tl.stdout.decode()
    assert hyp.count("\n") == src.count(b"\n")
    (tmp_path / "hyp.de").write_text(hyp)
    sc = nmt_process("score", "--ref", str(tmp_path / "data/test.de"), "--hyp", str(tmp_path / "hyp.de"), "--json")
    assert sc.returncode == 0, sc.stderr.decode()
    result = json.loads(sc.stdout)
    assert {"bleu", "chrf", "ter"} <= set(result) and 0 <= result["bleu"]["score"] <= 100
    pl = nmt_process("plot", "runs/tiny", cwd=tmp_path)
    assert pl.returncode == 0 and (tmp_path / "runs/tiny/curves.png").stat().st_size > 1000
    # with no --config and no --checkpoint, translate finds the newest run under runs/
    again = nmt_process("translate", cwd=tmp_path, stdin=b"forty-two\n")
    assert again.returncode == 0 and again.stdout.count(b"\n") == 1
    assert "runs/tiny/averaged.pt" in again.stderr.decode()
