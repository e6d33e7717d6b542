"""Without Java 17, seglog.spark and the Spark tests fail with one message that names
Java 17 and how to install it, never pyspark's launcher traceback. Java is found as
Spark's launcher finds it: $JAVA_HOME/bin/java when JAVA_HOME is set, else PATH."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from seglog.spark import JavaMissingError, check_java

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SRC = os.path.join(ROOT, "src")


def fake_java(directory, says: str, status: int = 0) -> str:
    """A ``java`` whose ``-version`` prints ``says`` on stderr, as a JDK does."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "java")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\necho '{says}' >&2\nexit {status}\n")
    os.chmod(path, 0o755)
    return path


def no_java_env() -> dict[str, str]:
    """This environment with JAVA_HOME unset and every PATH entry that holds a java
    dropped: a machine without Java, for a child process."""
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                                  if d and not os.path.exists(os.path.join(d, "java")))
    env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(SRC)] + (
        [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    return env


def assert_says_how_to_install(message: str) -> None:
    for words in ("Java 17", "apt install openjdk-17-jre-headless", "brew install openjdk@17",
                  "JAVA_HOME"):
        assert words in message, message


def test_a_machine_without_java_gets_one_message_naming_java_17_and_how_to_install_it():
    code = "from seglog.spark import check_java; check_java()"
    p = subprocess.run([sys.executable, "-c", code], env=no_java_env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("seglog.spark._java.JavaMissingError: Spark (pyspark 4) needs Java 17")
    assert "JAVA_HOME is not set and there is no java on PATH" in last
    assert_says_how_to_install(last)


@pytest.mark.parametrize("says, major", [
    ('openjdk version "17.0.15" 2025-04-15', 17),
    ('openjdk version "21" 2023-09-19', 21),
    ('java version "1.8.0_392"', 8),
    ('openjdk version "11.0.2" 2019-01-15', 11),
])
def test_the_version_decides(tmp_path, monkeypatch, says, major):
    java = fake_java(tmp_path / "bin", says)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    if major >= 17:
        assert check_java() == java
    else:
        with pytest.raises(JavaMissingError) as e:
            check_java()
        assert f"{java} is Java {major}" in str(e.value)
        assert_says_how_to_install(str(e.value))


def test_java_home_comes_before_path_as_in_sparks_launcher(tmp_path, monkeypatch):
    on_path = fake_java(tmp_path / "path", 'openjdk version "17.0.1"')
    home = tmp_path / "jdk"
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    monkeypatch.setenv("JAVA_HOME", str(home))
    with pytest.raises(JavaMissingError) as e:       # JAVA_HOME without bin/java
        check_java()
    assert f"JAVA_HOME is {home}, which has no bin/java" in str(e.value)
    fake_java(home / "bin", 'openjdk version "11.0.2"')
    with pytest.raises(JavaMissingError, match="is Java 11"):
        check_java()
    in_home = fake_java(home / "bin", 'openjdk version "21.0.2"')
    assert check_java() == in_home != on_path


def test_a_java_that_fails_or_says_no_version_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    java = fake_java(tmp_path / "bin", "Error: could not find libjava.so", status=1)
    with pytest.raises(JavaMissingError) as e:
        check_java()
    assert f"{java} -version failed: Error: could not find libjava.so" in str(e.value)
    fake_java(tmp_path / "bin", "hello")
    with pytest.raises(JavaMissingError, match="-version failed: hello"):
        check_java()


@pytest.mark.skipif(importlib.util.find_spec("pyspark") is None, reason="needs the spark extra")
def test_the_spark_tests_without_java_fail_with_that_message_and_no_launcher_traceback():
    test = "tests/spark/test_spark.py::test_rdd_ranges_commit_only_after_the_jobs_output_succeeded"
    # -rN: no short summary, which pytest prints untruncated when CI is set (it echoes the
    # message a second time there); the count below is of what the fixture says.
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rN", "-p", "no:cacheprovider",
                        test],
                       cwd=ROOT, env=no_java_env(), capture_output=True,
                       text=True, timeout=240)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "1 error" in out and "Spark (pyspark 4) needs Java 17" in out, out
    assert_says_how_to_install(out)
    assert out.count("needs Java 17") == 1, out           # said once
    for launcher in ("JAVA_GATEWAY_EXITED", "spark-class", "Traceback", "another exception"):
        assert launcher not in out, out
