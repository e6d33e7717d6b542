"""``python -m seglog``: the command line (``seglog --help``)."""

from .cli import run

run()
