"""``python -m similearn ...``: same as the ``similearn`` command."""
import sys

from .cli import main

sys.exit(main())
