"""Every error Chalk Queue raises on purpose.

The tree::

    ChalkError
    ├── InvalidJobError            (also a ValueError)
    ├── CallbackError
    │   ├── InvalidCallbackError   (also a ValueError) a callback URL no worker can POST to
    │   └── CallbackRefusedError   its host is not among the addresses the operator allowed
    ├── ConfigurationError
    │   └── MissingExtraError      (also an ImportError) a framework's package is missing
    ├── StudentMisbehaviorError    the student tampered: scores 0, never a crash
    ├── JudgeError                 the system could not score: the job is `failed`
    │   ├── UnknownJudgeError
    │   ├── CommandRefusedError
    │   ├── ContextError           a rubric context could not be rendered
    │   └── RubricUnavailableError
    │       ├── LLMUnavailableError    the LLM server failed every retry or the deadline passed
    │       └── NoVerdictError         a reply was neither YES nor NO, even when asked again
    └── QueueError                 (``not_queued``, ``batch_id``: what a failed submit did not send)
        ├── QueueUnavailableError  Redis or the broker cannot be reached
        ├── StoreRefusedError      Redis answered with an error (a read-only replica, ...)
        │   └── StoreFullError     Redis is out of memory (``maxmemory``) and refuses writes
        ├── UnexpectedReplyError   Redis answered what no Chalk script or command answers
        ├── ResultTimeout          (also a TimeoutError)
        ├── NoLiveWorkerError      (also a TimeoutError) no worker took the queue in time
        └── JobFailedError         a worker stored a `failed` result (shown as such in Flower)

A judge's verdict is never an exception: zeros and misbehaviour are results
with status ``succeeded``. A ``JudgeError`` is what turns a job ``failed``.
"""

from __future__ import annotations


class ChalkError(Exception):
    """Root of every error Chalk Queue raises on purpose."""

    def saying(self, message: str) -> ChalkError:
        """The same error with another message (its other fields kept)."""
        return type(self)(message)


class InvalidJobError(ChalkError, ValueError):
    """Raised when a job, judge or rollout line does not describe something scorable."""


class CallbackError(ChalkError):
    """Raised when a batch's callback cannot be sent where it asks to be."""


class InvalidCallbackError(CallbackError, ValueError):
    """Raised when a callback URL is not one a worker can ``POST`` to (its scheme, its host)."""


class CallbackRefusedError(CallbackError):
    """Raised when a callback URL's host is not allowed by the operator (``CHALK_CALLBACK_ALLOW``).

    Workers send callbacks only to the hosts, addresses and networks listed there
    (by default, loopback only), so that a batch cannot make them reach into the
    network they run in.
    """


class ConfigurationError(ChalkError):
    """Raised when settings or the machine cannot support what was asked for."""


class MissingExtraError(ConfigurationError, ImportError):
    """Raised when an integration needs a package that is not installed.

    The message names the extra that brings it, e.g. ``pip install 'chalk-queue[inspect]'``.
    """


class StudentMisbehaviorError(ChalkError):
    """Raised when the student's work looks like tampering.

    Raise it anywhere while scoring (also in a custom judge): the step scores 0,
    does not continue, and the message lands in ``metadata["misbehavior"]``.
    """


class JudgeError(ChalkError):
    """Raised when the system could not score a job; the job ends ``failed``."""


class UnknownJudgeError(JudgeError):
    """Raised when a custom judge or context names nothing registered on the worker."""


class CommandRefusedError(JudgeError):
    """Raised when an executable judge's command is not allowed by the operator's policy."""


class ContextError(JudgeError):
    """Raised when a rubric context cannot be rendered (a path outside the submission, a bug)."""


class RubricUnavailableError(JudgeError):
    """Raised when a rubric cannot be graded: the job ends ``failed``, never with a guess."""


class LLMUnavailableError(RubricUnavailableError):
    """Raised when the LLM server cannot be reached, refuses, or misses the deadline."""


class NoVerdictError(RubricUnavailableError):
    """Raised when the LLM's reply to a criterion is neither YES nor NO, even when asked again."""


class QueueError(ChalkError):
    """Raised when the queue or result store cannot do what was asked.

    Raised by a submit that stopped halfway, it says which jobs were not queued:
    ``not_queued`` holds their ids (the others are queued) and ``batch_id`` the
    batch's id. Submitting them again (or the whole batch) is safe: a job is
    never scored twice.
    """

    def __init__(
        self, message: str, *, not_queued: tuple[str, ...] = (), batch_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.not_queued = not_queued
        """Ids of the jobs a failed submit did not queue (or may not have); empty otherwise."""
        self.batch_id = batch_id
        """The batch a failed ``submit_batch`` was sending, to submit again under the same id."""

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword fields survive pickling (a process pool, a multiprocessing queue).
        return (_rebuild, (type(self), str(self), self.not_queued, self.batch_id))

    def saying(
        self,
        message: str,
        *,
        not_queued: tuple[str, ...] | None = None,
        batch_id: str | None = None,
    ) -> QueueError:
        """The same error with another message, and what a submit did not queue if given."""
        return type(self)(
            message,
            not_queued=self.not_queued if not_queued is None else not_queued,
            batch_id=batch_id or self.batch_id,
        )


def _rebuild(
    kind: type[QueueError], message: str, not_queued: tuple[str, ...], batch_id: str | None
) -> QueueError:
    return kind(message, not_queued=not_queued, batch_id=batch_id)


class QueueUnavailableError(QueueError):
    """Raised when the cluster's Redis (or its broker) cannot be reached."""


class StoreRefusedError(QueueError):
    """Raised when Redis answers a command with an error: a read-only replica, failing
    persistence (``MISCONF``), an ACL that forbids a command, a key of the wrong type."""


class StoreFullError(StoreRefusedError):
    """Raised when Redis is out of memory (``maxmemory`` with ``noeviction``) and refuses writes."""


class UnexpectedReplyError(QueueError):
    """Raised when Redis answers what none of Chalk's scripts or commands answer: a reply of
    another shape, or a kind no version of the protocol knows (a client or worker of
    another version, or something else writing ``chalk:`` keys)."""


class ResultTimeout(QueueError, TimeoutError):
    """Raised when a result did not arrive within the time a caller allowed."""


class NoLiveWorkerError(QueueError, TimeoutError):
    """Raised when fewer live workers than asked for took the queue within the time allowed."""


class JobFailedError(QueueError):
    """Raised by the ``chalk.score`` task after storing a ``failed`` result for its job.

    The result is stored first, so nothing is lost; raising makes Celery count the
    task as failed, and Flower list it with the job's error (state ``FAILURE``).
    """
