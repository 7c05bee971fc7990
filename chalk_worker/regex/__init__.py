"""Regex judges' searches, run in helper processes that can be killed at a time limit.

``pool`` keeps the helpers and hands them searches; ``search`` is what a helper runs.
"""
