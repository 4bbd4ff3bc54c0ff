"""The application as one function, `handle(method, path, headers, body)`: routing, the static
page, the presets, and each analysis answered by the CLI's own request path in a worker.

    exit 0 or 1 -> 200, the body is the CLI's stdout byte for byte (`--json` text)
    bad input   -> 400, {"error": "<the CLI's one line, without 'fitplan: '>"}
    busy, over budget, a worker lost twice -> 503 with one line (Retry-After: 1 when busy)
    a bug in fitplan -> 500 with one generic line; the traceback goes to the server's stderr

Every answer, errors included, is JSON made with allow_nan=False (or the CLI's own text).
Static files are the package's own (a symlink out of static/ is not served).
"""
from __future__ import annotations

import functools
import json
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from fitplan.web import limits as L
from fitplan.web.pool import Busy, Cancelled, OverBudget, WorkerLost
from fitplan.web.schema import ENDPOINTS, RequestError, build_request, fields_payload, no_constants

INTERNAL_ERROR = "internal error in the fitplan server; the details are in the server's log"
STATIC_DIR = Path(__file__).resolve().with_name("static")
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png",
                 ".ico": "image/x-icon", ".json": "application/json"}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'")
API_KINDS = tuple(ENDPOINTS)


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict = field(default_factory=dict)


def json_response(status: int, obj) -> Response:
    return Response(status, (json.dumps(obj, sort_keys=True, indent=2, allow_nan=False) + "\n").encode())


def error_response(status: int, message: str) -> Response:
    return json_response(status, {"error": message})


def busy_response(running: int, what: str = "analyses running") -> Response:
    r = error_response(503, f"server busy: {running} {what}; try again shortly")
    r.headers["Retry-After"] = "1"
    return r


@functools.lru_cache(maxsize=8)
def _constant(payload) -> bytes:
    """The JSON of a payload that is the same for the server's whole life (the presets, the
    fields: the latter is 260 KB, ~20 ms of the serving process's time to make), made once."""
    return json_response(200, payload()).body


def presets_payload() -> dict:
    from fitplan import __version__, parts, presets
    from fitplan.presets.recipes import DEFAULT_RECIPE
    from fitplan.resolve import DEFAULT_GPU
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
            "default_recipe": DEFAULT_RECIPE, "default_gpu": DEFAULT_GPU, "features": {"compare": True},
            "limits": {"max_body_bytes": L.MAX_BODY_BYTES, "analysis_budget_s": L.ANALYSIS_BUDGET_S,
                       "analysis_workers": L.ANALYSIS_WORKERS, "light_workers": L.LIGHT_WORKERS,
                       "heavy_workers": L.HEAVY_WORKERS}, "parts": parts.payload()}



def analysis_response(endpoint: str, body, pool=None, cancelled=None) -> Response:
    """The POST /api/<endpoint> answer: validate -> Request -> fitplan.service.respond, in a worker
    of pool (an AnalysisPool or Lanes; default: one shared pair of lanes). cancelled: says the
    client went away (the page aborts a request its next input makes stale)."""
    from fitplan.web.lanes import default_lanes
    request = build_request(endpoint, body)
    pool = pool or default_lanes()
    try:
        result = pool.run(request, cancelled)
    except Cancelled:
        return error_response(503, "request: the client went away before the answer was ready")
    except Busy as err:
        return busy_response(err.running)
    except OverBudget as err:
        return error_response(503, f"request: the analysis ran past its {err.budget_s:g} s budget and was stopped; "
                                   f"ask for less (fewer sweep values, a smaller --max-cp or --micro-batch, fixed "
                                   f"--tp/--pp) or run it with the CLI")
    except WorkerLost as err:
        sys.stderr.write(f"fitplan serve: {err.detail} (retried once on a fresh worker)\n")
        return error_response(503, "request: the analysis worker process stopped unexpectedly, twice (the machine "
                                   "may be short of memory); try again shortly or run it with the CLI")
    if result[0] == "bad":
        if result[2]:
            sys.stderr.write(result[2])
        return error_response(400, result[1])
    if result[0] != "reply":
        sys.stderr.write(f"fitplan serve: {result[1]}\n")
        return error_response(500, INTERNAL_ERROR)
    exit_code, text, notes = result[1:]
    headers = {"X-Fitplan-Exit-Code": str(exit_code)}
    if endpoint == "export":
        r = json_response(200, {"exit_code": exit_code, "ok": exit_code == 0,
                                "format": request.values["format"], "text": text,
                                "notes": [f"fitplan: note: {n}" for n in notes]})
        r.headers.update(headers)
        return r
    if endpoint == "markdown":
        return Response(200, text.encode(), "text/markdown; charset=utf-8",
                        {**headers, "Content-Disposition": 'attachment; filename="fitplan.md"'})
    return Response(200, text.encode(), "application/json", headers)



def _static_files() -> dict:
    """name -> real path of each servable file in static/: a symlink is followed only when it
    ends at a file inside static/ itself, never out of the package."""
    if not STATIC_DIR.is_dir():
        return {}
    root = STATIC_DIR.resolve()
    files = {}
    for p in STATIC_DIR.iterdir():
        real = p.resolve()
        if p.suffix in CONTENT_TYPES and real.parent == root and real.is_file():
            files[p.name] = real
    return files


def _json_type(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() == "application/json"


def handle(method: str, path: str, headers, body: bytes | None, *, pool=None, cancelled=None) -> Response:
    """The whole application as one function: method, path, a headers mapping (case-insensitive
    .get, as http.server's), the already size-checked body, and the pool the analyses run in
    (an AnalysisPool or fitplan.web.lanes.Lanes; default: one shared pair of lanes), and a
    callable that says the client went away (None: never asked). Never raises."""
    try:
        route = urlsplit(path).path
        if method in ("GET", "HEAD"):
            if route in ("/", "/index.html"):
                return _static("index.html")
            if route.startswith("/static/"):
                return _static(route[len("/static/"):])
            if route == "/api/presets":
                return Response(200, _constant(presets_payload))
            if route == "/api/fields":
                return Response(200, _constant(fields_payload))
            if route.startswith("/api/") and route[5:] in API_KINDS:
                return error_response(405, f"{route}: use POST with a JSON body")
            return error_response(404, f"{route}: no such page")
        if method == "POST":
            if not (route.startswith("/api/") and route[5:] in API_KINDS):
                return error_response(404 if route != "/api/presets" else 405, f"{route}: no such API route")
            if not _json_type(headers.get("Content-Type")):
                return error_response(415, "request: send the body as application/json")
            try:
                data = json.loads((body or b"").decode("utf-8"), parse_constant=no_constants)
            except (UnicodeDecodeError, ValueError, RecursionError) as err:
                reason = err.msg if isinstance(err, json.JSONDecodeError) else err.__class__.__name__
                return error_response(400, f"request: the body is not valid JSON ({reason})")
            return analysis_response(route[5:], data, pool, cancelled)
        return error_response(405, f"{method}: not allowed; use GET or POST")
    except RequestError as err:
        return error_response(err.status, err.message)
    except Exception:    # never a stack trace to the page: log it here, one generic line there
        traceback.print_exc(file=sys.stderr)
        return error_response(500, INTERNAL_ERROR)


def _static(name: str) -> Response:
    files = _static_files()
    if name not in files:
        return error_response(404, f"/static/{name}: no such file")
    p = files[name]
    headers = {"Cache-Control": "no-cache"}
    if p.suffix == ".html":
        headers["Content-Security-Policy"] = CSP
    return Response(200, p.read_bytes(), CONTENT_TYPES[p.suffix], headers)

