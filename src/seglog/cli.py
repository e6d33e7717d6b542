"""The ``seglog`` command: inspect, check, repair and tend logs and topics.

    seglog dump PATH [--from OFF] [--to OFF] [--print-data] [--deep]
    seglog verify PATH|ROOT
    seglog recover PATH [--truncate-at-damage] [--yes]
    seglog stats PATH|ROOT
    seglog tail PATH|ROOT [TOPIC] [-f] [-n N] [--from-time ISO8601]
    seglog groups ROOT [GROUP]
    seglog compact PATH
    seglog retention PATH [--dry-run]

Every subcommand takes ``--json`` (one JSON document on stdout, or one per line for
``tail``). PATH is a log directory; ROOT a directory of topics (``<topic>-<p>``
partition logs). Reading commands take no lock and work beside a live writer.

Offsets are printed as Kafka prints them: a range is first..last, both included
(``offsets 0..962``); an end offset (one past the last, the next to assign) is
called one. JSON has ``start_offset``, ``last_offset`` and ``end_offset``. Counts
carry separators (``30,021``), sizes units, times are ISO with a Z. Bytes are the
bytes of stored batches; a writer's preallocated space is reported apart, as
reserved. Tables fit the terminal (80 columns when piped).

Exit codes: 0 done (verify, recover: no damage); 1 damage found, or recovery
refused; 2 bad usage; 3 not a seglog log or topic root; 4 a writer holds the log
(recover, compact, retention need it); 5 cut not confirmed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from typing import IO, Sequence

from ._cli.groups import cmd_groups
from ._cli.inspect import cmd_dump, cmd_stats, cmd_tail, cmd_verify
from ._cli.maintain import cmd_compact, cmd_recover, cmd_retention
from ._cli.output import EXIT_DAMAGE, EXIT_LOCKED, EXIT_NOT_A_LOG, EXIT_OK, EXIT_USAGE
from .errors import (CorruptRecordError, InvalidConfigError, LogLockedError, NotALogError,
                     SeglogError)


def _version() -> str:
    try:
        return importlib.metadata.version("seglog")
    except importlib.metadata.PackageNotFoundError:   # run from a source tree
        return "(not installed)"


# -- the parser ------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    doc = __doc__.replace("``", "")          # reST literals read as plain text in a terminal
    ap = argparse.ArgumentParser(prog="seglog", description=doc.split("\n\n")[0],
                                 epilog=doc.split("\n\n", 1)[1], formatter_class=fmt)
    ap.add_argument("--version", action="version", version=f"seglog {_version()}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help: str, examples: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, formatter_class=fmt,
                           epilog="examples:\n" + examples)
        p.add_argument("--json", action="store_true", help="print JSON for machines")
        return p

    p = add("dump", "Batches of a log's segments as kafka-dump-log shows them",
            "  seglog dump data/events\n"
            "  seglog dump data/events --from 1000 --to 1010 --print-data\n"
            "  seglog dump data/events --deep --json")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--from", dest="from_offset", type=int, help="first offset to show")
    p.add_argument("--to", dest="to_offset", type=int, help="show offsets below this")
    p.add_argument("--print-data", action="store_true", help="show the records too")
    p.add_argument("--deep", action="store_true", help="check the index files too")
    p.add_argument("--max-bytes", type=int, default=64, help="cut values at (default 64)")

    p = add("verify", "Read every batch and index entry; exit 1 on damage",
            "  seglog verify data/events\n  seglog verify data          # every partition of "
            "every topic\n  seglog verify data --json")
    p.add_argument("path", metavar="PATH|ROOT")

    p = add("recover", "Run recovery, report what it did, then read every batch; cut at "
                       "damage on request",
            "  seglog recover data/events\n"
            "  seglog recover data/events --truncate-at-damage        # shows, then asks\n"
            "  seglog recover data/events --truncate-at-damage --yes")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--truncate-at-damage", action="store_true",
                   help="cut the log at its first bad batch (after confirmation): the "
                        "way out when the library refuses to open it")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    p = add("stats", "Segments, bytes, messages, offsets, time span, compression, keys",
            "  seglog stats data/events\n  seglog stats data --json")
    p.add_argument("path", metavar="PATH|ROOT")

    p = add("tail", "The last messages of a log or topic; -f follows",
            "  seglog tail data/events -n 20\n  seglog tail data orders -f\n"
            "  seglog tail data orders --from-time 2026-11-23T10:00:00Z --json")
    p.add_argument("path", metavar="PATH|ROOT")
    p.add_argument("topic", metavar="TOPIC", nargs="?")
    p.add_argument("-f", "--follow", action="store_true", help="wait for new messages")
    p.add_argument("-n", type=int, default=None,
                   help="at most the last N messages per partition (default 10; with "
                        "--from-time, all from that time)")
    p.add_argument("--from-time", help="start at the first message at/after this time")
    p.add_argument("--max-bytes", type=int, default=200, help="cut values at (default 200)")

    p = add("groups", "Consumer groups: members, generation, owner, committed, end, lag",
            "  seglog groups data\n  seglog groups data billing\n  seglog groups data billing "
            "--json")
    p.add_argument("root", metavar="ROOT")
    p.add_argument("group", metavar="GROUP", nargs="?")

    p = add("compact", "Compact a log now (cleanup_policy must include compact)",
            "  seglog compact data/users")
    p.add_argument("path", metavar="PATH")

    p = add("retention", "Delete the segments retention says are due",
            "  seglog retention data/events --dry-run\n  seglog retention data/events")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--dry-run", action="store_true", help="say what would go; delete nothing")
    return ap


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None,
         stdin: IO[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    out = out or sys.stdout
    a = _parser().parse_args(argv)
    for name, flag in (("n", "-n"), ("max_bytes", "--max-bytes"), ("from_offset", "--from"),
                       ("to_offset", "--to")):
        if getattr(a, name, 1) is not None and getattr(a, name, 1) < 0:
            sys.stderr.write(f"seglog: {flag} must be >= 0\n")
            return EXIT_USAGE
    try:
        if a.command == "recover":
            return cmd_recover(a, out, stdin or sys.stdin)
        return {"dump": cmd_dump, "verify": cmd_verify, "stats": cmd_stats, "tail": cmd_tail,
                "groups": cmd_groups, "compact": cmd_compact,
                "retention": cmd_retention}[a.command](a, out)
    except NotALogError as e:
        sys.stderr.write(f"seglog: {e}\n")
        return EXIT_NOT_A_LOG
    except LogLockedError as e:
        sys.stderr.write(f"seglog: {e}\n")
        return EXIT_LOCKED
    except InvalidConfigError as e:
        sys.stderr.write(f"seglog: {e}\n")
        return EXIT_USAGE
    except CorruptRecordError as e:
        sys.stderr.write(f"seglog: damage: {e}\n")
        return EXIT_DAMAGE
    except BrokenPipeError:        # `seglog dump ... | head`
        return EXIT_OK
    except (SeglogError, OSError) as e:
        sys.stderr.write(f"seglog: {e}\n")
        return EXIT_DAMAGE


def run() -> None:
    """The console script."""
    sys.exit(main())
