"""Coverage-guided fuzzing (atheris) of the code that reads what users and students send.

One module per target, each runnable as ``python -m fuzz.NAME`` (see ``fuzz.harness``):
``unpack`` (submission archives), ``jobs`` (job records and judge files),
``transcript`` (messages and content blocks) and ``regex`` (the regex judge). Each
has a ``check(data)`` that raises when the code answers an input as its contract
forbids; ``fuzz/corpus/NAME/`` holds the seeds and every input that once failed.
"""
