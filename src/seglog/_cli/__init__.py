"""The ``seglog`` command's parts, below ``seglog.cli`` (which parses the arguments):
what it says (``output``), what a path is (``paths``), the reading commands
(``inspect``), Kafka's own directories (``kafka``), the group view (``groups``) and the
commands that change a log (``maintain``)."""
