"""A task whose student writes Python code, and a scoring script that runs it safely.

The student hands in ``solution.py`` defining ``fizzbuzz(n: int) -> str``.
``scoring_script`` tests it on random inputs and writes the share passed. It
never imports the student's module in its own process: a submission imported
there can write the output file (``score: 1``) and exit 0, and the worker would
take that file as the verdict. The script runs the student's code in a child
process that cannot start processes, gets its inputs on stdin and answers on
stdout; once that child is gone, the script writes its verdict over whatever
the child may have left at the output path.

``checks`` registers a custom judge, ``defines_function``, in a module of its
own name: the worker imports every module of a task package that registers.
This ``__init__`` stays empty, so that scripts start quickly.
"""
