import sys

from fitplan.web.server import main

sys.exit(main())
