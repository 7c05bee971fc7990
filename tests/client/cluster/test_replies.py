"""Scripts' replies read into typed kinds: every word known, anything else a clear error."""

from __future__ import annotations

import pytest
from redis.exceptions import ResponseError

from chalk_client.cluster.delivery import RestoreAnswer
from chalk_client.cluster.lanes import priority_of
from chalk_client.cluster.leases import (
    BlobState,
    RequeueAnswer,
    StartOutcome,
    parse_expired,
    parse_start,
)
from chalk_client.cluster.reconcile import (
    RepublishAnswer,
    StrayKind,
    parse_republish,
    parse_strays,
)
from chalk_client.cluster.script import as_int, as_text, parse_kind
from chalk_client.errors import QueueError, UnexpectedReplyError


def test_start_replies_become_typed_outcomes():
    lane = b"chalk:lane:0:5:chalk:b-1"
    started = parse_start([b"start", 2, b"{}", b"large", b"abc123", b"7", lane, lane])
    assert started.outcome is StartOutcome.START and started.attempts == 2
    assert started.blob is BlobState.LARGE and started.digest == "abc123"
    assert started.archive is None and started.taken == (lane.decode(), 7)
    assert priority_of(started.lane) == "high" and priority_of("chalk") is None

    inline = parse_start([b"start", 1, b"{}", b"ok", b"ARCHIVE", b"", b"", b""])
    assert (inline.blob, inline.archive, inline.taken) == (BlobState.OK, b"ARCHIVE", None)

    busy = parse_start([b"busy", b"worker-a"])
    assert (busy.outcome, busy.holder) == (StartOutcome.BUSY, "worker-a")
    assert parse_start([b"done"]).outcome is StartOutcome.DONE
    assert parse_start(["missing"]).outcome is StartOutcome.MISSING  # decoded replies too


def test_an_unknown_start_outcome_is_a_clear_error():
    with pytest.raises(UnexpectedReplyError) as caught:
        parse_start([b"paused"])
    message = str(caught.value)
    assert "'paused'" in message and "'start', 'done', 'busy', 'missing'" in message
    assert "same chalk-queue version" in message
    assert isinstance(caught.value, QueueError)


def test_an_unknown_blob_state_or_a_short_start_reply_is_a_clear_error():
    with pytest.raises(UnexpectedReplyError, match="'inline'"):
        parse_start([b"start", 1, b"{}", b"inline", b"", b"", b"", b""])
    with pytest.raises(UnexpectedReplyError, match="5 values, not 8"):
        parse_start([b"start", 1, b"{}", b"none", b""])
    with pytest.raises(UnexpectedReplyError, match="an array"):
        parse_start(b"start")
    with pytest.raises(UnexpectedReplyError, match="an integer"):
        parse_start([b"start", b"twice", b"{}", b"none", b"", b"", b"", b""])


def test_an_error_among_the_replies_is_raised_as_itself():
    refused = ResponseError("OOM command not allowed")
    with pytest.raises(ResponseError, match="OOM"):
        parse_start(refused)
    with pytest.raises(ResponseError, match="OOM"):
        as_text(refused)
    with pytest.raises(ResponseError, match="OOM"):
        as_int(refused)


def test_reconcile_kinds_are_typed_and_unknown_ones_refused():
    lost, unpublished = parse_strays(
        [b"lost", b"j1", b"t1", b"", b"", b"chalk", b"unpublished", b"j2", b"", b"b", b"w", b""]
    )
    assert (lost.kind, lost.job_id, lost.queue) == (StrayKind.LOST, "j1", "chalk")
    assert (unpublished.kind, unpublished.batch, unpublished.publisher) == (
        StrayKind.UNPUBLISHED,
        "b",
        "w",
    )
    assert parse_strays([]) == []
    with pytest.raises(UnexpectedReplyError, match="'forgotten'"):
        parse_strays([b"forgotten", b"j1", b"t1", b"", b"", b""])
    with pytest.raises(UnexpectedReplyError, match="5 values, not 6 per job"):
        parse_strays([b"lost", b"j1", b"t1", b"", b""])
    assert parse_republish(b"requeued") is RepublishAnswer.REQUEUED
    with pytest.raises(UnexpectedReplyError, match="'resent'"):
        parse_republish(b"resent")


def test_lease_and_restore_answers_are_typed():
    assert parse_kind(RequeueAnswer, b"claimed") is RequeueAnswer.CLAIMED
    assert parse_kind(RestoreAnswer, "stale") is RestoreAnswer.STALE
    with pytest.raises(UnexpectedReplyError, match="'revived'"):
        parse_kind(RequeueAnswer, b"revived")
    with pytest.raises(UnexpectedReplyError, match="text"):
        parse_kind(RestoreAnswer, 1)
    with pytest.raises(UnexpectedReplyError, match="4 values, not 5 per lease"):
        parse_expired([b"j", b"", b"", b""])


def test_the_typed_kinds_keep_the_words_on_the_wire():
    # Workers of the previous version compare these words: the members are those strings.
    assert StartOutcome.START == "start" and f"{StartOutcome.BUSY}" == "busy"
    assert [kind.value for kind in StrayKind] == ["lost", "unpublished"]
    assert BlobState("none") is BlobState.NONE
