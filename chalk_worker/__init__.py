"""Chalk Queue's worker: the job runner, the judges and the sandbox."""

from chalk_worker.runner import score_job, score_job_async

__all__ = ["score_job", "score_job_async"]
