"""The analyses' worker pool: a fixed number of worker processes, a bounded queue, a wall-clock
budget per analysis. A full pool is a 503 at once; an analysis past its budget is stopped (its
process killed and replaced) and answered 503; neither ever queues without bound."""
import os
import threading
import time

from fitplan.web import server as web

from . import targets
from .conftest import Client, serving

LIGHT = {"preset": "llama3.1-8b", "gpus": 8}
# A sweep within the API's limits (64 values, each a GPU count with ~200 divisors) that takes
# about a minute of CPU: the request issue 16 reports.
HEAVY = {"preset": "gpt3-175b", "gpus": 8, "over": "gpus", "max_cp": 64, "micro_batch": 64,
         "values": [720720, 831600, 942480, 982800, 997920, 665280, 786240, 960960, 1028160, 554400, 655200,
                    776160, 856800, 887040, 900900, 917280, 957600, 970200, 1029600, 1048320, 907200, 498960,
                    589680, 771120, 861840, 926640, 1043280, 332640, 360360, 393120, 415800, 443520, 471240,
                    480480, 491400, 514080, 524160, 526680, 540540, 556920, 574560, 582120, 600600, 604800,
                    617760, 622440, 628320, 637560, 642600, 685440, 687960, 693000, 695520, 702240, 706860,
                    718200, 739200, 742560, 748440, 753480, 756000, 766080, 772200, 785400]}


LIGHT_BOUND_S = 2.0     # a light request's latency bound on a shared 2-core machine (see test_load)


def in_background(fn, *args):
    """Run fn(*args) in a thread; the returned list receives its result."""
    out = []
    t = threading.Thread(target=lambda: out.append(fn(*args)), daemon=True)
    t.start()
    return t, out


def wait_until(predicate, timeout=20.0):
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.02)


def test_a_full_pool_is_a_503_at_once_and_an_overrun_a_503():
    """One worker, no queue, an analysis that never ends (it sleeps): a second request is refused
    at once with the issue's line; the first is stopped at its budget with one line."""
    pool = web.AnalysisPool(workers=1, queue=0, budget_s=1.0, target=targets.sleep)
    with serving(pool=pool) as srv:
        client = Client.of(srv)
        t0 = time.monotonic()
        thread, first = in_background(client.post, "/api/plan", LIGHT)
        wait_until(lambda: pool.running == 1)
        t1 = time.monotonic()
        busy = client.post("/api/plan", LIGHT)
        assert time.monotonic() - t1 < 1.0                    # at once, not queued
        assert busy.status == 503 and busy.json == {"error": "server busy: 1 analyses running; try again shortly"}
        assert busy.headers["retry-after"] == "1"
        thread.join(15)
        r = first[0]
        assert 1.0 <= time.monotonic() - t0 < 6.0
        assert r.status == 503 and "\n" not in r.json["error"]
        assert r.json["error"].startswith("request: the analysis ran past its 1 s budget and was stopped")
        assert pool.running == 0 and len(pool._all) == 1      # the killed worker replaced, not reused


def test_a_queued_request_waits_a_bounded_time():
    """With one request allowed to queue: it waits at most queue_wait_s for a worker, then 503;
    one more while it waits is refused at once."""
    pool = web.AnalysisPool(workers=1, queue=1, budget_s=1.5, queue_wait_s=0.5, target=targets.sleep)
    with serving(pool=pool) as srv:
        client = Client.of(srv)
        running, _ = in_background(client.post, "/api/plan", LIGHT)
        wait_until(lambda: pool.running == 1)
        t0 = time.monotonic()
        queued, second = in_background(client.post, "/api/plan", LIGHT)
        wait_until(lambda: pool._admitted == 2)
        third = client.post("/api/plan", LIGHT)
        assert third.status == 503 and time.monotonic() - t0 < 0.5
        queued.join(10)
        assert second[0].status == 503 and "server busy: 1 analyses running" in second[0].json["error"]
        assert 0.5 <= time.monotonic() - t0 < 1.5
        running.join(10)


def test_the_budget_kills_a_real_heavy_sweep_and_the_worker_is_replaced():
    """The real analysis, no stand-in: a sweep worth a minute of CPU is stopped at a 1 s budget,
    its process is gone, and the next request gets a fresh worker."""
    pool = web.AnalysisPool(workers=1, queue=0, budget_s=1.0)
    with serving(pool=pool) as srv:
        client = Client.of(srv)
        assert client.post("/api/plan", LIGHT).status == 200     # the worker is up
        pid = next(iter(pool._all)).process.pid
        t0 = time.monotonic()
        r = client.post("/api/sweep", HEAVY)
        assert r.status == 503 and "past its 1 s budget" in r.json["error"]
        assert time.monotonic() - t0 < 6.0
        try:
            os.kill(pid, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        assert not alive, "the worker past its budget still runs"
        assert [w.process.pid != pid for w in pool._idle] == [True]   # a fresh worker already waits
        t1 = time.monotonic()
        again = client.post("/api/plan", LIGHT)
        assert again.status == 200 and time.monotonic() - t1 < LIGHT_BOUND_S


def test_a_closed_pool_answers_busy():
    pool = web.AnalysisPool(workers=1)
    pool.close()
    r = web.handle("POST", "/api/plan", {"Content-Type": "application/json"}, b'{"preset": "gpt3-175b", "gpus": 16}',
                   pool=pool)
    assert r.status == 503
