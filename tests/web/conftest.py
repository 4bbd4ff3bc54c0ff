"""A real fitplan server on 127.0.0.1 with an ephemeral port, and a small HTTP client for it."""
import http.client
import json
import os
import subprocess
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from fitplan.web.server import make_server

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Reply:
    status: int
    headers: dict
    body: bytes

    @property
    def json(self):
        return json.loads(self.body)


class Client:
    """source: the loopback address to connect from (127.0.0.x), so a test can be several clients
    (the server caps connections per client address)."""

    def __init__(self, host: str, port: int, source: str | None = None):
        self.host, self.port, self.source = host, port, source

    def request(self, method: str, path: str, body=None, headers=None, raw: bytes | None = None) -> Reply:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60,
                                          source_address=(self.source, 0) if self.source else None)
        try:
            hdrs = {"Host": self.host, **(headers or {})}
            data = raw
            if body is not None:
                data = json.dumps(body).encode()
                hdrs.setdefault("Content-Type", "application/json")
            conn.request(method, path, body=data, headers=hdrs)
            r = conn.getresponse()
            return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def post(self, path: str, body, **kw) -> Reply:
        return self.request("POST", path, body=body, **kw)

    @classmethod
    def of(cls, server, source: str | None = None) -> "Client":
        return cls("127.0.0.1", server.server_address[1], source)


@contextmanager
def serving(host: str = "127.0.0.1", **limits):
    """A server of its own, with its own limits (make_server's keywords), serving in a thread."""
    srv = make_server(host, 0, quiet=True, **limits)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture(scope="session")
def server():
    with serving() as srv:
        srv.pool.start()          # as `fitplan serve` does: the workers start while the first tests run
        yield srv


@pytest.fixture(scope="session")
def client(server):
    return Client(*server.server_address[:2])


def cli(*argv: str, cwd: Path = ROOT) -> tuple[int, str, str]:
    """The real command line, `python -m fitplan ARGV`, in a child process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    p = subprocess.run([sys.executable, "-m", "fitplan", *argv], capture_output=True, text=True, cwd=cwd,
                       env=env, timeout=120)
    return p.returncode, p.stdout, p.stderr
