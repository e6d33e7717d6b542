"""Consumer groups coordinated by files and ``flock``, below ``seglog.consumer_group``:
the group's files and locks (``files``), its critical sections (``ops``), the
assignors (``assignors``), one consumer's partitions and positions (``assignment``, the
one owner of them), its membership (``membership``), what it knows of its topics
(``topic_watch``), what it reads (``fetch``), its checked arguments (``args``), the
admin calls (``admin``) and the operator's view of a group (``view``)."""
