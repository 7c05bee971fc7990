"""Grading tasks the workers can run, one package per task.

Each package under ``tasks/`` is imported by the worker at start, so a task
registers its custom judges and rubric contexts in its ``__init__``.
"""
