"""Java for Spark: pyspark 4 runs its driver and executors on a JVM, Java 17 or
newer. Without one, starting a session fails inside pyspark's launcher with a
gateway traceback that never says what to install; ``check_java`` says it first."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from ..errors import SeglogError

MIN_JAVA = 17
_VERSION_WAIT_S = 60.0      # a JVM's start on a loaded machine takes seconds, never a minute
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')
_INSTALL = ("Install Java 17 (Debian/Ubuntu: sudo apt install openjdk-17-jre-headless; "
            "Fedora/RHEL: sudo dnf install java-17-openjdk-headless; "
            "macOS: brew install openjdk@17) or set JAVA_HOME to a Java 17+ installation")


class JavaMissingError(SeglogError):
    """No Java that Spark can run: none found, it does not start, or it is older than
    Java 17. The message names what was found and how to install Java 17."""


def _missing(what: str) -> JavaMissingError:
    return JavaMissingError(f"Spark (pyspark 4) needs Java {MIN_JAVA} or newer: {what}. "
                            f"{_INSTALL}.")


def _find() -> str:
    # the order of Spark's launcher (bin/spark-class): $JAVA_HOME/bin/java when
    # JAVA_HOME is set, else the first `java` on PATH
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not (os.path.isfile(java) and os.access(java, os.X_OK)):
            raise _missing(f"JAVA_HOME is {home}, which has no bin/java")
        return java
    found = shutil.which("java")
    if found is None:
        raise _missing("JAVA_HOME is not set and there is no java on PATH")
    return found


def java_version(java: str) -> int:
    """The major version of the Java at ``java`` (8 for "1.8.0_392", 17 for "17.0.9"),
    from ``java -version``. ``JavaMissingError`` when it does not run, fails, or
    does not say its version within a minute."""
    try:
        p = subprocess.run([java, "-version"], capture_output=True, text=True,
                           timeout=_VERSION_WAIT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise _missing(f"{java} -version did not answer within {_VERSION_WAIT_S:.0f} s") from None
    except OSError as e:
        raise _missing(f"{java} does not run ({e.strerror or e})") from None
    said = (p.stderr or "") + (p.stdout or "")
    m = _VERSION.search(said)
    if p.returncode != 0 or m is None:
        first = said.strip().splitlines()[0] if said.strip() else f"exit status {p.returncode}"
        raise _missing(f"{java} -version failed: {first}")
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major     # "1.8" is Java 8


def check_java() -> str:
    """Check that Spark can start its JVM, before ``SparkSession.builder...getOrCreate()``
    does: the Java Spark's launcher would run (``$JAVA_HOME/bin/java`` when
    ``JAVA_HOME`` is set, else ``java`` on ``PATH``) must exist and be Java 17 or
    newer. Returns that java's path. Raises ``JavaMissingError`` (a ``SeglogError``)
    whose message names what was found and how to install Java 17. Runs
    ``java -version`` once per call (a JVM start, about 0.1 s)."""
    java = _find()
    major = java_version(java)
    if major < MIN_JAVA:
        raise _missing(f"{java} is Java {major}")
    return java
