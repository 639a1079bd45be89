import sys

from trainop_core.cli.main import main

sys.exit(main())
