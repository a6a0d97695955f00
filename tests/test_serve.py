"""`nmt serve`: the batcher on its own."""

from __future__ import annotations

import threading
import time

import pytest

from nmt.batcher import Batcher, Closed
from nmt.config import load_config
from nmt.errors import ConfigError

# --------------------------------------------------------------------------- the batcher


def recording_batcher(**kwargs) -> tuple[Batcher, list[tuple[str, list[str]]]]:
    batches: list[tuple[str, list[str]]] = []

    def run(options: str, texts: list[str]) -> list[str]:
        if options == "broken":
            raise RuntimeError("model failed")
        batches.append((options, list(texts)))
        return [f"{options}:{t}" for t in texts]

    return Batcher(run, cost=len, **{"max_cost": 100, "max_delay": 0.0, **kwargs}), batches


def drain(batcher: Batcher) -> None:
    """Run what is queued on this thread: close first, so serve_forever returns once the queue is empty."""
    batcher.close()
    batcher.serve_forever()


def test_batcher_takes_what_waits_with_one_search_setting_as_one_batch_and_answers_each_sentence():
    b, batches = recording_batcher()
    first, other, second = b.submit(["aa", "b"], "beam4"), b.submit(["cc"], "beam1"), b.submit(["d"], "beam4")
    drain(b)
    assert batches == [("beam4", ["aa", "b", "d"]), ("beam1", ["cc"])]
    assert [f.result() for f in first + other + second] == ["beam4:aa", "beam4:b", "beam1:cc", "beam4:d"]
    assert (b.batches, b.sentences, b.queued) == (2, 4, 0)
    with pytest.raises(Closed):
        b.submit(["late"], "beam4")


def test_batcher_keeps_to_the_token_budget_and_an_oversized_sentence_goes_alone():
    b, batches = recording_batcher(max_cost=5)
    futures = b.submit(["aaa", "bbb", "cc", "toolongforone"], "x")
    drain(b)
    assert batches == [("x", ["aaa", "cc"]), ("x", ["bbb"]), ("x", ["toolongforone"])]
    assert [f.result() for f in futures] == ["x:aaa", "x:bbb", "x:cc", "x:toolongforone"]  # order kept


def test_batcher_without_batching_runs_one_request_at_a_time():
    b, batches = recording_batcher(batching=False)
    b.submit(["a", "b"], "x"), b.submit(["c"], "x"), b.submit(["d", "e"], "x")
    drain(b)
    assert batches == [("x", ["a", "b"]), ("x", ["c"]), ("x", ["d", "e"])]


def test_batcher_drops_work_whose_client_left_and_a_failed_batch_fails_only_its_requests():
    b, batches = recording_batcher()
    gone = b.submit(["a", "b"], "x")
    broken = b.submit(["c"], "broken")
    fine = b.submit(["d"], "y")
    assert gone[0].cancel()
    drain(b)
    assert batches == [("x", ["b"]), ("y", ["d"])]
    with pytest.raises(RuntimeError, match="model failed"):
        broken[0].result()
    assert fine[0].result() == "y:d" and gone[1].result() == "x:b"


def test_batcher_waits_for_company_at_most_max_delay_and_not_once_the_budget_is_full():
    b, batches = recording_batcher(max_delay=0.5)
    worker = threading.Thread(target=b.serve_forever)
    worker.start()
    try:
        first = b.submit(["a"], "x")
        time.sleep(0.1)  # the model is idle: "a" waits for company, and "b" comes within max_delay
        second = b.submit(["b"], "x")
        assert first[0].result(timeout=10) == "x:a" and second[0].result(timeout=10) == "x:b"
        assert batches == [("x", ["a", "b"])]
        b.max_delay, b.max_cost = 60.0, 2
        started = time.monotonic()
        assert b.submit(["cc"], "x")[0].result(timeout=10) == "x:cc"  # fills the budget: no waiting
        assert time.monotonic() - started < 10
    finally:
        b.close()
        worker.join(10)
    assert not worker.is_alive()


def test_serve_config_keys_are_checked():
    cfg = load_config(None, ["serve.max_chars=10", "serve.port=0", "serve.batching=false"]).serve
    assert (cfg.max_chars, cfg.port, cfg.batching) == (10, 0, False)
    with pytest.raises(ConfigError, match="serve.max_chars"):
        load_config(None, ["serve.max_chars=0"])
    with pytest.raises(ConfigError, match="serve.port"):
        load_config(None, ["serve.port=70000"])
    with pytest.raises(ConfigError, match=r"unknown key 'serve.max_char'.*did you mean 'max_chars'"):
        load_config(None, ["serve.max_char=10"])
