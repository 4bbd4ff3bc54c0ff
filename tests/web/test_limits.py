"""Connection limits: a whole-request deadline, a cap on open connections, a GET's body read and
dropped, and http.server's own refusals (TRACE, CONNECT, unknown methods, malformed lines) as the
same JSON lines with nosniff as every other answer."""
import http.client
import json
import select
import socket
import time

import pytest

from fitplan.web import server as web

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


def test_a_trickling_client_is_cut_off_at_the_request_deadline():
    """A byte every 0.1 s never trips a per-read timeout; the whole-request deadline (1 s here)
    ends it with a 408 and a closed connection."""
    with serving(request_deadline_s=1.0) as srv, socket.create_connection(srv.server_address[:2]) as s:
        t0 = time.monotonic()
        s.sendall(b"GET /api/presets HTTP/1.1\r\n" + HOST + b"X-Slow: ")
        data = b""
        while time.monotonic() - t0 < 5.0:
            if select.select([s], [], [], 0.1)[0]:
                data = read_reply(s)
                break
            try:
                s.sendall(b"a")
            except OSError:
                break
        elapsed = time.monotonic() - t0
        assert 0.9 <= elapsed < 3.0, elapsed
        status, headers, body = status_and_json(data)
        assert status == 408 and headers["connection"] == "close"
        assert body == {"error": "request: not received within 1 s; the connection is closed"}


def test_an_idle_connection_is_closed_quietly_at_the_deadline():
    with serving(request_deadline_s=0.5) as srv, socket.create_connection(srv.server_address[:2]) as s:
        t0 = time.monotonic()
        assert read_reply(s) == b""            # closed, nothing said: no request had begun
        assert time.monotonic() - t0 < 3.0


def test_the_connection_cap():
    """Three connections held open (sending nothing); a fourth is answered 503 at once and
    closed; once they close, requests are served again."""
    with serving(max_connections=3, request_deadline_s=10.0) as srv:
        held = [socket.create_connection(srv.server_address[:2]) for _ in range(3)]
        try:
            deadline = time.monotonic() + 5
            while srv.connections < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            with socket.create_connection(srv.server_address[:2]) as s:
                t0 = time.monotonic()
                s.sendall(b"GET /api/presets HTTP/1.1\r\n" + HOST + b"\r\n")
                status, headers, body = status_and_json(read_reply(s))
                assert time.monotonic() - t0 < 2.0
            assert status == 503 and headers["x-content-type-options"] == "nosniff"
            assert body == {"error": "server busy: 3 connections open; try again shortly"}
        finally:
            for s in held:
                s.close()
        deadline = time.monotonic() + 5
        while srv.connections and time.monotonic() < deadline:
            time.sleep(0.01)
        assert Client.of(srv).request("GET", "/api/presets").status == 200


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
        r = web.handle(method, "/", {}, None)
        assert r.status == 405 and json.loads(r.body) == {"error": f"{method}: not allowed; use GET or POST"}


def test_two_content_lengths_are_refused(server):
    with socket.create_connection(server.server_address[:2], timeout=10) as s:
        s.sendall(b"POST /api/plan HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\n"
                  b"Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}")
        status, headers, body = status_and_json(read_reply(s))
    assert status == 400 and headers["connection"] == "close" and "one Content-Length" in body["error"]
