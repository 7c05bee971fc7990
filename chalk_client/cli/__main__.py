"""``python -m chalk_client.cli``: the ``chalk`` command."""

import sys

from chalk_client.cli.main import main

sys.exit(main())
