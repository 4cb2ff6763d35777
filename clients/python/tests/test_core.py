"""Reply parsing and the time rules, without a server."""

from __future__ import annotations

from redis.exceptions import ResponseError

from dlock import _core

MAX_TOKEN = 2**63 - 1  # R6.1: tokens are exact 64-bit integers


def test_a_grant_keeps_a_token_of_2_63_minus_1_exactly():
    assert _core.parse_grant([MAX_TOKEN, 1, b"owner"]) == (MAX_TOKEN, 1)
    grants = _core.parse_grants([[MAX_TOKEN, 2, b"o"], [MAX_TOKEN - 1, 1, b"o"]], multi=True)
    assert grants == [(MAX_TOKEN, 2), (MAX_TOKEN - 1, 1)]
    assert float(MAX_TOKEN) != MAX_TOKEN - 1  # what a float would have lost


def test_info_and_renewal_compare_tokens_exactly():
    info = _core.parse_info([b"owner", b"o", b"holds", 1, b"token", MAX_TOKEN, b"pttl", 10])
    assert info["token"] == MAX_TOKEN
    assert _core.judge_renewal([MAX_TOKEN], [MAX_TOKEN]) == (None, None)
    lost, _ = _core.judge_renewal([MAX_TOKEN - 1], [MAX_TOKEN])
    assert lost is not None and "another token" in lost  # R3.1


def test_judge_renewal_sorts_replies():
    notowner = ResponseError("NOTOWNER the lock is not held by this owner")
    lost, other = _core.judge_renewal([5, notowner], [5, 6])
    assert lost.startswith("NOTOWNER") and other is None
    lost, _ = _core.judge_renewal([None], [5])
    assert lost is not None
    oom = ResponseError("OOM command not allowed")
    assert _core.judge_renewal([oom], [5]) == (None, oom)  # transient: retried (R2.6)


def test_the_local_deadline_keeps_a_safety_margin():
    # R3.2: sent + lease - (5 ms + 1% of the lease)
    assert abs(_core.local_deadline(100.0, 1000) - (100.0 + 1.0 - 0.015)) < 1e-9
    assert abs(_core.local_deadline(0.0, 30000) - (30.0 - 0.305)) < 1e-9
