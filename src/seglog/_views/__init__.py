"""How seglog shows things to people, as pure text: one convention for numbers, sizes,
times, offsets and values (``html``), small inline SVG charts (``svg``), what a check
found said to a person (``verdict``), and the notebook views of segments, logs and
topics (``notebook``), each a function of the narrow things it shows. Nothing here
opens a file or takes a lock."""
