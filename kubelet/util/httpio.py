"""Reading HTTP bodies with a bound (utilio.ReadAtMost upstream)."""

from __future__ import annotations

import aiohttp


async def read_at_most(content: aiohttp.StreamReader, limit: int) -> bytes:
    """Up to `limit` bytes of the body: less only at its end."""
    buf = bytearray()
    while len(buf) < limit:
        chunk = await content.read(limit - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)
