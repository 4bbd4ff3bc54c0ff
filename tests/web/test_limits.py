"""Connection limits: a header deadline and a whole-request deadline, a cap on open connections
and one per client address, a GET's body read and dropped, and http.server's own refusals
(TRACE, CONNECT, unknown methods, malformed lines) as the same JSON lines with nosniff as every
other answer. No test bounds a latency: each asserts which limit acted, not how fast."""
import http.client
import json
import select
import socket
import time

import pytest

from fitplan.web import app

from .conftest import Client, serving

HOST = b"Host: 127.0.0.1\r\n"


def read_reply(sock, timeout=5.0) -> bytes:
    """Everything the server sends until it closes the connection (or the timeout)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def status_and_json(raw: bytes):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body)


def trickle(srv, first: bytes, byte: bytes = b"a", every_s: float = 0.1, give_up_s: float = 30.0):
    """Send `first`, then one byte every every_s until the server answers; (reply, seconds)."""
    with socket.create_connection(srv.server_address[:2]) as s:
        t0 = time.monotonic()
        s.sendall(first)
        while time.monotonic() - t0 < give_up_s:
            if select.select([s], [], [], every_s)[0]:
                return read_reply(s), time.monotonic() - t0
            try:
                s.sendall(byte)
            except OSError:
                break
        return read_reply(s, timeout=0.1), time.monotonic() - t0


def test_a_client_trickling_its_headers_is_cut_off_at_the_header_deadline():
    """A byte every 0.1 s never trips a per-read timeout; the header deadline (1 s here, the
    whole request's 60 s) ends it with a 408 and a closed connection. Only the order of events
    is asserted: not before the deadline, and long before the whole-request deadline."""
    with serving(header_deadline_s=1.0, request_deadline_s=60.0) as srv:
        data, elapsed = trickle(srv, b"GET /api/presets HTTP/1.1\r\n" + HOST + b"X-Slow: ")
    assert 1.0 <= elapsed < 30.0, elapsed
    status, headers, body = status_and_json(data)
    assert status == 408 and headers["connection"] == "close"
    assert body == {"error": "request: the request line and headers were not received within 1 s; "
                             "the connection is closed"}


def test_a_trickling_body_is_cut_off_at_the_whole_request_deadline():
    """Headers in at once, then the body a byte at a time: the header deadline (0.5 s) has passed
    by the time the body ends, so only the whole-request deadline (2 s) can end it."""
    with serving(header_deadline_s=0.5, request_deadline_s=2.0) as srv:
        data, elapsed = trickle(srv, b"POST /api/plan HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\n"
                                     b"Content-Length: 100000\r\n\r\n{", byte=b" ")
    assert 2.0 <= elapsed < 30.0, elapsed
    status, headers, body = status_and_json(data)
    assert status == 408 and headers["connection"] == "close"
    assert body == {"error": "request: the request was not received within 2 s; the connection is closed"}


def test_an_idle_connection_is_closed_quietly_at_the_header_deadline():
    with serving(header_deadline_s=0.5, request_deadline_s=60.0) as srv, \
            socket.create_connection(srv.server_address[:2]) as s:
        t0 = time.monotonic()
        assert read_reply(s, timeout=40.0) == b""            # closed, nothing said: no request had begun
        assert 0.5 <= time.monotonic() - t0 < 30.0           # by the header deadline, not the request's


def test_the_connection_cap():
    """Three connections held open (sending nothing); a fourth is answered 503 by the accepting
    thread (long before the 30 s header deadline could answer it) and closed; once they close,
    requests are served again."""
    with serving(max_connections=3, header_deadline_s=30.0, request_deadline_s=30.0) as srv:
        held = [socket.create_connection(srv.server_address[:2]) for _ in range(3)]
        try:
            deadline = time.monotonic() + 5
            while srv.connections < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            with socket.create_connection(srv.server_address[:2]) as s:
                t0 = time.monotonic()
                s.sendall(b"GET /api/presets HTTP/1.1\r\n" + HOST + b"\r\n")
                status, headers, body = status_and_json(read_reply(s, timeout=40.0))
                assert time.monotonic() - t0 < 20.0
            assert status == 503 and headers["x-content-type-options"] == "nosniff"
            assert body == {"error": "server busy: 3 connections open; try again shortly"}
        finally:
            for s in held:
                s.close()
        deadline = time.monotonic() + 5
        while srv.connections and time.monotonic() < deadline:
            time.sleep(0.01)
        assert Client.of(srv).request("GET", "/api/presets").status == 200


def test_the_per_client_cap_refuses_the_ninth_connection_from_one_address():
    """Eight connections held open from 127.0.0.1 (sending nothing); the ninth from the same
    address is answered 503 and closed, while another client (127.0.0.2, loopback too) is
    served, and so is 127.0.0.1 again once one of its eight closes."""
    with serving(max_client_connections=8, header_deadline_s=30.0) as srv:
        address = srv.server_address[:2]
        held = [socket.create_connection(address) for _ in range(8)]
        try:
            deadline = time.monotonic() + 10
            while srv.by_client.get("127.0.0.1", 0) < 8 and time.monotonic() < deadline:
                time.sleep(0.01)
            with socket.create_connection(address) as s:
                s.sendall(b"GET /api/presets HTTP/1.1\r\n" + HOST + b"\r\n")
                status, headers, body = status_and_json(read_reply(s))
            assert status == 503 and headers["retry-after"] == "1"
            assert body == {"error": "server busy: 8 connections open from this address; try again shortly"}
            other = http.client.HTTPConnection(*address, timeout=30, source_address=("127.0.0.2", 0))
            try:
                other.request("GET", "/api/presets", headers={"Host": "127.0.0.1"})
                assert other.getresponse().status == 200
            finally:
                other.close()
            held.pop().close()
            deadline = time.monotonic() + 10
            while srv.by_client.get("127.0.0.1", 0) > 7 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert Client.of(srv).request("GET", "/api/presets").status == 200
        finally:
            for s in held:
                s.close()


def test_a_get_body_is_read_and_dropped_not_parsed_as_a_request(server):
    """On one keep-alive connection: a GET whose body is itself a request, then a second GET.
    The server answers exactly the two GETs."""
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=10)
    try:
        smuggled = b"GET /api/nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        conn.request("GET", "/api/presets", body=smuggled)
        first = conn.getresponse()
        assert first.status == 200 and "models" in json.loads(first.read())
        conn.request("GET", "/api/fields")
        second = conn.getresponse()
        assert second.status == 200 and "plan" in json.loads(second.read())   # not the 404 of /api/nothing
    finally:
        conn.close()


def test_an_oversized_get_body_is_a_413(server):
    with socket.create_connection(server.server_address[:2], timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\n" + HOST + b"Content-Length: 999999999\r\n\r\n")
        status, _, body = status_and_json(read_reply(s))
    assert status == 413 and "limit is 262,144 bytes" in body["error"]


@pytest.mark.parametrize("request_line,status", [
    (b"TRACE / HTTP/1.1", 405), (b"CONNECT 127.0.0.1:443 HTTP/1.1", 405), (b"OPTIONS * HTTP/1.1", 405),
    (b"BREW /pot HTTP/1.1", 501), (b"GET / HTTP/1.1 extra", 400), (b"GET / HTTP/9.9", 505),
])
def test_every_refusal_is_json_with_nosniff(server, request_line, status):
    with socket.create_connection(server.server_address[:2], timeout=10) as s:
        s.sendall(request_line + b"\r\n" + HOST + b"Connection: close\r\n\r\n")
        got, headers, body = status_and_json(read_reply(s))
    assert got == status
    assert headers["content-type"] == "application/json" and headers["x-content-type-options"] == "nosniff"
    assert list(body) == ["error"] and "\n" not in body["error"]


def test_trace_and_connect_are_the_same_405_as_put():
    for method in ("TRACE", "CONNECT", "PUT"):
        r = app.handle(method, "/", {}, None)
        assert r.status == 405 and json.loads(r.body) == {"error": f"{method}: not allowed; use GET or POST"}


def test_two_content_lengths_are_refused(server):
    with socket.create_connection(server.server_address[:2], timeout=10) as s:
        s.sendall(b"POST /api/plan HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\n"
                  b"Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}")
        status, headers, body = status_and_json(read_reply(s))
    assert status == 400 and headers["connection"] == "close" and "one Content-Length" in body["error"]


def test_the_readme_states_the_limits_the_server_has():
    from fitplan.web import limits as L

    from .conftest import ROOT
    readme = " ".join((ROOT / "README.md").read_text().split())
    for row in (f"| {L.LIGHT_WORKERS} worker processes |", f"| {L.HEAVY_WORKERS} worker processes, SCHED_BATCH |",
                f"| fast lane {L.LIGHT_QUEUE}, heavy lane {L.HEAVY_QUEUE}, each for at most {L.QUEUE_WAIT_S:g} s |",
                f"| {L.ANALYSIS_BUDGET_S:g} s wall clock |", f"| connections open at once | {L.MAX_CONNECTIONS} |",
                f"| connections open from one client address | {L.MAX_CLIENT_CONNECTIONS} |",
                f"| request line and headers | {L.HEADER_DEADLINE_S:g} s |",
                f"| whole request (line, headers, body) | {L.REQUEST_DEADLINE_S:g} s |",
                f"| request body | {L.MAX_BODY_BYTES // 1024} KiB |"):
        assert row in readme, row
