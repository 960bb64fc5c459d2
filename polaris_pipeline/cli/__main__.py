"""``python -m polaris_pipeline.cli``."""

import sys

from polaris_pipeline.cli.main import main

sys.exit(main())
