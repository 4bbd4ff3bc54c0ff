"""Exposure: the Host check holds wherever the server listens, --allowed-host widens it by name,
listening beyond loopback prints a warning, static files never lead out of the package, and
names take no trailing newline."""
import io
import os
import re
import shutil
import subprocess
import sys

import pytest

from fitplan.cli import build_parser, main
from fitplan.errors import SpecError
from fitplan.web import app, schema, server as web

from .conftest import ROOT, Client, serving


def get(srv, host: str, path: str = "/api/presets"):
    return Client.of(srv).request("GET", path, headers={"Host": host})


def test_allowed_host_names_are_answered_and_others_refused():
    with serving(allowed_hosts=["fitplan.lan", "10.0.0.7"]) as srv:
        for host in ("fitplan.lan:8765", "FITPLAN.lan", "10.0.0.7:8765", "localhost", "[::1]:8765"):
            assert get(srv, host).status == 200, host
        for host in ("evil.example", "fitplan.lan.evil.example", "10.0.0.8", "fitplan.lan.", "fitplan.lan:80:80"):
            r = get(srv, host)
            assert r.status == 403 and "--allowed-host" in r.json["error"], host


def test_the_host_check_stays_on_beyond_loopback():
    """Bound to every interface, a rebinding page's Host is still refused."""
    with serving("0.0.0.0") as srv:
        assert not srv.loopback_only
        assert get(srv, "evil.example:8765").status == 403
        assert get(srv, "127.0.0.1:8765").status == 200


def test_two_host_headers_are_refused(server):
    import socket
    with socket.create_connection(server.server_address[:2], timeout=10) as s:
        s.sendall(b"GET /api/presets HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
        assert s.recv(65536).startswith(b"HTTP/1.1 403")


@pytest.mark.parametrize("name", ["bad name", "evil.example\n", "-x.lan", "a..b", "", "x" * 254, "*.lan"])
def test_a_bad_allowed_host_is_one_line(name):
    with pytest.raises(SpecError, match="--allowed-host"):
        web.allowed_host(name)


def test_allowed_host_is_a_repeatable_option_and_a_bad_one_exits_2():
    args = build_parser().parse_args(["serve", "--allowed-host", "a.lan", "--allowed-host", "10.0.0.7"])
    assert args.allowed_host == ["a.lan", "10.0.0.7"]
    assert build_parser().parse_args(["serve"]).allowed_host == []
    out, err = io.StringIO(), io.StringIO()
    assert main(["serve", "--port", "0", "--allowed-host", "bad name"], out=out, err=err) == 2
    assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("fitplan: --allowed-host 'bad name'")


@pytest.mark.parametrize("host,warned", [("0.0.0.0", True), ("", True), ("::", True), ("192.168.1.5", True),
                                         ("127.0.0.1", False), ("localhost", False), ("::1", False),
                                         ("127.0.0.2", False)])
def test_listening_beyond_loopback_is_warned(host, warned):
    line = web.exposure_warning(host)
    assert (line is not None) == warned
    if warned:
        assert "\n" not in line and line.startswith("fitplan serve: warning: --host")
        assert ("every network interface" in line) == (host in ("0.0.0.0", "", "::"))


def test_serve_on_every_interface_prints_the_warning():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    p = subprocess.Popen([sys.executable, "-u", "-m", "fitplan", "serve", "--host", "0.0.0.0", "--port", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline().startswith("fitplan serve: open http://0.0.0.0:")
    finally:
        p.terminate()
        _, err = p.communicate(timeout=10)
    assert err.startswith("fitplan serve: warning: --host 0.0.0.0 listens on every network interface")


def test_static_files_never_follow_a_symlink_out_of_the_package(client, tmp_path, monkeypatch):
    static = tmp_path / "static"
    shutil.copytree(app.STATIC_DIR, static)
    secret = tmp_path / "secret.js"
    secret.write_text("the secret")
    (static / "secret.js").symlink_to(secret)                # out of static/: not served
    (static / "up.css").symlink_to(tmp_path / ".." / tmp_path.name / "secret.js")
    (static / "alias.js").symlink_to(static / "app.js")      # inside static/: served
    monkeypatch.setattr(app, "STATIC_DIR", static)
    for name in ("secret.js", "up.css"):
        r = client.request("GET", f"/static/{name}")
        assert r.status == 404 and b"secret" not in r.body.replace(f"/static/{name}".encode(), b"")
    assert client.request("GET", "/static/alias.js").body == (static / "app.js").read_bytes()
    assert client.request("GET", "/static/app.js").status == 200


def test_names_take_no_trailing_newline(client):
    r = client.post("/api/plan", {"hf_config": "{}", "hf_name": "llama\n", "gpus": 8})
    assert r.status == 400 and "'hf_name' must be" in r.json["error"]
    assert client.request("GET", "/static/app.js%0A").status == 404
    for value in list(vars(web).values()) + list(vars(schema).values()):   # every pattern is used whole,
        if isinstance(value, re.Pattern):                                    # never with '$'
            assert not value.pattern.endswith("$")
