"""`python -m harness ...`: the harness's commands without the web app's dependencies."""

import sys

from harness.cli import main

sys.exit(main())
