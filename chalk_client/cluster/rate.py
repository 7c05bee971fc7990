"""Pacing LLM requests across the cluster: the next free start per LLM server.

See ``chalk_worker.llm.rate`` for the limiter that uses it.
"""

from __future__ import annotations

from chalk_client.cluster.script import Script

RESERVE = Script(
    "llm-rate-reserve",
    """
-- KEYS: the server's pace key. ARGV: microseconds between request starts.
-- Reserves the next free start; returns the microseconds until it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local spacing = tonumber(ARGV[1])
local start = math.max(now, tonumber(redis.call('GET', KEYS[1]) or 0))
local after = start + spacing
redis.call('SET', KEYS[1], string.format('%.0f', after),
           'PX', math.ceil((after - now) / 1000) + 60000)
return start - now
""",
)
