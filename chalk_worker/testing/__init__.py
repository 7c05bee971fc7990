"""Fakes for tests, benchmarks and demos, shipped so users can test their own judges.

``fake_openai``: an OpenAI-compatible chat-completions server on loopback, real
HTTP through the real ``openai`` client, with latency and faults scripted.
``redis_server``: a private redis-server on a free port. ``network``: hosts in
network namespaces on one machine, links cut, healed and slowed (``link``, a
user-space emulator of delay and loss). No production code imports this package.
"""
