"""`fitplan serve`: a local web page over a JSON API that never disagrees with the CLI.

One code path. Every analysis the API answers is the CLI run in-process: the validated
request becomes a CLI argv (`request_argv`), `fitplan.cli.main(argv, out=StringIO(),
err=StringIO())` runs it (`run_cli`), and the reply is the CLI's own output:

    exit 0 or 1 -> 200, the body is the CLI's stdout byte for byte (`--json` text)
    exit 2      -> 400, {"error": "<the CLI's one stderr line, without its newline>"}

The one rewrite: a pasted Hugging Face config.json is written to a temporary folder that
the CLI reads with --hf-config; that folder's path (a server detail) is cut out of the
CLI's texts, so an error reads "hf-model/config.json: ..." rather than "/tmp/.../...".

Routes
    GET  /                  the page (static/index.html)
    GET  /static/<file>     the page's script and style sheet, from this package, nothing else
    GET  /api/presets       the preset registries (models, GPUs, precision recipes) and features
    POST /api/plan          `fitplan plan ... --json`
    POST /api/markdown      `fitplan plan ... --format markdown`, as text/markdown
    POST /api/sweep         `fitplan sweep ... --format json`
    POST /api/export        `fitplan export ... --format F`, as {"exit_code", "ok", "format", "text", "notes"}
    POST /api/compare       `fitplan compare ... --json` when this fitplan has that subcommand, else 404

Standard library only (http.server.ThreadingHTTPServer): the server needs one JSON API, a
few static files and strict input checks, which take less code here than the glue a
framework needs, and `fitplan serve` then works after a plain `pip install -e .`.

Safety: binds to 127.0.0.1 unless told otherwise; when bound to loopback, requests must
name a loopback Host (DNS-rebinding guard); a POST must be application/json with a
Content-Length of at most MAX_BODY_BYTES (else 411/413/415); unknown fields, wrong types
and out-of-range numbers are 400s; no request reaches the file system except the pasted
config (no --spec, --plot or --output); an unexpected exception is a 500 with one generic
line on the page and the traceback on the server's stderr.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import re
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
MAX_BODY_BYTES = 256 * 1024
DISCARD_LIMIT = 16 * MAX_BODY_BYTES    # a refused body up to this size is read and dropped
INTERNAL_ERROR = "internal error in the fitplan server; the details are in the server's log"
STATIC_DIR = Path(__file__).resolve().with_name("static")
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png",
                 ".ico": "image/x-icon", ".json": "application/json"}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'")
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}
MAX_CONCURRENT_ANALYSES = 4

INT32 = 2**31 - 1
HF_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class RequestError(Exception):
    """A request the server refuses before the CLI sees it: (HTTP status, one line)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


# ---------------------------------------------------------------- the request schema

@dataclass(frozen=True)
class Field:
    """One request field and the CLI flag it becomes.

    kind: int, num (int or float), str, bool (a store_true flag: true adds it, false omits it),
    tied (true: --tied-embeddings, false: --untied-embeddings), ints (a list -> "a,b,c").
    Only the types and an outer range are checked here: the CLI checks the meaning (>= 1,
    known presets, choices), so its message, not a second one, reaches the page."""
    flag: str
    kind: str
    lo: float = -INT32
    hi: float = INT32
    max_len: int = 100
    max_items: int = 64


MODEL_FIELDS = {
    "preset": Field("--preset", "str"),
    "layers": Field("--layers", "int"), "hidden": Field("--hidden", "int"), "heads": Field("--heads", "int"),
    "kv_heads": Field("--kv-heads", "int"), "ffn": Field("--ffn", "int"), "vocab": Field("--vocab", "int"),
    "mlp": Field("--mlp", "str", max_len=20), "tied_embeddings": Field("--tied-embeddings", "tied"),
    "params": Field("--params", "int", hi=10**16),
    "experts": Field("--experts", "int", hi=2**20), "experts_per_token": Field("--experts-per-token", "int", hi=2**20),
    "expert_ffn": Field("--expert-ffn", "int"), "shared_experts": Field("--shared-experts", "int", lo=0, hi=2**20),
    "first_dense_layers": Field("--first-dense-layers", "int", lo=0),
    "capacity_factor": Field("--capacity-factor", "num", lo=0, hi=1000),
}
TRAINING_FIELDS = {
    "seq_len": Field("--seq-len", "int"), "micro_batch": Field("--micro-batch", "int"),
    "global_batch": Field("--global-batch", "int"), "precision": Field("--precision", "str"),
    "weight_bytes": Field("--weight-bytes", "num", lo=0, hi=1024),
    "grad_bytes": Field("--grad-bytes", "num", lo=0, hi=1024),
    "master_bytes": Field("--master-bytes", "num", lo=0, hi=1024),
    "optimizer_bytes": Field("--optimizer-bytes", "num", lo=0, hi=1024),
    "act_bytes": Field("--act-bytes", "int", lo=-64, hi=64), "no_dropout": Field("--no-dropout", "bool"),
    "attention_kernel": Field("--attention-kernel", "str", max_len=20),
    "moe_imbalance": Field("--moe-imbalance", "num", lo=0, hi=1000),
}
CLUSTER_FIELDS = {
    # The GPU count is capped: the search and the smallest-count scan grow with it.
    "gpus": Field("--gpus", "int", hi=2**20), "gpu": Field("--gpu", "str"),
    "gpu_memory": Field("--gpu-memory", "str", max_len=40), "reserve": Field("--reserve", "str", max_len=40),
    "gpus_per_node": Field("--gpus-per-node", "int", hi=2**20),
    "intra_node_bandwidth": Field("--intra-node-bandwidth", "str", max_len=40),
    "inter_node_bandwidth": Field("--inter-node-bandwidth", "str", max_len=40),
}
CONFIG_FIELDS = {
    "tp": Field("--tp", "int", hi=2**20), "pp": Field("--pp", "int", hi=2**20), "dp": Field("--dp", "int", hi=2**20),
    "cp": Field("--cp", "int", hi=2**20), "ep": Field("--ep", "int", hi=2**20), "zero": Field("--zero", "int", lo=-64, hi=64),
    "sequence_parallel": Field("--sequence-parallel", "bool"), "recompute": Field("--recompute", "str", max_len=20),
    "virtual_stages": Field("--virtual-stages", "int", hi=4096),
    "rank": Field("--rank", "str", max_len=20), "allow_cross_node_tp": Field("--allow-cross-node-tp", "bool"),
    "max_cp": Field("--max-cp", "int", hi=64),
}
PLAN_FIELDS = {"suggest": Field("--suggest", "bool"), "top": Field("--top", "int", hi=100)}
SWEEP_FIELDS = {"over": Field("--over", "str", max_len=20), "values": Field("--values", "ints", lo=-INT32, hi=2**24)}
EXPORT_FIELDS = {"format": Field("--format", "str", max_len=20)}
HF_FIELDS = ("hf_config", "hf_name")   # the pasted config.json (text or object) and its folder name

SHARED = {**MODEL_FIELDS, **TRAINING_FIELDS, **CLUSTER_FIELDS, **CONFIG_FIELDS}
SCHEMAS = {
    "plan": {**SHARED, **PLAN_FIELDS},
    "markdown": {**SHARED, **PLAN_FIELDS},
    "sweep": {**SHARED, **SWEEP_FIELDS},
    "export": {**SHARED, **EXPORT_FIELDS},
}
# the CLI subcommand and the output flags each endpoint runs
COMMANDS = {"plan": ("plan", ["--json"]), "markdown": ("plan", ["--format=markdown"]),
            "sweep": ("sweep", ["--format=json"]), "export": ("export", [])}


@dataclass
class CliRequest:
    """What run_cli needs: the argv, and the pasted config.json to write first (if any)."""
    argv: list[str]
    hf_text: str | None = None
    hf_name: str = "hf-model"
    hf_flag_index: int | None = None   # where the --hf-config=<path> placeholder sits in argv


def _type_name(value) -> str:
    return {bool: "true/false", int: "a whole number", float: "a number", str: "text", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _show(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_str(name: str, value, f: Field) -> str:
    if not isinstance(value, str):
        raise RequestError(400, f"request: '{name}' must be text, got {_type_name(value)} {_show(value)}")
    if not value.strip():
        raise RequestError(400, f"request: '{name}' is empty; leave it out or give a value")
    if len(value) > f.max_len:
        raise RequestError(400, f"request: '{name}' is longer than {f.max_len} characters")
    if not value.isprintable():
        raise RequestError(400, f"request: '{name}' holds a control character or line break; remove it")
    return value


def _check_int(name: str, value, f: Field) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)     # JSON 16.0 is 16
        else:
            raise RequestError(400, f"request: '{name}' must be a whole number, got {_type_name(value)} "
                                    f"{_show(value)}")
    if not f.lo <= value <= f.hi:
        raise RequestError(400, f"request: '{name}' = {value} is out of range; give {int(f.lo)} to {int(f.hi)}")
    return value


def _argv_for(name: str, value, f: Field) -> list[str]:
    if f.kind == "str":
        return [f"{f.flag}={_check_str(name, value, f)}"]     # --flag=value: a value can never become a flag
    if f.kind == "int":
        return [f"{f.flag}={_check_int(name, value, f)}"]
    if f.kind == "num":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise RequestError(400, f"request: '{name}' must be a number, got {_type_name(value)} {_show(value)}")
        if not f.lo <= value <= f.hi:
            raise RequestError(400, f"request: '{name}' = {value:g} is out of range; give {f.lo:g} to {f.hi:g}")
        return [f"{f.flag}={value!r}"]
    if f.kind in ("bool", "tied"):
        if not isinstance(value, bool):
            raise RequestError(400, f"request: '{name}' must be true or false, got {_type_name(value)} "
                                    f"{_show(value)}")
        if f.kind == "tied":
            return ["--tied-embeddings" if value else "--untied-embeddings"]
        return [f.flag] if value else []
    if f.kind == "ints":
        if not isinstance(value, list) or not value:
            raise RequestError(400, f"request: '{name}' must be a non-empty list of whole numbers, got "
                                    f"{_type_name(value)} {_show(value)}")
        if len(value) > f.max_items:
            raise RequestError(400, f"request: '{name}' has {len(value)} items; give at most {f.max_items}")
        return [f"{f.flag}={','.join(str(_check_int(f'{name}[{i}]', v, f)) for i, v in enumerate(value))}"]
    raise AssertionError(f.kind)


def _hf_part(body: dict) -> tuple[str | None, str]:
    """The pasted config.json as text, and the folder name it is written under (the model's name)."""
    name = body.get("hf_name")
    if name is None:
        name = "hf-model"
    elif not isinstance(name, str) or not HF_NAME.match(name):
        raise RequestError(400, "request: 'hf_name' must be 1 to 64 letters, digits, '.', '_' or '-', "
                                "starting with a letter or digit")
    config = body.get("hf_config")
    if config is None:
        return None, name
    if isinstance(config, dict):
        return json.dumps(config, indent=2), name
    if isinstance(config, str):
        if not config.strip():
            raise RequestError(400, "request: 'hf_config' is empty; paste the contents of a config.json")
        return config, name
    raise RequestError(400, f"request: 'hf_config' must be the text of a config.json or a JSON object, "
                            f"got {_type_name(config)}")


def request_argv(kind: str, body, schema: dict | None = None, command: tuple | None = None) -> CliRequest:
    """The CLI argv for a validated request body. Raises RequestError(400) on a bad body."""
    if not isinstance(body, dict):
        raise RequestError(400, f"request: the body must be a JSON object {{...}}, got {_type_name(body)}")
    schema = SCHEMAS[kind] if schema is None else schema
    subcommand, output = COMMANDS[kind] if command is None else command
    allowed = set(schema) | set(HF_FIELDS)
    unknown = sorted(k for k in body if k not in allowed)
    if unknown:
        raise RequestError(400, f"request: unknown field {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}")
    argv = [subcommand]
    hf_text, hf_name = _hf_part(body)
    index = None
    if hf_text is not None:
        index = len(argv)
        argv.append("--hf-config=")      # the path is filled in by run_cli
    for name, f in schema.items():       # a fixed order: the same body always gives the same argv
        value = body.get(name)
        if value is None:
            continue
        argv.extend(_argv_for(name, value, f))
    if kind == "export" and body.get("format") is None:
        raise RequestError(400, "request: 'format' is required: megatron, deepspeed, torchtitan or "
                                "torchtitan-python")
    argv.extend(output)
    return CliRequest(argv=argv, hf_text=hf_text, hf_name=hf_name, hf_flag_index=index)


# ---------------------------------------------------------------- running the CLI

_analyses = threading.BoundedSemaphore(MAX_CONCURRENT_ANALYSES)


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(request: CliRequest) -> CliResult:
    """fitplan.cli.main on the request's argv, capturing both streams. A pasted config is
    written to a fresh temporary folder, passed as --hf-config, and deleted afterwards."""
    from fitplan.cli import main
    argv = list(request.argv)
    with _analyses, contextlib.ExitStack() as stack:
        prefix = None
        if request.hf_text is not None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="fitplan-web-"))
            folder = Path(tmp) / request.hf_name
            folder.mkdir()
            path = folder / "config.json"
            path.write_text(request.hf_text, encoding="utf-8")
            argv[request.hf_flag_index] = f"--hf-config={path}"
            prefix = str(Path(tmp)) + "/"
        out, err = io.StringIO(), io.StringIO()
        code = main(argv, out=out, err=err)
        stdout, stderr = out.getvalue(), err.getvalue()
    if prefix:
        stdout, stderr = stdout.replace(prefix, ""), stderr.replace(prefix, "")
    return CliResult(code, stdout, stderr)


def subcommand_parser(name: str):
    """The CLI's argparse parser for a subcommand, or None when this fitplan lacks it."""
    from fitplan.cli import build_parser
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(name)
    return None


def compare_schema():
    """(schema, (subcommand, output flags)) for `fitplan compare`, built from its own parser:
    the request fields whose flags it takes. None when the subcommand does not exist."""
    parser = subcommand_parser("compare")
    if parser is None:
        return None
    flags = {s for a in parser._actions for s in a.option_strings}
    schema = {name: f for name, f in {**SHARED, **PLAN_FIELDS}.items()
              if f.flag in flags or f.kind == "tied" and "--tied-embeddings" in flags}
    schema.pop("suggest", None)
    if "--json" in flags:
        output = ["--json"]
    elif "--format" in flags:
        output = ["--format=json"]
    else:
        output = []
    return schema, ("compare", output), "--hf-config" in flags


# ---------------------------------------------------------------- the application

@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict = field(default_factory=dict)


def json_response(status: int, obj) -> Response:
    return Response(status, (json.dumps(obj, sort_keys=True, indent=2) + "\n").encode())


def error_response(status: int, message: str) -> Response:
    return json_response(status, {"error": message})


def _one_line(stderr: str) -> str:
    return stderr.rstrip("\n")


def presets_payload() -> dict:
    from fitplan import __version__, parts, presets
    from fitplan.presets.recipes import DEFAULT_RECIPE
    models = {name: {"num_layers": p.model.num_layers, "hidden_size": p.model.hidden_size,
                     "num_heads": p.model.num_heads, "num_kv_heads": p.model.num_kv_heads,
                     "ffn_hidden_size": p.model.ffn_hidden_size, "vocab_size": p.model.vocab_size,
                     "mlp": p.model.mlp.value, "seq_len": p.seq_len, "micro_batch": p.micro_batch,
                     "global_batch": p.global_batch, "gpu": p.gpu, "source": p.model.source}
              for name, p in presets.MODELS.items()}
    gpus = {name: {"memory_bytes": g.memory_bytes, "default_reserve_bytes": g.default_reserve_bytes,
                   "gpus_per_node": g.gpus_per_node, "source": g.source} for name, g in presets.GPUS.items()}
    recipes = {name: {"bytes_per_param": r.total_bytes, "description": r.description}
               for name, r in presets.RECIPES.items()}
    return {"fitplan_version": __version__, "models": models, "gpus": gpus, "recipes": recipes,
            "default_recipe": DEFAULT_RECIPE, "default_gpu": "h100-80gb",
            "features": {"compare": subcommand_parser("compare") is not None},
            "limits": {"max_body_bytes": MAX_BODY_BYTES},
            "parts": parts.payload()}


def analysis_response(kind: str, body) -> Response:
    """The POST /api/<kind> answer: validate -> argv -> fitplan.cli.main -> the CLI's output."""
    if kind == "compare":
        found = compare_schema()
        if found is None:
            return error_response(404, "fitplan compare is not available in this version of fitplan")
        schema, command, takes_hf = found
        if isinstance(body, dict) and body.get("hf_config") is not None and not takes_hf:
            return error_response(400, "request: fitplan compare does not take --hf-config")
        request = request_argv(kind, body, schema=schema, command=command)
    else:
        request = request_argv(kind, body)
    result = run_cli(request)
    if result.exit_code == 2:
        return error_response(400, _one_line(result.stderr))
    if result.exit_code not in (0, 1):
        raise RuntimeError(f"fitplan exited {result.exit_code} for {request.argv}")
    headers = {"X-Fitplan-Exit-Code": str(result.exit_code)}
    if kind == "export":
        notes = [line for line in result.stderr.splitlines() if line]
        r = json_response(200, {"exit_code": result.exit_code, "ok": result.exit_code == 0,
                                "format": body["format"], "text": result.stdout, "notes": notes})
        r.headers.update(headers)
        return r
    if kind == "markdown":
        return Response(200, result.stdout.encode(), "text/markdown; charset=utf-8",
                        {**headers, "Content-Disposition": 'attachment; filename="fitplan.md"'})
    json.loads(result.stdout)     # the CLI promised JSON; anything else is a server fault (500)
    return Response(200, result.stdout.encode(), "application/json", headers)


def _static_files() -> dict:
    if not STATIC_DIR.is_dir():
        return {}
    return {p.name: p for p in STATIC_DIR.iterdir() if p.is_file() and p.suffix in CONTENT_TYPES}


API_KINDS = ("plan", "markdown", "sweep", "export", "compare")


def _json_type(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() == "application/json"


def handle(method: str, path: str, headers, body: bytes | None) -> Response:
    """The whole application as one function: method, path, a headers mapping (case-insensitive
    .get, as http.server's), and the already size-checked body. Never raises."""
    try:
        route = urlsplit(path).path
        if method in ("GET", "HEAD"):
            if route in ("/", "/index.html"):
                return _static("index.html")
            if route.startswith("/static/"):
                return _static(route[len("/static/"):])
            if route == "/api/presets":
                return json_response(200, presets_payload())
            if route.startswith("/api/") and route[5:] in API_KINDS:
                return error_response(405, f"{route}: use POST with a JSON body")
            return error_response(404, f"{route}: no such page")
        if method == "POST":
            if not (route.startswith("/api/") and route[5:] in API_KINDS):
                return error_response(404 if route != "/api/presets" else 405, f"{route}: no such API route")
            if not _json_type(headers.get("Content-Type")):
                return error_response(415, "request: send the body as application/json")
            try:
                data = json.loads((body or b"").decode("utf-8"), parse_constant=_no_constants)
            except (UnicodeDecodeError, ValueError, RecursionError) as err:
                reason = err.msg if isinstance(err, json.JSONDecodeError) else err.__class__.__name__
                return error_response(400, f"request: the body is not valid JSON ({reason})")
            return analysis_response(route[5:], data)
        return error_response(405, f"{method}: not allowed; use GET or POST")
    except RequestError as err:
        return error_response(err.status, err.message)
    except Exception:    # never a stack trace to the page: log it here, one generic line there
        traceback.print_exc(file=sys.stderr)
        return error_response(500, INTERNAL_ERROR)


def _no_constants(name):
    raise ValueError(f"{name} is not a JSON number")


def _static(name: str) -> Response:
    files = _static_files()
    if name not in files:
        return error_response(404, f"/static/{name}: no such file")
    p = files[name]
    headers = {"Cache-Control": "no-cache"}
    if p.suffix == ".html":
        headers["Content-Security-Policy"] = CSP
    return Response(200, p.read_bytes(), CONTENT_TYPES[p.suffix], headers)


# ---------------------------------------------------------------- HTTP

class Handler(BaseHTTPRequestHandler):
    """A thin adapter from http.server to `handle`."""
    server_version = "fitplan"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = 30     # seconds a connection may idle mid-request

    def do_GET(self):
        self._answer("GET", None)

    def do_HEAD(self):
        self._answer("HEAD", None)

    def do_POST(self):
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            return self._send(error_response(411, "request: send a Content-Length, not a chunked body"))
        length = self.headers.get("Content-Length")
        if length is None or not length.strip().isdigit():
            self.close_connection = True
            return self._send(error_response(411, "request: a POST needs a Content-Length header"))
        size = int(length)
        if size > MAX_BODY_BYTES:
            self.close_connection = True
            self._discard(size)
            return self._send(error_response(413, f"request: the body is {size:,} bytes; the limit is "
                                                  f"{MAX_BODY_BYTES:,} bytes ({MAX_BODY_BYTES // 1024} KiB)"))
        self._answer("POST", self.rfile.read(size))

    def _discard(self, size: int) -> None:
        """Read and drop a refused body (up to DISCARD_LIMIT), so the client sees the 413 rather
        than a reset connection; beyond that the connection is simply closed."""
        if size > DISCARD_LIMIT:
            return
        while size > 0:
            chunk = self.rfile.read(min(size, 64 * 1024))
            if not chunk:
                return
            size -= len(chunk)

    def do_PUT(self):
        self._answer("PUT", None)

    do_DELETE = do_PATCH = do_OPTIONS = do_PUT

    def _answer(self, method: str, body: bytes | None):
        if not self._host_ok():
            return self._send(error_response(403, "request: this server answers only to a loopback Host "
                                                  "(127.0.0.1 or localhost)"))
        self._send(handle(method, self.path, self.headers, body), head=method == "HEAD")

    def _host_ok(self) -> bool:
        if not getattr(self.server, "loopback_only", False):
            return True
        host = self.headers.get("Host", "")
        name = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1:].split("]")[0]
        return name.lower() in LOOPBACK_NAMES

    def _send(self, r: Response, head: bool = False):
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
        try:
            self.end_headers()
            if not head:
                self.wfile.write(r.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True   # the page dropped a request it no longer needs (a newer input)

    def log_message(self, format, *args):
        if not getattr(self.server, "quiet", False):
            super().log_message(format, *args)


class FitplanServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, *, quiet: bool = False):
        host = address[0]
        if ":" in host:
            import socket
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)
        self.quiet = quiet
        self.loopback_only = host in LOOPBACK_NAMES or host.startswith("127.")

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def make_server(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, quiet: bool = False) -> FitplanServer:
    """A bound, not yet serving server (port 0: an ephemeral port; see .url)."""
    return FitplanServer((host, port), quiet=quiet)


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Serve the page until interrupted: prints the address, then blocks. A port that cannot be
    bound is a SpecError (the CLI prints it as one line and exits 2)."""
    from fitplan.errors import SpecError
    if not 0 <= port <= 65535:
        raise SpecError(f"--port must be 0 to 65535, got {port}")
    try:
        server = make_server(host, port)
    except OSError as err:
        raise SpecError(f"--host {host} --port {port}: cannot listen there ({err.strerror or err}); "
                        f"pick another --port") from None
    print(f"fitplan serve: open {server.url}  (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("fitplan serve: stopped", flush=True)
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    """`python -m fitplan.web [--host H] [--port P]`, until `fitplan serve` is wired in cli.py."""
    p = argparse.ArgumentParser(prog="fitplan serve", description="a local web page over fitplan's JSON API")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST}: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    args = p.parse_args(argv)
    from fitplan.errors import SpecError
    try:
        serve(args.host, args.port)
    except SpecError as err:
        print(f"fitplan: {err}", file=sys.stderr)
        return 2
    return 0
