"""The callback sender: a thread in each worker process that sends batches' callbacks.

About once a second (sooner when a callback is due sooner) it asks Redis for a
due one (``CLAIM``, which also notices batches that finished); any worker may
send any callback, and a claim keeps the others off it while it is sent. Then:

- the URL is checked against ``CHALK_CALLBACK_ALLOW`` and pinned to the address
  checked (``check_target``); a refused one is recorded ``refused`` and never sent;
- without ``CHALK_CALLBACK_SECRET`` nothing is sent unsigned: the callback stays
  pending, tried again a minute later (at most), and the log says what to set;
- otherwise one ``POST`` of the batch's summary (made once, kept in Redis, so
  every try sends the same bytes), signed, redirects not followed;
- a 2xx is ``delivered``; anything else is tried again after a backoff doubling
  from ``CHALK_CALLBACK_FIRST_DELAY_S`` (with jitter) up to
  ``CHALK_CALLBACK_MAX_DELAY_S``, until ``CHALK_CALLBACK_GIVE_UP_S`` after the
  batch finished: then it is given up, logged as an error.

Its own thread, never the lease keeper's: a slow receiver must not delay lease
renewals. Its state is all in Redis, so it survives any worker's death.
"""

from __future__ import annotations

import logging
import random
import threading

import httpx
import redis

from chalk_client.callback_allowlist import (
    CallbackAllowlist,
    CallbackTarget,
    Resolve,
    check_target,
    resolve_addresses,
)
from chalk_client.callbacks import callback_body, callback_headers, redact_url
from chalk_client.cluster import keys
from chalk_client.cluster.callbacks import (
    CLAIM,
    KEEP_BODY,
    RECORD,
    CallbackStatus,
    Claim,
    Outcome,
    claim_args,
    claim_ms,
    parse_claim,
    record_args,
)
from chalk_client.cluster.connection import redacted
from chalk_client.cluster.script import as_bytes, as_text, run_script
from chalk_client.errors import CallbackError
from chalk_client.settings import ChalkSettings
from chalk_client.store import JobStore
from chalk_client.summary import summarize_jobs

log = logging.getLogger(__name__)

CHECK_S = 1.0
"""The longest wait between two looks for due callbacks."""
NO_SECRET_RETRY_S = 60.0
"""How often a worker without a secret looks at a finished batch's callback again."""
JITTER = (0.8, 1.2)
"""Each backoff delay is multiplied by a random factor in this range."""


def backoff_s(attempts: int, first_s: float, max_s: float) -> float:
    """The wait after the ``attempts``-th failed try: ``first_s`` doubling, jittered, capped."""
    delay = first_s * 2.0 ** min(max(attempts - 1, 0), 60)
    return min(delay * random.uniform(*JITTER), max_s)


def describe_failure(exc: httpx.HTTPError) -> str:
    """A failed try's error in a few words: what kind, and httpx's message."""
    kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "connection failed"
    return f"{kind}: {type(exc).__name__}: {exc}".rstrip(": ")


class CallbackSender(threading.Thread):
    """Sends the cluster's due batch callbacks, one at a time, until stopped."""

    def __init__(
        self,
        client: redis.Redis,
        settings: ChalkSettings,
        url: str,
        claimer: str,
        *,
        resolve: Resolve = resolve_addresses,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """``resolve`` finds a host's addresses and ``transport`` carries the requests
        (httpx's own by default); tests give their own."""
        super().__init__(name="chalk-callbacks", daemon=True)
        self.redis = client
        self.settings = settings
        self.url = url
        self.claimer = claimer
        """This process's name on the callbacks it claims."""
        self.resolve = resolve
        self.allowlist = CallbackAllowlist.parse(settings.callback_allow)
        self.stopped = threading.Event()
        self._store = JobStore(client, settings, url)
        self._http = httpx.Client(
            follow_redirects=False,
            timeout=httpx.Timeout(settings.callback_timeout_s),
            trust_env=False,  # no proxy from the environment: the request goes where checked
            transport=transport,
        )
        self._unreachable = False

    def run(self) -> None:
        """Look for due callbacks and send them until stopped."""
        try:
            while not self.stopped.is_set():
                self.stopped.wait(self._tick_safely())
        finally:
            self._http.close()

    def stop(self) -> None:
        """Stop after the current try (if any)."""
        self.stopped.set()

    def _tick_safely(self) -> float:
        try:
            wait = self.tick()
        except redis.RedisError as exc:
            if not self._unreachable:
                log.warning(
                    "batch callbacks: Redis at %s failed (%s); looking again every %.0f s",
                    redacted(self.url),
                    exc,
                    CHECK_S,
                )
            self._unreachable = True
            return CHECK_S
        except Exception:  # a bug of ours: logged, and the thread goes on
            log.exception("batch callbacks: unexpected error; looking again in %.0f s", CHECK_S)
            return CHECK_S
        if self._unreachable:
            log.warning("batch callbacks: Redis at %s answers again", redacted(self.url))
            self._unreachable = False
        return wait

    def tick(self) -> float:
        """Send the callback due now, if any; returns the seconds until the next look."""
        names, args = claim_args(self.claimer, claim_ms(self.settings.callback_timeout_s))
        reply = parse_claim(run_script(self.redis, CLAIM, names, args))
        for claim in reply.expired:
            log.error(
                "callback of batch %s to %s given up: the batch's jobs expired "
                "(CHALK_RESULT_TTL_S) before every one had a result",
                claim.batch_id,
                redact_url(claim.url),
            )
        for claim in reply.claimed:
            try:
                self.send(claim)
            except redis.RedisError:
                raise  # the claim lapses: another look (here or elsewhere) sends it
            except Exception as exc:  # a bug of ours: a failed try, retried, given up in time
                log.exception("callback of batch %s: unexpected error", claim.batch_id)
                self._failed(claim, f"unexpected error on the worker: {type(exc).__name__}: {exc}")
        if reply.claimed:
            return 0.0
        return CHECK_S if reply.due_in_s is None else min(reply.due_in_s, CHECK_S)

    def send(self, claim: Claim) -> CallbackStatus | None:
        """Try ``claim``'s callback once and record how it went; its state after (``None``:
        another worker has claimed it since)."""
        try:
            target = check_target(claim.url, self.allowlist, self.resolve)
        except CallbackError as exc:
            log.error("callback of batch %s refused, not sent: %s", claim.batch_id, exc)
            return self._record(claim, Outcome.REFUSED, error=f"refused: {exc}")
        except OSError as exc:
            return self._failed(claim, f"cannot resolve the host: {exc}")
        secret = self.settings.callback_secret
        if secret is None or not secret.get_secret_value():
            log.error(
                "callback of batch %s not sent: this worker has no CHALK_CALLBACK_SECRET to sign "
                "it with; set CHALK_CALLBACK_SECRET on the workers (the receiver checks it). "
                "The callback waits, and is sent once a worker has it",
                claim.batch_id,
            )
            retry = min(NO_SECRET_RETRY_S, self.settings.callback_max_delay_s)
            return self._record(
                claim,
                Outcome.UNSENT,
                error="not sent: no CHALK_CALLBACK_SECRET on the workers",
                retry_in_s=retry,
            )
        body = claim.body or self._body(claim)
        signing = secret.get_secret_value()
        headers = callback_headers(body, claim.delivery_id, claim.batch_id, signing)
        try:
            status, reason = self._post(target, body, headers)
        except httpx.HTTPError as exc:
            return self._failed(claim, describe_failure(exc))
        if 200 <= status < 300:
            log.info(
                "callback of batch %s delivered to %s (HTTP %d, attempt %d)",
                claim.batch_id,
                target,
                status,
                claim.attempts + 1,
            )
            return self._record(claim, Outcome.DELIVERED, status=status)
        error = f"HTTP {status} {reason}".rstrip()
        if 300 <= status < 400:
            error += " (redirects are not followed: give the final URL)"
        return self._failed(claim, error, status=status)

    def _post(
        self, target: CallbackTarget, body: bytes, headers: dict[str, str]
    ) -> tuple[int, str]:
        """``POST`` ``body`` to the checked address; the answer's status and reason."""
        extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
        request = self._http.build_request(
            "POST",
            target.request_url,
            content=body,
            headers={**headers, "Host": target.host_header},
            extensions=extensions,
        )
        response = self._http.send(request, stream=True)  # the answer's body is not read
        response.close()
        return response.status_code, response.reason_phrase

    def _body(self, claim: Claim) -> bytes:
        """The callback's body, made now from the batch's results and kept for every try."""
        ids = self._store.batch_ids(claim.batch_id)
        summary = summarize_jobs(self._store, ids, claim.batch_id)
        body = callback_body(claim.delivery_id, claim.batch_id, summary, claim.finished)
        kept = run_script(self.redis, KEEP_BODY, [keys.callback(claim.batch_id)], [body])
        return as_bytes(kept)

    def _failed(self, claim: Claim, error: str, status: int | None = None) -> CallbackStatus | None:
        retry = backoff_s(
            claim.attempts + 1,
            self.settings.callback_first_delay_s,
            self.settings.callback_max_delay_s,
        )
        state = self._record(claim, Outcome.FAILED, error=error, status=status, retry_in_s=retry)
        if state is CallbackStatus.RETRYING:
            log.warning(
                "callback of batch %s to %s failed (attempt %d): %s; next try in %.1f s",
                claim.batch_id,
                redact_url(claim.url),
                claim.attempts + 1,
                error,
                retry,
            )
        return state

    def _record(
        self,
        claim: Claim,
        outcome: Outcome,
        *,
        error: str = "",
        status: int | None = None,
        retry_in_s: float = 0.0,
    ) -> CallbackStatus | None:
        names, args = record_args(
            claim.batch_id,
            self.claimer,
            outcome,
            error=error,
            status=status,
            retry_in_s=retry_in_s,
            give_up_s=self.settings.callback_give_up_s,
            ttl_s=self.settings.result_ttl_s,
            delivery_id=claim.delivery_id,
        )
        answer = as_text(run_script(self.redis, RECORD, names, args))
        if answer in ("stale", "gone"):
            return None
        state = CallbackStatus(answer)
        if state is CallbackStatus.GIVEN_UP:
            log.error(
                "callback of batch %s to %s given up after %d attempt(s), %.0f s after the batch "
                "finished (CHALK_CALLBACK_GIVE_UP_S); last error: %s",
                claim.batch_id,
                redact_url(claim.url),
                claim.attempts + (outcome is Outcome.FAILED),
                self.settings.callback_give_up_s,
                error,
            )
        return state

    def close(self) -> None:
        """Stop the thread and wait for it (up to the length of one try)."""
        self.stop()
        if self.is_alive():
            self.join(timeout=3 * self.settings.callback_timeout_s + 1)
