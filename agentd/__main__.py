"""`python -m agentd …` is `agentd …`."""

import sys

from agentd.cli import main

sys.exit(main())
