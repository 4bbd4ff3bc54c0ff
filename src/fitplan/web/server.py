"""`fitplan serve`: a local web page over a JSON API that never disagrees with the CLI.

One request path. The API validates the JSON body against the same declarations the CLI's
flags are generated from (fitplan.request.api_flags: a request key is a flag without its
dashes), builds the same fitplan.request.Request and answers it with the same
fitplan.service.respond, whose text is what the CLI prints. A pasted Hugging Face config.json
is read from the request itself (fitplan.files.hf.model_from_hf_text), named
"<hf_name>/config.json" in errors: nothing is written to disk.

Routes
    GET  /                  the page (static/index.html)
    GET  /static/<file>     the page's script and style sheet, from this package, nothing else
    GET  /api/presets       the preset registries (models, GPUs, precision recipes), the parts table
    GET  /api/fields        the request schema of each endpoint, generated from the declarations
    POST /api/plan          `fitplan plan ... --json`
    POST /api/markdown      `fitplan plan ... --format markdown`, as text/markdown
    POST /api/sweep         `fitplan sweep ... --format json`
    POST /api/export        `fitplan export ... --format F`, as {"exit_code", "ok", "format", "text", "notes"}
    POST /api/compare       `fitplan compare ... --json`
    POST /api/infer         `fitplan infer ... --json`

The server, by idea:
    server.py       this: listening, the connection caps (all clients, and per client address),
                    the Host names it answers to, `fitplan serve`
    connection.py   one HTTP connection: the header and whole-request deadlines, the body, refusals
    app.py          `handle(method, path, headers, body)`: routing, static files, the answers
    schema.py       the JSON request schema and its type checks
    lanes.py        the fast lane (a single plan, infer, an export of a given layout) and the
                    heavy lane (searches, sweeps, compare), each a pool of worker processes
    pool.py         a pool: workers, queue, time budget, a dead worker replaced and its request retried
    worker.py       what runs inside a worker process: fitplan.service.respond, as a picklable result
    limits.py       every limit's value, and what happens past it

Standard library only (http.server.ThreadingHTTPServer): the server needs one JSON API, a
few static files and strict input checks, which take less code here than the glue a
framework needs, and `fitplan serve` then works after a plain `pip install -e .`.

Safety: binds to 127.0.0.1 unless told otherwise (another --host prints a warning); every
request must name a loopback Host, the bound address, or a name given with --allowed-host
(DNS-rebinding guard), wherever the server listens; unknown fields, wrong types and
out-of-range numbers are 400s; no request reaches the file system.
"""
from __future__ import annotations

import ipaddress
import re
import socket
import sys
import threading
from http.server import ThreadingHTTPServer

from fitplan.web import limits as L
from fitplan.web.app import busy_response
from fitplan.web.connection import LOOPBACK_NAMES, Handler
from fitplan.web.lanes import Lanes

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
WILDCARD_HOSTS = {"", "0.0.0.0", "::"}
HOST_NAME = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
                       r"[A-Za-z0-9])?)*")


def allowed_host(name: str) -> str:
    """An --allowed-host value, checked and normalised: a DNS name or an IP address."""
    from fitplan.errors import SpecError
    plain = name.strip("[]") if name.startswith("[") and name.endswith("]") else name
    try:
        return ipaddress.ip_address(plain).compressed
    except ValueError:
        pass
    if len(name) <= 253 and HOST_NAME.fullmatch(name):
        return name.lower()
    raise SpecError(f"--allowed-host {name!r}: give a host name (letters, digits, '-' and '.') or an IP address")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str) -> str | None:
    """The warning `fitplan serve` prints when it listens beyond loopback; None on loopback."""
    if is_loopback(host):
        return None
    where = "every network interface" if host in WILDCARD_HOSTS else host
    return (f"fitplan serve: warning: --host {host or repr(host)} listens on {where}: other machines can reach "
            f"this server and run analyses on it; it still answers only to loopback Host names and those "
            f"given with --allowed-host")


class FitplanServer(ThreadingHTTPServer):
    """A thread per connection (fitplan.web.connection.Handler), at most max_connections of them,
    and at most max_client_connections from one client address (its IP address: the port
    changes with every connection), so no one client can hold every connection; the analyses
    run in pool's worker processes (default: fitplan.web.lanes.Lanes, a fast and a heavy lane)."""
    daemon_threads = True
    block_on_close = False      # closing does not wait for a slow client (the deadline ends it anyway)
    allow_reuse_address = True
    request_queue_size = 2 * L.MAX_CONNECTIONS   # listen backlog: socketserver's 5 drops a burst's SYNs (1 s retries)

    def __init__(self, address, *, quiet: bool = False, allowed_hosts=(), pool=None,
                 max_connections: int = L.MAX_CONNECTIONS, max_client_connections: int = L.MAX_CLIENT_CONNECTIONS,
                 header_deadline_s: float = L.HEADER_DEADLINE_S, request_deadline_s: float = L.REQUEST_DEADLINE_S):
        host = address[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)
        self.quiet = quiet
        self.loopback_only = is_loopback(host)
        self.allowed_hosts = set(LOOPBACK_NAMES) | {allowed_host(h) for h in allowed_hosts}
        if host not in WILDCARD_HOSTS:
            self.allowed_hosts.add(host.lower())    # the address it was asked to listen on
        self.pool = pool or Lanes()
        self.max_connections, self.max_client_connections = max_connections, max_client_connections
        self.header_deadline_s, self.request_deadline_s = header_deadline_s, request_deadline_s
        self.connections = 0
        self.by_client: dict[str, int] = {}        # client address -> connections open
        self._connections_lock = threading.Lock()

    def process_request(self, request, client_address):
        client = client_address[0]
        with self._connections_lock:
            if self.connections >= self.max_connections:
                refusal = busy_response(self.max_connections, "connections open")
            elif self.by_client.get(client, 0) >= self.max_client_connections:
                refusal = busy_response(self.max_client_connections, "connections open from this address")
            else:
                refusal = None
                self.connections += 1
                self.by_client[client] = self.by_client.get(client, 0) + 1
        if refusal is not None:
            return self._refuse(request, refusal)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._closed_one(client)
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed_one(client_address[0])

    def _closed_one(self, client: str):
        with self._connections_lock:
            self.connections -= 1
            left = self.by_client.pop(client) - 1
            if left:
                self.by_client[client] = left

    def _refuse(self, request, r) -> None:
        """Over a connection cap: one 503 line, written from the accepting thread without
        waiting on the client, and the connection closed."""
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(r.body)}\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n"
                f"Retry-After: 1\r\nConnection: close\r\n\r\n").encode()
        try:
            request.setblocking(False)
            request.send(head + r.body)
            request.shutdown(socket.SHUT_WR)
            request.recv(65536)           # drop what already arrived, so the close is not a reset
        except OSError:
            pass
        request.close()

    def handle_error(self, request, client_address):
        """A client that resets or stalls is routine; anything else goes to stderr."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)

    def server_close(self):
        super().server_close()
        if getattr(self, "pool", None) is not None:    # None when binding failed in __init__
            self.pool.close()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def make_server(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, quiet: bool = False, **limits) -> FitplanServer:
    """A bound, not yet serving server (port 0: an ephemeral port; see .url). limits: allowed_hosts,
    pool, max_connections, max_client_connections, header_deadline_s, request_deadline_s
    (FitplanServer's keywords)."""
    return FitplanServer((host, port), quiet=quiet, **limits)


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, allowed_hosts=()) -> None:
    """Serve the page until interrupted: prints the address, then blocks. A port that cannot be
    bound, or a bad --allowed-host, is a SpecError (the CLI prints it as one line and exits 2)."""
    from fitplan.errors import SpecError
    if not 0 <= port <= 65535:
        raise SpecError(f"--port must be 0 to 65535, got {port}")
    allowed = [allowed_host(h) for h in allowed_hosts]
    try:
        server = make_server(host, port, allowed_hosts=allowed)
    except OSError as err:
        raise SpecError(f"--host {host} --port {port}: cannot listen there ({err.strerror or err}); "
                        f"pick another --port") from None
    warning = exposure_warning(host)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    server.pool.start()
    print(f"fitplan serve: open {server.url}  (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("fitplan serve: stopped", flush=True)
    finally:
        server.server_close()
