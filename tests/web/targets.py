"""Analysis targets for test pools. A worker process imports this module by name to run them, so
it stays light: no pytest, nothing but the standard library and fitplan."""
import time


def crash(request):
    """A bug in the analysis: the worker reports it, the page gets one generic line."""
    raise ZeroDivisionError("secret detail")


def sleep(request):
    """An analysis that never finishes on its own: only the time budget ends it."""
    time.sleep(3600)


def no_disk(request):
    """The real analysis with every way to write a temporary file or a text file refused, in the
    worker process where the analysis really runs."""
    import tempfile
    from pathlib import Path

    from fitplan.web.worker import run_analysis

    def refuse(*a, **k):
        raise AssertionError("the server wrote to disk")

    for name in ("TemporaryDirectory", "mkdtemp", "mkstemp", "NamedTemporaryFile"):
        setattr(tempfile, name, refuse)
    Path.write_text = refuse
    return run_analysis(request)


def slow(request):
    """The real analysis, two seconds late: time for a test to kill the worker mid-request."""
    from fitplan.web.worker import run_analysis
    time.sleep(2)
    return run_analysis(request)


def die(request):
    """A worker that dies mid-request, every time (as the out-of-memory killer would end it)."""
    import os
    import signal
    os.kill(os.getpid(), signal.SIGKILL)
