"""Where a rubric judge's LLM calls go: the ``openai`` client, its limits, its verdicts.

``client`` (the server, the pool of concurrent requests, retries), ``verdicts``
(asking one criterion, reading YES or NO), ``verdict_cache`` (verdicts
remembered here and, on a cluster, in Redis), ``rate`` (requests per minute,
here or for the whole cluster), ``loop_redis`` (a Redis client per event loop).
"""
