from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def logdir(tmp_path):
    return str(tmp_path / "log")


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for every Spark test of the run, with the "seglog"
    format registered (test_spark.py, test_spark_sink.py)."""
    pytest.importorskip("pyspark")
    from seglog import spark as sgs
    # without Java 17 the session would fail in pyspark's launcher with a gateway
    # traceback: fail with the one message that says what to install instead
    missing = None
    try:
        sgs.check_java()
    except sgs.JavaMissingError as e:
        missing = str(e)
    if missing is not None:          # outside the except: no chained copy of the message
        pytest.fail(missing, pytrace=False)
    # workers must run this interpreter: it is the one with seglog installed
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master("local[2]").appName("seglog-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    sgs.register(session)
    yield session
    session.stop()
