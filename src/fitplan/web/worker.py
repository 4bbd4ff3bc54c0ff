"""What runs inside an analysis worker process (fitplan.web.pool starts and feeds them): import
fitplan, say so, then answer each Request from the pipe with fitplan.service.respond, as a
small picklable result."""
import json
import os
import signal
import traceback

from fitplan.web.schema import no_constants

READY = "ready"      # a new worker's first message
OUT_OF_RANGE = ("request: these inputs take the arithmetic out of range (a result is not a finite number); "
                "check the smallest and largest values given")


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
    if request.values.get("format") == "json" and not finite_json(reply.text):
        return ("bad", OUT_OF_RANGE, None)
    return ("reply", reply.exit_code, reply.text, tuple(reply.notes))


def finite_json(text: str) -> bool:
    try:
        json.loads(text, parse_constant=no_constants)
    except ValueError:
        return False
    return True


def worker_main(conn, target, batch: bool) -> None:
    """A worker process: import fitplan's analyses, say it is ready, then answer jobs from the
    pipe until it closes. Ctrl-C is the server's to handle; the worker ends when the server
    closes the pipe or kills it. batch: run under SCHED_BATCH (Linux, sched(7): CPU-bound work
    that a waking interactive process preempts; the same CPU share as any process otherwise)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if batch and hasattr(os, "SCHED_BATCH"):
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:
            pass      # not permitted here: the worker runs as any process does
    import fitplan.service  # noqa: F401 -- imported before the first job, so no budget pays for it
    conn.send(READY)
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
