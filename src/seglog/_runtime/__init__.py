"""What the rest of seglog runs on: the operating system's calls (``platform``: flock,
block reservation, fsync), file names and the durable file primitives (``files``:
temp file, fsync, rename, fsync of the directory), the process's background threads
(``scheduler``: one flusher and one maintenance thread; ``prefault``: the page
prefaulter), asyncio without blocking the loop (``aio``) and the producer's light
futures (``future``). No log, segment or group concept lives here."""
