"""`python -m fitplan.web [--host H] [--port P]`: the same as `fitplan serve`."""
import sys

from fitplan.cli import main

sys.exit(main(["serve", *sys.argv[1:]]))
