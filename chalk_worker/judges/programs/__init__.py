"""Programs judged by test cases: the parts of the ``tests`` judge.

``languages`` (how each language builds and runs, which this worker has),
``source`` (which program to run), ``cases`` (the test cases), ``runner``
(one program's builds and runs in a sandbox session), ``compare`` (outputs
against expected ones), ``builds`` (the cache of built programs). The
evaluator is ``chalk_worker.judges.tests``.
"""
