"""Fakes for tests, benchmarks and demos, shipped so users can test their own judges.

``fake_openai``: an OpenAI-compatible chat-completions server on loopback, real
HTTP through the real ``openai`` client, with latency and faults scripted.
No production code imports this package.
"""
