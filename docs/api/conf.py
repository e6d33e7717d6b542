"""Sphinx configuration of seglog's API reference (built by scripts/apidoc).

autodoc imports the package itself and documents the real objects: their
signatures and type hints come from the code, so the reference cannot drift from
it. The build runs nitpicky (-n) with warnings as errors (-W): a docstring that is
not valid reStructuredText, or a type in a signature that resolves to nothing, fails
it. No intersphinx: the build reads nothing from the network, so references to the
standard library and to pyspark/pyarrow are not links (see nitpick_ignore_regex).
"""

from __future__ import annotations

import importlib.util
import os
import sys

# the checkout's package first, as the tests import it
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src")))

import seglog  # noqa: E402

project = "seglog"
author = "the seglog authors"
copyright = "the seglog authors, Apache-2.0"
version = release = seglog.__version__

extensions = ["sphinx.ext.autodoc"]
root_doc = "index"
exclude_patterns: list[str] = []
templates_path: list[str] = []
html_theme = "alabaster"
html_static_path: list[str] = []
html_theme_options = {"nosidebar": False, "fixed_sidebar": False}

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_inherit_docstrings = True
# iteration and len() are part of the contract (``for m in consumer``, ``len(log)``);
# a special method without a docstring is still left out
autodoc_default_options = {"members": True, "special-members": "__iter__, __aiter__, __len__"}
# defaults as written in the source (``1 << 20``, ``Message``), not as repr()s that
# the signature parser cannot read (``<class 'seglog._codec.records.Message'>``)
autodoc_preserve_defaults = True
# a type alias is shown (and linked) by its name, not expanded
autodoc_type_aliases = {"Headers": "seglog.message.Headers"}
add_module_names = False
toc_object_entries = True

nitpicky = True
# Names a signature mentions that have no page here: the standard library and third
# parties (no intersphinx: an offline build), and typing-only aliases written as
# strings under TYPE_CHECKING. Kept to modules and exact names, so that a seglog
# name missing from the reference still fails the build.
nitpick_ignore_regex = [
    ("py:class", r"(os|io|mmap|array|collections\.abc|concurrent\.futures|threading|random"
                 r"|socket|typing|types|enum|pathlib|_io)\.[A-Za-z_.]+"),
    ("py:class", r"(pyspark|pyarrow|pandas|numpy)(\.[A-Za-z_.]+)?"),
]
nitpick_ignore = [
    ("py:class", "StrPath"), ("py:class", "ReadableBuffer"),      # _typeshed, typing only
    ("py:class", "array"),                                         # array.array
    ("py:class", "SparkSession"), ("py:class", "SparkContext"), ("py:class", "RDD"),
    ("py:class", "StructType"), ("py:class", "DataSourceReader"),
    ("py:class", "DataSourceStreamReader"), ("py:class", "DataSourceWriter"),
    ("py:class", "DataSourceStreamWriter"),                     # pyspark, typing only
    ("py:class", "seglog._codec.decode._M"),          # the message type of codec's decoders
    # what MessageSet's file and write_to's destination must have (Protocols, typing only)
    ("py:class", "seglog._codec.messageset.SendfileSource"),
    ("py:class", "seglog._codec.messageset.HasFileno"),
    # the loader's and the prefaulter's work items, in Segment's writer interface
    ("py:class", "seglog._storage.scan.ScanResult"), ("py:class", "seglog._runtime.prefault.Prefaulter"),
]

# Classes seglog builds and users only receive (a Log by ``Log.open``, a Topic by
# ``Topic.open``, reports returned by calls): their constructors take the package's
# internals, so the reference shows no signature for them.
_BUILT_BY_OPEN = {"seglog.Log", "seglog.Topic", "seglog.cleaner.CompactionStats",
                  "seglog.recovery.RecoveryReport", "seglog.repair.WalkInfo"}


def _hide_internal_constructors(app, what, name, obj, options, signature, return_annotation):
    if what == "class" and name in _BUILT_BY_OPEN:
        return "", None
    return None


# seglog.spark.SeglogDataSource subclasses pyspark's DataSource, made on first use:
# without pyspark (a build with the dev extra alone) its part of spark.rst is left out
_HAS_PYSPARK = importlib.util.find_spec("pyspark") is not None


def _without_pyspark(app, docname, source):
    if docname == "spark" and not _HAS_PYSPARK:
        source[0] = source[0].split(".. pyspark-only:")[0]


def setup(app):
    app.connect("autodoc-process-signature", _hide_internal_constructors)
    app.connect("source-read", _without_pyspark)
