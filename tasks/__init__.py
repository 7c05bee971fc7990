"""Grading tasks the workers can run, one package per task.

The worker imports each package under ``tasks/``, its ``judges`` and
``contexts`` modules, and every other module of it that calls
``register_judge`` or ``register_context`` (scoring scripts are not imported:
they run sandboxed, as ``python -m tasks.<task>.<script>``).
"""
