"""One HTTP connection: http.server's request parsing under fitplan's deadlines and checks.

Each request on a connection gets two deadlines, both counted from the moment the server
starts to wait for it: the request line and headers must be in within header_deadline_s (a few
seconds: a client that trickles its headers a byte at a time holds the connection no longer),
and the whole request, body included, within request_deadline_s. Past either, a request that
had begun gets a 408 with one line and the connection is closed; an idle keep-alive connection
is closed without a word. A client that closes its connection while its analysis waits or runs
(a browser aborting a stale request) frees its place: the request leaves the queue, or its
worker is stopped. Then: one Content-Length (no chunked bodies), a body of at most
limits.MAX_BODY_BYTES (a GET's body is read and dropped, never parsed as a second request), a
Host header naming a loopback address, the bound address or an --allowed-host name
(DNS-rebinding guard), and every refusal, http.server's own included, as one JSON line with
X-Content-Type-Options: nosniff.
"""
from __future__ import annotations

import io
import math
import re
import select
import socket
import time
from http.server import BaseHTTPRequestHandler

from fitplan.web import limits as L
from fitplan.web.app import Response, error_response, handle

LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}


class _RequestDeadline(Exception):
    """The request did not arrive in time (not a TimeoutError: http.server would swallow that)."""


class _DeadlineReader(io.RawIOBase):
    """The socket as a raw stream whose every read shares the request's deadline, so a client
    trickling a byte at a time cannot hold a connection past it: the header deadline until
    headers_done(), then the whole-request deadline."""

    def __init__(self, sock):
        self.sock = sock
        self.deadline = self.request_end = math.inf
        self.in_headers = True
        self.received = 0          # bytes read since begin()

    def begin(self, header_s: float, request_s: float) -> None:
        now = time.monotonic()
        self.request_end = now + request_s
        self.deadline = min(now + header_s, self.request_end)
        self.in_headers, self.received = True, 0

    def headers_done(self) -> None:
        self.deadline, self.in_headers = self.request_end, False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise _RequestDeadline
        self.sock.settimeout(remaining)
        try:
            n = self.sock.recv_into(buffer)
        except TimeoutError:
            raise _RequestDeadline from None
        self.received += n
        return n


class _Writer(io.RawIOBase):
    def __init__(self, sock):
        self.sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.sock.sendall(data)
        return len(data)


_PROTOCOL_ERRORS = {400: "request: a malformed request line or header",
                    414: "request: the request line is too long",
                    431: "request: too many or too long header lines",
                    501: "request: not implemented; use GET or POST",
                    505: "request: use HTTP/1.0 or HTTP/1.1"}


class Handler(BaseHTTPRequestHandler):
    """A thin adapter from http.server to `handle`, with the connection's limits."""
    server_version = "fitplan"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    def setup(self):
        self.connection = self.request
        self._reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader)
        self.wfile = _Writer(self.connection)

    def handle_one_request(self):
        server = self.server
        self._reader.begin(server.header_deadline_s, server.request_deadline_s)
        self.requestline, self.request_version, self.command = "", self.protocol_version, None
        try:
            super().handle_one_request()
        except _RequestDeadline:
            self.close_connection = True
            if self._reader.received:       # a request had begun: say why it is cut off
                if self._reader.in_headers:
                    seconds = min(server.header_deadline_s, server.request_deadline_s)
                    what = "the request line and headers were"
                else:
                    seconds, what = server.request_deadline_s, "the request was"
                self._send(error_response(408, f"request: {what} not received within {seconds:g} s; "
                                               f"the connection is closed"), write_timeout=1.0)

    def do_GET(self):
        self._answer(self.command)

    # every other method, TRACE and CONNECT too, gets handle's JSON 405 (an unknown one a JSON 501)
    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = do_GET

    def _answer(self, method: str):
        self._reader.headers_done()      # from here the whole-request deadline holds
        body = self._body(method)
        if body is None:
            return
        if not self._host_ok():
            return self._send(error_response(403, "request: this server answers only to a loopback Host "
                                                  "(127.0.0.1 or localhost) and the names given with "
                                                  "--allowed-host"))
        self._send(handle(method, self.path, self.headers, body if method == "POST" else None,
                          pool=self.server.pool, cancelled=self._client_gone), head=method == "HEAD")

    def _client_gone(self) -> bool:
        """Whether the client closed the connection while its answer is prepared (a browser does
        when it aborts a request). A client that sends a next request meanwhile is still there."""
        try:
            if not select.select([self.connection], [], [], 0)[0]:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _body(self, method: str) -> bytes | None:
        """The request's body, read whatever the method (a GET's too, so that it is never parsed
        as a second request); None when a refusal has been sent instead."""
        lengths = self.headers.get_all("Content-Length") or []
        if self.headers.get("Transfer-Encoding"):
            return self._refuse(411, "request: send a Content-Length, not a chunked body")
        if not lengths:
            if method == "POST":
                return self._refuse(411, "request: a POST needs a Content-Length header")
            return b""
        if len(lengths) > 1 or not re.fullmatch(r"[0-9]{1,18}", lengths[0].strip()):
            return self._refuse(400, "request: give one Content-Length, a whole number of bytes")
        size = int(lengths[0])
        if size > L.MAX_BODY_BYTES:
            self._discard(size)
            return self._refuse(413, f"request: the body is {size:,} bytes; the limit is "
                                     f"{L.MAX_BODY_BYTES:,} bytes ({L.MAX_BODY_BYTES // 1024} KiB)")
        body = self.rfile.read(size)
        if len(body) < size:               # the client hung up mid-body
            self.close_connection = True
            return None
        return body

    def _refuse(self, status: int, message: str) -> None:
        self.close_connection = True
        self._send(error_response(status, message))
        return None

    def _discard(self, size: int) -> None:
        """Read and drop a refused body (up to L.DISCARD_LIMIT), so the client sees the 413 rather
        than a reset connection; beyond that the connection is simply closed."""
        if size > L.DISCARD_LIMIT:
            return
        while size > 0:
            chunk = self.rfile.read(min(size, 64 * 1024))
            if not chunk:
                return
            size -= len(chunk)

    def send_error(self, code, message=None, explain=None):
        """http.server's own refusals (a bad request line, an unknown method, ...) as one JSON line."""
        self.close_connection = True
        if not self.request_version or self.request_version == "HTTP/0.9":
            self.request_version = self.protocol_version
        self._send(error_response(int(code), _PROTOCOL_ERRORS.get(int(code), f"request: refused ({int(code)})")))

    def _host_ok(self) -> bool:
        hosts = self.headers.get_all("Host") or []
        if len(hosts) != 1:
            return False
        return host_name(hosts[0]) in self.server.allowed_hosts

    def _send(self, r: Response, head: bool = False, write_timeout: float = L.WRITE_TIMEOUT_S):
        try:
            self.connection.settimeout(write_timeout)
            self.send_response(r.status)
            self.send_header("Content-Type", r.content_type)
            self.send_header("Content-Length", str(len(r.body)))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            if "Cache-Control" not in r.headers:
                self.send_header("Cache-Control", "no-store")
            for k, v in r.headers.items():
                self.send_header(k, v)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if not head:
                self.wfile.write(r.body)
        except (OSError, ValueError):     # the client went away or stopped reading
            self.close_connection = True

    def log_message(self, format, *args):
        if not self.server.quiet:
            super().log_message(format, *args)



def host_name(header: str) -> str:
    """The name in a Host header, lower case, without port or IPv6 brackets."""
    header = header.strip()
    if header.startswith("["):
        return header[1:].split("]", 1)[0].lower()
    return header.rsplit(":", 1)[0].lower() if header.count(":") == 1 else header.lower()

