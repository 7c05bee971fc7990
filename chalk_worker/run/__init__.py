"""One job's run, and the embedded queue: no Redis, kombu or Celery here.

``runner`` scores one job (its folder, its submission, each step's judge) and is
``chalk_worker.score_job``; ``embedded`` scores many at once in this process
(``score_jobs``, ``chalk score`` without a cluster); ``process_loop`` is the
event loop every thread of the process shares.
"""
