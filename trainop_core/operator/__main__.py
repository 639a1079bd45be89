"""`python -m trainop_core.operator [flags]`: the same flags as `trainop operator`."""

import sys

from trainop_core.operator.run import main

sys.exit(main())
