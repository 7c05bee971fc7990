"""Chalk Queue's worker: the job runner, the judges and the sandbox."""

from chalk_worker.run.embedded import score_jobs, score_jobs_async
from chalk_worker.run.runner import score_job, score_job_async

__all__ = ["score_job", "score_job_async", "score_jobs", "score_jobs_async"]
