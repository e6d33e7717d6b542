"""What the several-process benchmarks (``bench_threads.py``, ``bench_writers.py``)
share: their command line and the machine's load, printed beside every run (this
VM's figures move with it)."""

from __future__ import annotations

import argparse
import os


def parser(doc: str | None, n_help: str, compare_help: str) -> argparse.ArgumentParser:
    """``--n``, ``--quick`` (one run, not best of 3), ``--dir``, ``--compare DIR``
    (also run with DIR/src's seglog, the old code, in the same run)."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=400_000, help=n_help)
    ap.add_argument("--quick", action="store_true", help="one run of each, not best of 3")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--compare", default=None, metavar="DIR", help=compare_help)
    return ap


def repeats(args: argparse.Namespace) -> int:
    return 1 if args.quick else 3


def old_src(args: argparse.Namespace) -> str | None:
    """The old code's ``src`` directory (``--compare``), or None."""
    return os.path.abspath(os.path.join(args.compare, "src")) if args.compare else None


def load() -> str:
    a, b, c = os.getloadavg()
    return f"load average {a:.2f} {b:.2f} {c:.2f}"
