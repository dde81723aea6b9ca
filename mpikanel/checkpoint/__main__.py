"""``python -m mpikanel.checkpoint``."""
from .cli import main

raise SystemExit(main())
