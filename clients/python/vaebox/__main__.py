"""`python -m vaebox`: the `vaebox-client` command without installing it."""
import sys

from .cli import main

sys.exit(main())
