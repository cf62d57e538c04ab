"""`python -m vaebox`: the `vaebox` command without installing it."""
import sys

from .cli import main

sys.exit(main())
