"""`fitplan serve`: a local web page over a JSON API that never disagrees with the CLI.

One request path. The API validates the JSON body against the same declarations the CLI's
flags are generated from (fitplan.request.api_flags: a request key is a flag without its
dashes), builds the same fitplan.request.Request and answers it with the same
fitplan.service.respond, whose text is what the CLI prints:

    exit 0 or 1 -> 200, the body is the CLI's stdout byte for byte (`--json` text)
    bad input   -> 400, {"error": "<the CLI's one line, without 'fitplan: '>"}

A pasted Hugging Face config.json is read from the request itself (fitplan.files.hf.
model_from_hf_text), named "<hf_name>/config.json" in errors: nothing is written to disk.

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

Standard library only (http.server.ThreadingHTTPServer): the server needs one JSON API, a
few static files and strict input checks, which take less code here than the glue a
framework needs, and `fitplan serve` then works after a plain `pip install -e .`.

Safety: binds to 127.0.0.1 unless told otherwise (another --host prints a warning); every
request must name a loopback Host, the bound address, or a name given with --allowed-host
(DNS-rebinding guard), wherever the server listens; a request's body must have a
Content-Length of at most MAX_BODY_BYTES (else 411/413), a POST's must be application/json
(else 415), and a GET's is read and dropped; unknown fields, wrong types and out-of-range
numbers are 400s; no request reaches the file system (the declarations mark the CLI's paths,
--spec, --hf-config, --plot and --output, as not for the API), and static files are the
package's own (a symlink out of static/ is not served); every answer, errors included, is
JSON made with allow_nan=False (or the CLI's own text) with X-Content-Type-Options: nosniff;
an unexpected exception is a 500 with one generic line on the page and the traceback on the
server's stderr.

Limits (each answered with one line, never a hang):
    MAX_CONNECTIONS      connections open at once; one more is answered 503 and closed
    REQUEST_DEADLINE_S   a whole request (line, headers, body) must arrive within this many
                         seconds of the server starting to wait for it, however it trickles
                         (408, then the connection is closed; an idle keep-alive is just closed)
    ANALYSIS_WORKERS     analyses that run at once, each in its own worker process
    ANALYSIS_QUEUE       requests that may wait for a worker, at most QUEUE_WAIT_S; one more,
                         or a longer wait, is 503 {"error": "server busy: N analyses running; ..."}
    ANALYSIS_BUDGET_S    wall-clock seconds one analysis may run; past it its worker process is
                         killed and replaced, and the answer is 503 with one line

Why worker processes, not threads, for the time budget: a Python thread cannot be stopped
from outside, so a thread pool could only enforce a budget cooperatively, by a deadline the
search and sweep loops check; that needs hooks in the core (which bounds its own work with a
separate work budget) and still misses time spent inside one long NumPy call. A process can be
killed at any instant, so the budget holds whatever the analysis does, and analyses run on all
cores instead of sharing one GIL with the threads that serve the page, so a heavy analysis
does not slow a light one down. The cost is small: workers are started once (`fitplan serve`
starts them all at startup; a killed one is replaced at once) and stay alive between
requests, and only the Request and the reply's text, exit code and notes cross the pipe. As
with any use of multiprocessing, a program that embeds make_server must guard its own top
level with `if __name__ == "__main__":` (the `fitplan` command and `python -m fitplan.web` are).
"""
from __future__ import annotations

import io
import ipaddress
import json
import math
import multiprocessing
import re
import signal
import socket
import sys
import threading
import time
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
WILDCARD_HOSTS = {"", "0.0.0.0", "::"}
MAX_CONNECTIONS = 32          # connections open at once
REQUEST_DEADLINE_S = 15.0     # to receive one whole request: line, headers and body
WRITE_TIMEOUT_S = 15.0        # to send one answer to a client that does not read
ANALYSIS_WORKERS = 4          # analyses at once, one worker process each
ANALYSIS_QUEUE = 8            # requests that may wait for a free worker
QUEUE_WAIT_S = 5.0            # the longest such wait
ANALYSIS_BUDGET_S = 10.0      # wall-clock seconds one analysis may run
OUT_OF_RANGE = ("request: these inputs take the arithmetic out of range (a result is not a finite number); "
                "check the smallest and largest values given")
HOST_NAME = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
                       r"[A-Za-z0-9])?)*")

HF_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
HF_FIELDS = ("hf_config", "hf_name")   # the pasted config.json (text or object) and its folder name
MAX_TEXT = 100                         # characters in a text field
MAX_ITEMS = 64                         # items in a list field
# endpoint -> (the command it answers, the output format it asks for)
ENDPOINTS = {"plan": ("plan", "json"), "markdown": ("plan", "markdown"), "sweep": ("sweep", "json"),
             "export": ("export", None), "compare": ("compare", "json"), "infer": ("infer", "json")}


class RequestError(Exception):
    """A request the server refuses before fitplan sees it: (HTTP status, one line)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


# ---------------------------------------------------------------- the request schema

def schema(endpoint: str) -> dict:
    """Request key -> fitplan.specs.declare.Flagged, for one endpoint: every declared flag
    of its command that the API takes."""
    from fitplan.request import api_flags
    flags = api_flags(ENDPOINTS[endpoint][0])
    for f in list(flags.values()):
        if f.off_key is not None:     # "no_dropout": true is "dropout": false, as the flag --no-dropout
            flags[f.off_key] = f
    return flags


def fields_payload() -> dict:
    """GET /api/fields: each endpoint's fields, for the page's form and for clients."""
    from fitplan.specs.declare import UNIT_KINDS
    out = {}
    for endpoint in ENDPOINTS:
        items = []
        for key, f in schema(endpoint).items():
            if key == f.off_key:
                continue
            d = f.decl
            items.append({"key": key, "flag": f.flag, "off_flag": f.off_flag, "kind": d.kind, "group": d.group,
                          "help": d.help, "root": f.path[0],
                          "unit": d.unit or UNIT_KINDS.get(d.kind, ""),
                          "choices": list(map(str, d.choice_values)) or None, "min": d.lo, "max": d.hi,
                          "required": f.required,
                          "example": _plain(d.example)})
        out[endpoint] = items
    return out


def _plain(value):
    from fitplan.specs.declare import enum_value
    return list(value) if isinstance(value, tuple) else enum_value(value)


def _type_name(value) -> str:
    return {bool: "true/false", int: "a whole number", float: "a number", str: "text", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _show(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _bad_type(name: str, what: str, value) -> RequestError:
    return RequestError(400, f"request: '{name}' must be {what}, got {_type_name(value)} {_show(value)}")


def _int(name: str, value) -> int:
    if isinstance(value, float) and value.is_integer():
        return int(value)      # JSON 16.0 is 16
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad_type(name, "a whole number", value)
    return value


def _text(name: str, value) -> str:
    if not isinstance(value, str):
        raise _bad_type(name, "text", value)
    if not value.strip():
        raise RequestError(400, f"request: '{name}' is empty; leave it out or give a value")
    if len(value) > MAX_TEXT:
        raise RequestError(400, f"request: '{name}' is longer than {MAX_TEXT} characters")
    if not value.isprintable():
        raise RequestError(400, f"request: '{name}' holds a control character or line break; remove it")
    return value


def _bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise _bad_type(name, "true or false", value)
    return value


def _number(name: str, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad_type(name, "a number", value)
    return value


def _count(name: str, value):
    """A count: a whole number, or text with a suffix ("15T"), read by fitplan.units.parse_count."""
    return _int(name, value) if isinstance(value, (int, float)) and not isinstance(value, bool) else _text(name, value)


def _ints(name: str, value) -> tuple:
    if not isinstance(value, list) or not value:
        raise _bad_type(name, "a non-empty list of whole numbers", value)
    if len(value) > MAX_ITEMS:
        raise RequestError(400, f"request: '{name}' has {len(value)} items; give at most {MAX_ITEMS}")
    return tuple(_int(f"{name}[{i}]", v) for i, v in enumerate(value))


def _choice(name: str, value):
    """A choice's value is checked against its declaration by fitplan (the CLI's line); here its type."""
    return _int(name, value) if isinstance(value, (int, float)) and not isinstance(value, bool) else _text(name, value)


# JSON type per declared kind; the meaning (ranges, choices, units, presets) is fitplan's own check,
# shared with the CLI, so its one line reaches the page.
_READ = {"int": _int, "number": _number, "str": _text, "size": _text, "rate": _text, "seconds": _text,
         "power": _text, "count": _count, "recipe": _text, "gpu": _text, "enum": _text, "choice": _choice, "bool": _bool, "moments": _number,
         "ints": _ints}


def _hf_part(body: dict) -> tuple[str | None, str]:
    """The pasted config.json as text, and the name it is read under (the model's name)."""
    name = body.get("hf_name")
    if name is None:
        name = "hf-model"
    elif not isinstance(name, str) or not HF_NAME.fullmatch(name):
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


def build_request(endpoint: str, body):
    """The fitplan.request.Request for a JSON body. Raises RequestError(400) on a bad body."""
    from fitplan.request import Request
    if not isinstance(body, dict):
        raise RequestError(400, f"request: the body must be a JSON object {{...}}, got {_type_name(body)}")
    flags = schema(endpoint)
    allowed = set(flags) | set(HF_FIELDS)
    unknown = sorted(k for k in body if k not in allowed)
    if unknown:
        raise RequestError(400, f"request: unknown field {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}")
    command, fmt = ENDPOINTS[endpoint]
    values = {}
    for key, f in flags.items():
        value = body.get(key)
        if value is None:
            continue
        value = _READ[f.decl.kind](key, value)
        if key == f.off_key:      # "no_dropout": true -> dropout false; false says nothing
            if value:
                values[f.key] = False
            continue
        if f.decl.kind == "bool" and f.off_key is None and not value:
            continue              # a store-true flag given as false is the flag left out
        values[f.key] = value
    missing = [key for key, f in flags.items() if f.required and key not in values]
    if missing:
        choices = ", ".join(map(str, flags[missing[0]].decl.choice_values))
        raise RequestError(400, f"request: '{missing[0]}' is required: {choices}")
    if fmt is not None:
        values["format"] = fmt
    hf_text, hf_name = _hf_part(body)
    return Request(command=command, values=values, hf_text=hf_text, hf_name=hf_name)


# ---------------------------------------------------------------- the application

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
            "limits": {"max_body_bytes": MAX_BODY_BYTES, "analysis_budget_s": ANALYSIS_BUDGET_S,
                       "analysis_workers": ANALYSIS_WORKERS}, "parts": parts.payload()}



# ---------------------------------------------------------------- the analyses: a pool of worker processes

class Busy(Exception):
    """Every worker is taken and the queue is full (or the wait for a worker ran out)."""

    def __init__(self, running: int):
        super().__init__(running)
        self.running = running


class OverBudget(Exception):
    """The analysis ran past its time budget; its worker was killed."""

    def __init__(self, budget_s: float):
        super().__init__(budget_s)
        self.budget_s = budget_s


def run_analysis(request) -> tuple:
    """In a worker process: one Request -> a small picklable result.
        ("reply", exit_code, text, notes)   what the CLI prints
        ("bad", line, traceback or None)    a 400: the CLI's one line (or OUT_OF_RANGE)
    An ArithmeticError, or a JSON answer holding NaN or infinity, means the inputs drove the
    numbers out of range: a 400, never a 500 or a 200 with NaN (the traceback goes to the log)."""
    from fitplan.errors import SpecError, one_line
    from fitplan.service import respond
    try:
        reply = respond(request)
    except SpecError as err:
        return ("bad", f"fitplan: {one_line(str(err))}", None)
    except ArithmeticError:
        return ("bad", OUT_OF_RANGE, traceback.format_exc())
    if request.values.get("format") == "json" and not _finite_json(reply.text):
        return ("bad", OUT_OF_RANGE, None)
    return ("reply", reply.exit_code, reply.text, tuple(reply.notes))


def _finite_json(text: str) -> bool:
    try:
        json.loads(text, parse_constant=_no_constants)
    except ValueError:
        return False
    return True


def _worker_main(conn, target) -> None:
    """A worker process: answer jobs from the pipe until it closes. Ctrl-C is the server's to
    handle; the worker ends when the server closes the pipe or kills it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        try:
            result = target(job)
        except BaseException:     # noqa: B036 -- anything the analysis raises is reported, not fatal
            result = ("crash", traceback.format_exc())
        try:
            conn.send(result)
        except (EOFError, OSError):
            return
        except Exception:         # an unpicklable result
            conn.send(("crash", traceback.format_exc()))


def _context():
    """spawn: a fresh interpreter per worker (fork+exec, so forking this threaded process is never
    a question), given this process's sys.path before it imports anything, so a worker runs the
    very fitplan the server imported. (Python 3.11's forkserver imports its preloads before it
    applies sys.path, which can load another copy of fitplan.) The cost is a few tenths of a
    second per worker start: at `fitplan serve` startup and after a worker is killed."""
    return multiprocessing.get_context("spawn")


class _Worker:
    def __init__(self, ctx, target):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, target), daemon=True,
                                   name="fitplan-analysis")
        self.process.start()
        child.close()

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.join(5)
        except (OSError, ValueError, AssertionError):
            pass
        self.conn.close()


class AnalysisPool:
    """A fixed number of worker processes, a bounded queue in front of them, and a wall-clock
    budget per analysis. `run` answers at once with Busy when the queue is full, with Busy
    after queue_wait_s without a free worker, with OverBudget (the worker killed and a fresh
    one started) after budget_s, else with the worker's result (see run_analysis)."""

    def __init__(self, workers: int = ANALYSIS_WORKERS, queue: int = ANALYSIS_QUEUE,
                 budget_s: float = ANALYSIS_BUDGET_S, queue_wait_s: float = QUEUE_WAIT_S, target=run_analysis):
        self.workers, self.queue, self.budget_s, self.queue_wait_s = workers, queue, budget_s, queue_wait_s
        self.target = target
        self.running = 0          # analyses in a worker now
        self._admitted = 0        # running + waiting
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._slots = threading.Semaphore(workers)
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._closed = False
        self._ctx = None

    def start(self) -> None:
        """Start every worker now rather than on first use (`fitplan serve` does)."""
        started = [self._new_worker() for _ in range(self.workers - len(self._all))]
        with self._lock:
            self._idle.extend(started)

    def run(self, request):
        with self._lock:
            if self._closed or self._admitted >= self.workers + self.queue:
                raise Busy(self.running)
            self._admitted += 1
        try:
            if not self._slots.acquire(timeout=self.queue_wait_s):
                raise Busy(self.running)
            try:
                return self._run(request)
            finally:
                self._slots.release()
        finally:
            with self._lock:
                self._admitted -= 1

    def _run(self, request):
        worker = self._checkout()
        done = False
        try:
            try:
                worker.conn.send(request)
                if not worker.conn.poll(self.budget_s):
                    raise OverBudget(self.budget_s)
                result = worker.conn.recv()
            except (EOFError, OSError) as err:     # the worker died (killed from outside, out of memory)
                return ("crash", f"the analysis worker process ended: {err!r} (exit code {worker.process.exitcode})")
            done = True
            return result
        finally:
            with self._lock:
                self.running -= 1
                keep = done and not self._closed
                if keep:
                    self._idle.append(worker)
                else:
                    self._all.discard(worker)
            if not keep:
                worker.kill()
                self._replace()

    def _replace(self) -> None:
        """Start a worker in place of a killed one now, so the next request does not wait for it."""
        if self._closed:
            return
        try:
            worker = self._new_worker()
        except OSError:
            return                   # the next request tries again
        with self._lock:
            if self._closed:
                self._all.discard(worker)
            else:
                self._idle.append(worker)
                return
        worker.kill()

    def _checkout(self) -> _Worker:
        with self._lock:
            self.running += 1
            while self._idle:
                worker = self._idle.pop()
                if worker.process.is_alive():
                    return worker
                self._all.discard(worker)
        try:
            return self._new_worker()
        except BaseException:
            with self._lock:
                self.running -= 1
            raise

    def _new_worker(self) -> _Worker:
        with self._start_lock:
            if self._ctx is None:
                self._ctx = _context()
            worker = _Worker(self._ctx, self.target)
        with self._lock:
            self._all.add(worker)
        return worker

    def close(self) -> None:
        """Kill every worker, busy or not; a later run is Busy."""
        with self._lock:
            self._closed = True
            workers, self._idle = list(self._all), []
            self._all.clear()
        for w in workers:
            w.kill()


_default_pool: AnalysisPool | None = None
_default_lock = threading.Lock()


def default_pool() -> AnalysisPool:
    """The pool `handle` uses when it is called without one (the app as a plain function)."""
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            _default_pool = AnalysisPool()
        return _default_pool


def analysis_response(endpoint: str, body, pool: AnalysisPool | None = None) -> Response:
    """The POST /api/<endpoint> answer: validate -> Request -> fitplan.service.respond, in a worker."""
    request = build_request(endpoint, body)
    pool = pool or default_pool()
    try:
        result = pool.run(request)
    except Busy as err:
        return busy_response(err.running)
    except OverBudget as err:
        return error_response(503, f"request: the analysis ran past its {err.budget_s:g} s budget and was stopped; "
                                   f"ask for less (fewer sweep values, a smaller --max-cp or --micro-batch, fixed "
                                   f"--tp/--pp) or run it with the CLI")
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


API_KINDS = tuple(ENDPOINTS)


def _json_type(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() == "application/json"


def handle(method: str, path: str, headers, body: bytes | None, *, pool: AnalysisPool | None = None) -> Response:
    """The whole application as one function: method, path, a headers mapping (case-insensitive
    .get, as http.server's), the already size-checked body, and the pool the analyses run in
    (default: one shared pool). Never raises."""
    try:
        route = urlsplit(path).path
        if method in ("GET", "HEAD"):
            if route in ("/", "/index.html"):
                return _static("index.html")
            if route.startswith("/static/"):
                return _static(route[len("/static/"):])
            if route == "/api/presets":
                return json_response(200, presets_payload())
            if route == "/api/fields":
                return json_response(200, fields_payload())
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
            return analysis_response(route[5:], data, pool)
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

class _RequestDeadline(Exception):
    """The whole request did not arrive in time (not a TimeoutError: http.server would swallow that)."""


class _DeadlineReader(io.RawIOBase):
    """The socket as a raw stream whose every read shares one deadline per request, so a client
    trickling a byte at a time cannot hold a connection longer than the deadline."""

    def __init__(self, sock):
        self.sock = sock
        self.deadline = math.inf
        self.received = 0          # bytes read since begin()

    def begin(self, seconds: float) -> None:
        self.deadline, self.received = time.monotonic() + seconds, 0

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
        self._reader.begin(getattr(self.server, "request_deadline_s", REQUEST_DEADLINE_S))
        self.requestline, self.request_version, self.command = "", self.protocol_version, None
        try:
            super().handle_one_request()
        except _RequestDeadline:
            self.close_connection = True
            if self._reader.received:       # a request had begun: say why it is cut off
                seconds = getattr(self.server, "request_deadline_s", REQUEST_DEADLINE_S)
                self._send(error_response(408, f"request: not received within {seconds:g} s; "
                                               f"the connection is closed"), write_timeout=1.0)

    def do_GET(self):
        self._answer(self.command)

    # every other method, TRACE and CONNECT too, gets handle's JSON 405 (an unknown one a JSON 501)
    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = do_GET

    def _answer(self, method: str):
        body = self._body(method)
        if body is None:
            return
        if not self._host_ok():
            return self._send(error_response(403, "request: this server answers only to a loopback Host "
                                                  "(127.0.0.1 or localhost) and the names given with "
                                                  "--allowed-host"))
        self._send(handle(method, self.path, self.headers, body if method == "POST" else None,
                          pool=getattr(self.server, "pool", None)), head=method == "HEAD")

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
        if size > MAX_BODY_BYTES:
            self._discard(size)
            return self._refuse(413, f"request: the body is {size:,} bytes; the limit is "
                                     f"{MAX_BODY_BYTES:,} bytes ({MAX_BODY_BYTES // 1024} KiB)")
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
        """Read and drop a refused body (up to DISCARD_LIMIT), so the client sees the 413 rather
        than a reset connection; beyond that the connection is simply closed."""
        if size > DISCARD_LIMIT:
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
        return host_name(hosts[0]) in getattr(self.server, "allowed_hosts", LOOPBACK_NAMES)

    def _send(self, r: Response, head: bool = False, write_timeout: float = WRITE_TIMEOUT_S):
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
        if not getattr(self.server, "quiet", False):
            super().log_message(format, *args)


def host_name(header: str) -> str:
    """The name in a Host header, lower case, without port or IPv6 brackets."""
    header = header.strip()
    if header.startswith("["):
        return header[1:].split("]", 1)[0].lower()
    return header.rsplit(":", 1)[0].lower() if header.count(":") == 1 else header.lower()


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
    daemon_threads = True
    block_on_close = False      # closing does not wait for a slow client (the deadline ends it anyway)
    allow_reuse_address = True
    request_queue_size = 2 * MAX_CONNECTIONS   # listen backlog: socketserver's 5 drops a burst's SYNs (1 s retries)

    def __init__(self, address, *, quiet: bool = False, allowed_hosts=(), pool: AnalysisPool | None = None,
                 max_connections: int = MAX_CONNECTIONS, request_deadline_s: float = REQUEST_DEADLINE_S):
        host = address[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)
        self.quiet = quiet
        self.loopback_only = is_loopback(host)
        self.allowed_hosts = set(LOOPBACK_NAMES) | {allowed_host(h) for h in allowed_hosts}
        if host not in WILDCARD_HOSTS:
            self.allowed_hosts.add(host.lower())    # the address it was asked to listen on
        self.pool = pool or AnalysisPool()
        self.max_connections, self.request_deadline_s = max_connections, request_deadline_s
        self.connections = 0
        self._connections_lock = threading.Lock()

    def process_request(self, request, client_address):
        with self._connections_lock:
            full = self.connections >= self.max_connections
            if not full:
                self.connections += 1
        if full:
            return self._refuse(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._closed_one()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed_one()

    def _closed_one(self):
        with self._connections_lock:
            self.connections -= 1

    def _refuse(self, request) -> None:
        """Over the connection cap: one 503 line, written from the accepting thread without
        waiting on the client, and the connection closed."""
        r = busy_response(self.max_connections, "connections open")
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
    pool, max_connections, request_deadline_s (FitplanServer's keywords)."""
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
