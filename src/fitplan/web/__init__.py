"""`fitplan serve`: a local web page over a JSON API answered by the CLI's own request path (see server.py)."""
from fitplan.web.app import handle
from fitplan.web.server import DEFAULT_HOST, DEFAULT_PORT, make_server, serve

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "handle", "make_server", "serve"]
