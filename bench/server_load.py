"""`fitplan serve` under load: start a real server, run the clients, print the figures.

Two scenarios (issue 27):

  shut-out   T clients trickle their headers, one byte a second (each reconnects when the server
             cuts it off), and H clients each keep a heavy sweep running; meanwhile one normal
             client sends light requests one after another for D seconds. Printed: the share of
             its requests answered 200 and their latency (p50, p99, max). Target: >= 95 %
             answered, p99 <= 1 s.
  burst      N light requests from C concurrent clients. Printed: the statuses, the errors, and
             the latency (p50, p99, max). Target: no error, no 503, p99 <= 500 ms on 2 cores.

A client is an address: the server caps connections per client address, so each trickling,
heavy and burst client connects from its own loopback address (127.0.0.0/8 is all loopback on
Linux), and the normal client from 127.0.0.1. Every request opens its own connection, as a
browser's first request does. The server runs in its own process (`python -m fitplan.web`), so
the clients here never share its interpreter; the machine's load average is printed beside the
figures, since they are only as good as the machine was idle.

Run:  python bench/server_load.py [--scenario shut-out|burst|both] [--tricklers 100] [--heavy 6]
                                  [--duration 30] [--requests 2000] [--clients 16] [--src PATH]
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIGHT = [("POST", "/api/plan", {"preset": "llama3.1-8b", "gpus": 8}),
         ("POST", "/api/plan", {"preset": "gpt3-175b", "gpus": 16, "tp": 8, "pp": 2}),
         ("POST", "/api/infer", {"preset": "llama3.1-8b", "gpus": 8}),
         ("POST", "/api/export", {"preset": "llama3.1-8b", "gpus": 8, "format": "megatron", "tp": 2}),
         ("GET", "/api/presets", None)]
# A real sweep within the work limits worth 8-11 s of one core (tests/web/test_pool.py's HEAVY)
HEAVY = {"preset": "deepseek-v3", "gpus": 8, "over": "gpus", "values": [20480, 10240, 40960], "max_cp": 64,
         "micro_batch": 16}


def start_server(src: str):
    env = dict(os.environ, PYTHONPATH=src)
    p = subprocess.Popen([sys.executable, "-u", "-m", "fitplan.web", "--port", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, env=env)
    line = p.stdout.readline()        # printed once every worker is ready
    if not line.startswith("fitplan serve: open http://127.0.0.1:"):
        p.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    return p, int(line.split("127.0.0.1:")[1].split("/")[0])


def request(port: int, method: str, path: str, body, source: str, timeout: float = 30.0):
    """(status or the exception's name, seconds)."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Host": "127.0.0.1"} | ({"Content-Type": "application/json"} if data else {})
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        r.read()
        return r.status, time.perf_counter() - t0
    except (OSError, http.client.HTTPException) as err:
        return type(err).__name__, time.perf_counter() - t0
    finally:
        conn.close()


def quantile(values, q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, int(round(q * len(values))) - 1))] if values else float("nan")


def latency_line(seconds) -> str:
    return (f"p50 {quantile(seconds, 0.50) * 1e3:.0f} ms, p99 {quantile(seconds, 0.99) * 1e3:.0f} ms, "
            f"max {max(seconds) * 1e3:.0f} ms")


def trickler(port: int, source: str, stop: threading.Event, stats: Counter, lock) -> None:
    """Headers a byte a second, forever: reconnect whenever the server cuts the connection."""
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
        except OSError:
            with lock:
                stats["connect failed"] += 1
            stop.wait(1.0)
            continue
        with lock:
            stats["connections"] += 1
        try:
            for byte in b"GET /api/presets HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 10_000:
                if stop.wait(1.0):
                    break
                s.sendall(bytes([byte]))
        except OSError:
            with lock:
                stats["cut off by the server"] += 1
        finally:
            s.close()


def heavy_client(port: int, source: str, stop: threading.Event, statuses: Counter, lock) -> None:
    while not stop.is_set():
        status, _ = request(port, "POST", "/api/sweep", HEAVY, source, timeout=120)
        with lock:
            statuses[status] += 1
        if status != 200:
            stop.wait(0.5)


def shut_out(port: int, tricklers: int, heavy: int, duration_s: float) -> bool:
    stop, lock = threading.Event(), threading.Lock()
    trickles, heavies = Counter(), Counter()
    threads = [threading.Thread(target=trickler, args=(port, f"127.0.{1 + i // 250}.{2 + i % 250}", stop, trickles,
                                                        lock), daemon=True) for i in range(tricklers)]
    threads += [threading.Thread(target=heavy_client, args=(port, f"127.1.0.{2 + i}", stop, heavies, lock),
                                 daemon=True) for i in range(heavy)]
    for t in threads:
        t.start()
    time.sleep(3.0)                         # every trickler connected, every heavy sweep submitted
    results = []
    end = time.monotonic() + duration_s
    i = 0
    while time.monotonic() < end:
        method, path, body = LIGHT[i % len(LIGHT)]
        results.append(request(port, method, path, body, "127.0.0.1", timeout=10))
        i += 1
    stop.set()
    answered = [s for status, s in results if status == 200]
    share = len(answered) / len(results)
    p99 = quantile([s for _, s in results], 0.99)
    print(f"shut-out: {tricklers} trickling clients, {heavy} heavy sweeps, {duration_s:g} s")
    print(f"  normal client: {len(answered)} of {len(results)} light requests answered 200 ({share:.1%}); "
          f"{latency_line([s for _, s in results])}; outcomes {dict(Counter(st for st, _ in results))}")
    print(f"  tricklers: {dict(trickles)}")
    print(f"  heavy sweeps: {dict(heavies)} (503: stopped at the 10 s budget or the heavy lane full)")
    ok = share >= 0.95 and p99 <= 1.0
    print(f"  target >= 95 % answered, p99 <= 1 s: {'met' if ok else 'NOT met'}")
    for t in threads:
        t.join(15)
    return ok


def burst(port: int, total: int, clients: int) -> bool:
    results, lock = [], threading.Lock()

    def one(i: int) -> None:
        mine = []
        for k in range(total // clients + (i < total % clients)):
            method, path, body = LIGHT[(i + k) % len(LIGHT)]
            mine.append(request(port, method, path, body, f"127.2.0.{2 + i}"))
        with lock:
            results.extend(mine)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    statuses = Counter(st for st, _ in results)
    seconds = [s for _, s in results]
    p99 = quantile(seconds, 0.99)
    print(f"burst: {len(results)} light requests from {clients} clients in {wall:.1f} s "
          f"({len(results) / wall:.0f}/s)")
    print(f"  outcomes {dict(statuses)}; {latency_line(seconds)}")
    ok = statuses.get(200, 0) == len(results) and p99 <= 0.5
    print(f"  target no error, no 503, p99 <= 500 ms: {'met' if ok else 'NOT met'}")
    return ok


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", choices=("shut-out", "burst", "both"), default="both")
    p.add_argument("--tricklers", type=int, default=100)
    p.add_argument("--heavy", type=int, default=6)
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--src", default=str(ROOT / "src"), help="the fitplan sources to serve (default this "
                                                             "checkout's; e.g. an older one's to compare)")
    args = p.parse_args()
    print(f"{os.cpu_count()} CPUs; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} before starting")
    server, port = start_server(args.src)
    ok = True
    try:
        if args.scenario in ("burst", "both"):
            ok &= burst(port, args.requests, args.clients)
        if args.scenario in ("shut-out", "both"):
            ok &= shut_out(port, args.tricklers, args.heavy, args.duration)
    finally:
        server.terminate()
        server.wait(10)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} after")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
