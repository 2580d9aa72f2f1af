"""``python -m rltel.cli``: the ``rltel`` command."""

import sys

from rltel.cli import main

sys.exit(main())
