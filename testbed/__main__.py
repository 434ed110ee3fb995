"""``python -m quiclab.testbed …`` — the testbed command group without the main CLI."""

import sys

from quiclab.testbed.cli import main

sys.exit(main())
