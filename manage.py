#!/usr/bin/env python
"""Django's command-line utility for Qorven (same commands as `qorven …`)."""
from __future__ import annotations

import sys

from qorven.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv))
