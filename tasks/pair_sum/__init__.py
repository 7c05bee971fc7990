"""Pair sum: a problem with many right answers, graded by a checker.

Input: ``n target`` then ``n`` integers. Output: two positions ``i j``
(1-based, ``i < j``) whose numbers add up to ``target``, or ``-1`` when no two
do. Any such pair is right, so outputs are judged by ``checker.py`` (testlib's
convention: exit 0 accepted, 1 wrong answer, 2 presentation error), not
compared with one expected answer. ``tests.jsonl`` holds the tests (its
``stdout`` is one right answer, or ``-1``).
"""
