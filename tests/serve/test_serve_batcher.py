"""The batcher of `nmt serve` on its own, with a recording run function: batches by search setting and token
budget, waiting for company, dropping work whose client left, fair order between clients, the queue bound in
seconds of measured work, and closing (shutdown) within a time."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest

from nmt.serve.batcher import Batcher, Closed, Full


def recording_batcher(**kwargs) -> tuple[Batcher, list[tuple[str, list[str]]]]:
    batches: list[tuple[str, list[str]]] = []

    def run(options: str, texts: list[str]) -> list[str]:
        if options == "broken":
            raise RuntimeError("model failed")
        batches.append((options, list(texts)))
        return [f"{options}:{t}" for t in texts][:None if options != "short" else -1]

    def cost(text: str) -> int:
        if text == "uncountable":
            raise ValueError(text)
        return len(text)

    return Batcher(run, cost=cost, **{"max_cost": 100, "max_delay": 0.0, **kwargs}), batches


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


def test_batcher_keeps_to_the_padded_token_budget_and_an_oversized_sentence_goes_alone():
    """The budget counts as decode.max_tokens does, rows x the longest sentence: a batch taken is one batch of
    the translator, and one long sentence does not take short ones along (as an unpadded sum would: a+aaa+b)."""
    b, batches = recording_batcher(max_cost=5)
    futures = b.submit(["a", "aaa", "b", "toolongforone", "cc"], "x")
    drain(b)
    assert batches == [("x", ["a", "b"]), ("x", ["aaa"]), ("x", ["toolongforone"]), ("x", ["cc"])]
    assert all(len(texts) * max(map(len, texts)) <= 5 for _, texts in batches if len(texts) > 1)
    assert [f.result() for f in futures] == ["x:a", "x:aaa", "x:b", "x:toolongforone", "x:cc"]  # order kept


def test_batcher_without_batching_runs_one_request_at_a_time():
    b, batches = recording_batcher(batching=False)
    b.submit(["a", "b"], "x"), b.submit(["c"], "x"), b.submit(["d", "e"], "x")
    drain(b)
    assert batches == [("x", ["a", "b"]), ("x", ["c"]), ("x", ["d", "e"])]


def test_batcher_drops_work_whose_client_left_and_a_failed_batch_fails_only_its_requests():
    b, batches = recording_batcher()
    gone = b.submit(["a", "b"], "x")
    broken = b.submit(["c"], "broken")
    short = b.submit(["e", "f"], "short")  # a run that loses a result must not leave a client waiting forever
    fine = b.submit(["d", "uncountable"], "y")
    assert gone[0].cancel()
    drain(b)
    assert batches == [("x", ["b"]), ("short", ["e", "f"]), ("y", ["d", "uncountable"])]
    with pytest.raises(RuntimeError, match="model failed"):
        broken[0].result()
    with pytest.raises(RuntimeError, match="1 results for 2 sentences"):
        short[1].result()
    assert [f.result() for f in fine] == ["y:d", "y:uncountable"] and gone[1].result() == "x:b"


@contextlib.contextmanager
def model_thread(batcher: Batcher) -> Iterator[None]:
    worker = threading.Thread(target=batcher.serve_forever)
    worker.start()
    try:
        yield
    finally:
        batcher.close()
        worker.join(30)
    assert not worker.is_alive()


def test_batcher_waits_for_the_clients_it_answered_but_never_for_a_lone_client():
    b, batches = recording_batcher(max_delay=60.0)
    with model_thread(b):
        started = time.monotonic()
        for text in ("a", "b"):  # one client, one request at a time: nobody else is due, nothing to wait for
            assert b.submit([text], "x")[0].result(timeout=30) == f"x:{text}"
        assert b.submit(["c", "d"], "x")[1].result(timeout=30) == "x:d"  # 2 sentences answered ...
        first = b.submit(["e"], "x")  # ... so the next batch waits for a second one
        time.sleep(0.1)
        second = b.submit(["f"], "x")
        assert first[0].result(timeout=30) == "x:e" and second[0].result(timeout=30) == "x:f"
        assert time.monotonic() - started < 30  # never the whole max_delay
        assert batches == [("x", ["a"]), ("x", ["b"]), ("x", ["c", "d"]), ("x", ["e", "f"])]
        b.max_cost = 2  # a full budget ends the wait too
        assert b.submit(["gg"], "x")[0].result(timeout=30) == "x:gg"


def test_batcher_does_not_hold_back_a_client_quick_with_its_next_request():
    release = threading.Event()

    def run(options: str, texts: list[str]) -> list[str]:
        assert release.wait(30)
        return texts

    b = Batcher(run, cost=len, max_cost=100, max_delay=60.0)
    follow_up: list = []
    with model_thread(b):
        first = b.submit(["a"], "x")[0]
        # the answer's callback sends the next request at once, before the model thread is back for more work:
        # one sentence answered, one come back, nothing else due
        first.add_done_callback(lambda f: follow_up.extend(b.submit(["b"], "x")))
        release.set()
        assert first.result(timeout=30) == "a"
        assert follow_up and follow_up[0].result(timeout=30) == "b"


def test_batcher_waits_for_company_at_most_max_delay():
    b, batches = recording_batcher(max_delay=0.3)
    with model_thread(b):
        b.submit(["a", "b"], "x")[1].result(timeout=30)
        started = time.monotonic()
        assert b.submit(["c"], "x")[0].result(timeout=30) == "x:c"  # the second sentence due never comes
        assert 0.29 <= time.monotonic() - started < 30
    assert batches == [("x", ["a", "b"]), ("x", ["c"])]


# --------------------------------------------------------------------------- under load


def test_a_one_sentence_client_goes_before_a_flood_queued_earlier_and_the_flood_is_served_in_turn():
    b, batches = recording_batcher(max_cost=400)
    first = b.submit([f"first {i:03d}" for i in range(200)], "x", client="flooder")  # 2,000 characters each:
    second = b.submit([f"again {i:03d}" for i in range(200)], "x", client="flooder")  # large requests
    other = b.submit([f"other {i:03d}" for i in range(200)], "x", client="another address")
    one = b.submit(["hello"], "x", client="flooder")  # small: a client of its own, whatever its address
    drain(b)
    assert "hello" in batches[0][1] and one[0].result() == "x:hello"
    order = [text for _, texts in batches for text in texts]
    assert order.index("first 199") < order.index("again 000")  # one address: its requests in turn, whole
    assert order.index("other 000") < order.index("first 100")  # another address: served alongside
    assert all(f.done() for f in first + second + other)


def test_the_queue_is_bounded_in_seconds_of_measured_work():
    b, _ = recording_batcher(max_queue_seconds=2.0)
    b.rate = 1000.0  # characters per second: the queue holds 2,000 characters
    b.submit(["a" * 499] * 3, "x")  # 1,500
    with pytest.raises(Full) as full:
        b.submit(["a" * 1100], "x")  # a large request: past the bound
    assert "serve.max_queue_seconds=2" in str(full.value) and full.value.retry_after == pytest.approx(1.5)
    assert b.refusal(1101) is not None and b.refusal(499) is None  # asked before a request is read, too
    taken = []
    with pytest.raises(Full):
        for _ in range(100):  # small requests (at most a paragraph) have a bound of their own
            taken.append(b.submit(["a" * 99], "x"))
    assert len(taken) == 2000 // 100
    drain(b)
    empty, _ = recording_batcher(max_queue_seconds=2.0)
    empty.rate = 1000.0
    alone = empty.submit(["a" * 9999], "x")  # a request larger than the bound is taken on an empty queue
    drain(empty)
    assert alone[0].result() == "x:" + "a" * 9999


def test_closing_keeps_the_requests_that_fit_and_fails_the_others_at_once():
    clock = [0.0]
    b, batches = recording_batcher(clock=lambda: clock[0])
    b.rate = 10.0
    kept = b.submit(["a" * 9, "b" * 9], "x", client=1)  # 20 characters: 2 s
    dropped = b.submit(["c" * 29], "x", client=2)  # 30: would end at 5 s
    b.close(within=3.0)
    assert isinstance(dropped[0].exception(timeout=0), Closed)
    with pytest.raises(Closed):
        b.submit(["late"], "x")
    b.serve_forever()
    assert [f.result() for f in kept] == ["x:" + "a" * 9, "x:" + "b" * 9]
    b2, _ = recording_batcher(clock=lambda: clock[0])
    stuck = b2.submit(["d"], "x")
    b2.close(within=1.0)
    clock[0] = 5.0  # the deadline passed before the model thread came back: what is queued fails
    b2.serve_forever()
    assert isinstance(stuck[0].exception(timeout=0), Closed)
