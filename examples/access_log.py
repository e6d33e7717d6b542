"""Realistic event data for the demo and the benchmarks: JSON-ish HTTP access-log lines.

Deterministic for a seed, so runs are comparable.
"""

from __future__ import annotations

import random
from typing import Iterator

_PATHS = ["/", "/login", "/logout", "/cart", "/checkout", "/api/v1/items", "/api/v1/items/{id}",
          "/api/v1/users/{id}", "/api/v1/orders", "/api/v1/orders/{id}", "/static/app.{id}.js",
          "/static/style.{id}.css", "/search", "/health", "/metrics"]
_METHODS = ["GET"] * 8 + ["POST"] * 2 + ["PUT", "DELETE"]
_STATUS = [200] * 40 + [201] * 3 + [204, 301, 302, 304] + [400, 401, 403] + [404] * 3 + [500, 503]
_AGENTS = ["Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0",
           "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) Safari/605.1.15",
           "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/126.0",
           "curl/8.5.0", "python-requests/2.32.3", "Go-http-client/2.0"]


def access_log_lines(n: int, seed: int = 7, start_ms: int = 1_790_000_000_000
                     ) -> Iterator[tuple[int, bytes]]:
    """(timestamp_ms, line) pairs: n access-log events about 2 ms apart."""
    rnd = random.Random(seed)
    ts = start_ms
    for i in range(n):
        ts += rnd.randint(0, 4)
        path = rnd.choice(_PATHS).replace("{id}", str(rnd.randint(1, 50_000)))
        line = (f'{{"ts":{ts},"ip":"10.{rnd.randint(0, 255)}.{rnd.randint(0, 255)}.'
                f'{rnd.randint(1, 254)}","method":"{rnd.choice(_METHODS)}","path":"{path}",'
                f'"status":{rnd.choice(_STATUS)},"bytes":{rnd.randint(0, 60_000)},'
                f'"ms":{rnd.randint(1, 900)},"ua":"{rnd.choice(_AGENTS)}",'
                f'"req":"{rnd.getrandbits(64):016x}"}}')
        yield ts, line.encode()
