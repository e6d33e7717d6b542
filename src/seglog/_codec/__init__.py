"""The byte format and the messages made from it: the batch header, attribute bits,
checksum and framing (``format``, the one definition of the layout), encoding
(``encode``) and decoding (``decode``) as pure functions over bytes, records in and
messages out (``records``), columns and Arrow (``columns``, ``arrow_batches``), and
``MessageSet`` (``messageset``). ``seglog.codec`` and ``seglog.message`` are the faces
users import; seglog's own modules import these directly."""
