"""The client over TLS as a restricted ACL user (docs/operations.md, "TLS and
ACL users"): a server with only a TLS port, certificates made by openssl in
its folder, the document's ACL line for an application user as written
there, and the document's Python connection block run as is; then an
acquire, a blocking hand-off, a renewal, a release and an election, and a
``NOPERM`` for a key outside the user's pattern."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis

import dlock
from conftest import REPO, Server, info, wait_until


def doc_block(what: str) -> list[str]:
    """The lines of the fenced block after ``<!-- tls: WHAT -->``."""
    lines = (REPO / "docs" / "operations.md").read_text().splitlines()
    start = lines.index(f"<!-- tls: {what} -->") + 1
    assert lines[start].startswith("```"), f"<!-- tls: {what} --> is not followed by a fence"
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
    return lines[start + 1 : end]


def create_documented_app_user(admin: redis.Redis) -> None:
    """Runs the document's ACL line for ``app1``: the ``+@dlock`` one where
    the server has that category, else the Redis 7.0 one."""
    categories = [c.decode() for c in admin.execute_command("ACL", "CAT")]
    (line,) = doc_block("acl app" if "dlock" in categories else "acl app redis-7.0")
    assert admin.execute_command(*line.split()) in (b"OK", True)


def connect_as_documented(server: Server) -> dict[str, Any]:
    """Runs the document's Python block; its names (``r``, ``lock``)."""
    names: dict[str, Any] = {"host": "127.0.0.1", "port": server.port, "ca_file": server.ca_file}
    exec("\n".join(doc_block("client python")), names)
    return names


def test_an_acl_user_over_tls_locks_hands_off_renews_releases_and_elects(tls_server: Server) -> None:
    admin = tls_server.client()
    create_documented_app_user(admin)
    documented = connect_as_documented(tls_server)
    r: redis.Redis = documented["r"]
    first: dlock.Lock = documented["lock"]
    assert r.connection_pool.connection_kwargs["username"] == "app1"

    # Acquire, then renew by hand. The lease's deadline is the key's
    # PEXPIRETIME: a renewal 50 ms or more later moves it on, however slowly
    # the replies come.
    assert first.acquire()
    deadline = admin.execute_command("PEXPIRETIME", "app1:job")
    wait_until(lambda: info(admin, "app1:job")["pttl"] < 29_950, what="50 ms of the lease to pass")
    first.renew()
    assert admin.execute_command("PEXPIRETIME", "app1:job") > deadline
    first_fence = first.fence

    # A blocking hand-off: a second lock waits in the queue until the first
    # is released.
    second = r.lock("app1:job", timeout=10, blocking_timeout=10, thread_local=False, lock_class=dlock.Lock)
    granted: list[bool] = []
    waiter = threading.Thread(target=lambda: granted.append(second.acquire()))
    waiter.start()
    wait_until(lambda: (info(admin, "app1:job") or {}).get("waiting") == 1, what="the waiter to queue")
    first.release()
    waiter.join(15)
    assert granted == [True]
    assert second.fence > first_fence
    assert second.owned()
    second.release()
    assert info(admin, "app1:job") is None

    # An election: one leads, the other sees it.
    leadership = dlock.Election(r, "app1:leader").campaign("node-a")
    assert leadership is not None
    leader = dlock.Election(r, "app1:leader").leader()
    assert leader is not None and leader.value == b"node-a" and leader.term == leadership.term
    leadership.resign()
    assert dlock.Election(r, "app1:leader").leader() is None

    # Outside the user's key pattern: NOPERM, which redis-py raises as
    # NoPermissionError (the text after the code differs between servers).
    outside = r.lock("app2:job", blocking=False, lock_class=dlock.Lock)
    with pytest.raises(redis.exceptions.NoPermissionError):
        outside.acquire()
    assert info(admin, "app2:job") is None
