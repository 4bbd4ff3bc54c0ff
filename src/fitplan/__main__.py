import sys

from fitplan.cli import main

sys.exit(main())
