"""Every ```python block of clients/python/README.md and of the Python
section of docs/clients.md, run against the suite's server (as
tests/docs.rs runs the server's documented sessions).

The blocks of one document share one namespace, in order, as a reader
types them one after the other. The address a block names (``port=6379``,
or a ``Redis()`` with no arguments) becomes the test server's. The helpers
a block calls but does not define (``pay_order``, ``read_catalog``, ...)
are the stubs below: each checks what it is given (a fence is an int) and
plays its part (``do_share_of_work`` counts the latch down for the other
workers, ``serve_as_leader`` ends the term, ``route_to`` ends the
observation). A block with top-level ``await`` runs in a coroutine.

A marker comment on the line before a fence, ``<!-- snippet: skip
REASON -->``, leaves a block out, saying why; ``<!-- snippet: cluster
... -->`` marks a block for a Redis Cluster, run (in its document's order,
in a namespace of its own) against the ``cluster`` fixture's three
primaries instead."""

from __future__ import annotations

import ast
import asyncio
import re
import sys
import textwrap
from typing import Any

import pytest

from conftest import REPO

SKIP = re.compile(r"<!--\s*snippet:\s*skip\b(.*?)-->")
CLUSTER = re.compile(r"<!--\s*snippet:\s*cluster\b")


def blocks(text: str, language: str) -> list[tuple[int, str, str]]:
    """(line, code, skip reason or "") of each block fenced with ``language``."""
    found = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.strip() == f"```{language}":
            start = index + 1
            end = start
            while lines[end].strip() != "```":
                end += 1
            marker = SKIP.search(lines[index - 1]) if index > 0 else None
            skip = marker.group(1).strip() if marker else ""
            if index > 0 and CLUSTER.search(lines[index - 1]):
                skip = "cluster"  # run by test_cluster_blocks_run
            found.append((start, "\n".join(lines[start:end]), skip))
            index = end
        index += 1
    return found


def section(text: str, title: str) -> tuple[int, str]:
    """The ``## title`` section of a document: (its first line's index, its text)."""
    lines = text.split("\n")
    start = lines.index(f"## {title}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return start, "\n".join(lines[start:end])


def documents() -> list[tuple[str, list[tuple[int, str, str]]]]:
    readme = (REPO / "clients" / "python" / "README.md").read_text()
    guide = (REPO / "docs" / "clients.md").read_text()
    offset, python = section(guide, "Python")
    return [
        ("clients/python/README.md", blocks(readme, "python")),
        ("docs/clients.md#python", [(offset + line, code, skip) for line, code, skip in blocks(python, "python")]),
    ]


class _Done(Exception):
    """Raised by a stub that ends the block's last, endless loop."""


class _Awaitable:
    """What a stub returns: nothing, awaitable or not (sync and asyncio blocks)."""

    def __await__(self) -> Any:
        return iter(())


def _caller(name: str) -> Any:
    return sys._getframe(2).f_locals[name]


def stubs(r: Any) -> dict[str, Any]:
    def fenced(fence: Any = None, fences: Any = None, **_: Any) -> _Awaitable:
        if fence is not None:
            assert isinstance(fence, int) and fence > 0, fence
        if fences is not None:
            assert all(isinstance(f, int) for f in fences) and len(fences) > 1, fences
        return _Awaitable()

    def pay_order(order: int, fence: Any = None) -> _Awaitable:
        assert isinstance(fence, int) and fence > 0, fence
        return _Awaitable()

    def do_share_of_work() -> None:
        # The two other workers count down meanwhile.
        latch = _caller_latch()
        latch.redis.execute_command("DLOCK.COUNTDOWN", latch.name)
        latch.redis.execute_command("DLOCK.COUNTDOWN", latch.name)

    def _caller_latch() -> Any:
        return sys._getframe(2).f_locals["latch"]

    def serve_as_leader(term: int) -> None:
        assert isinstance(term, int) and term > 0
        _caller("leadership").lost.lose("the snippet's term is over")

    def route_to(leader: Any) -> None:
        assert leader is None or leader.term > 0
        raise _Done()

    return {
        "pay_order": pay_order,
        "read_catalog": lambda: None,
        "write_catalog": fenced,
        "call_payment_api": lambda: None,
        "run_batch": fenced,
        "transfer": fenced,
        "do_share_of_work": do_share_of_work,
        "serve_as_leader": serve_as_leader,
        "route_to": route_to,
    }


def localise(code: str, port: int) -> str:
    code = code.replace("port=6379", f"port={port}")
    return re.sub(r"\bRedis\(\)", f"Redis(port={port})", code)


def run_block(code: str, namespace: dict[str, Any], where: str) -> None:
    compiled = compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    try:
        result = eval(compiled, namespace)  # noqa: S307 - the document's own code
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    except _Done:
        pass


@pytest.mark.parametrize("document", documents(), ids=lambda d: d[0])
def test_python_blocks_run(server, document):
    name, found = document
    assert found, f"{name}: no python block found"
    client = server.client()
    client.flushall()
    namespace: dict[str, Any] = {"__name__": "__snippet__", **stubs(client)}
    ran = 0
    try:
        for line, code, skip in found:
            if skip:
                continue
            run_block(localise(textwrap.dedent(code), server.port), namespace, f"{name}:{line + 1}")
            ran += 1
    finally:
        for value in list(namespace.values()):
            if not type(value).__module__.startswith("redis"):
                continue
            close = getattr(value, "aclose", None) or getattr(value, "close", None)
            try:
                result = close() if callable(close) else None
                if asyncio.iscoroutine(result):
                    asyncio.run(result)
            except Exception:  # noqa: BLE001 - best effort
                pass
        client.close()
    assert ran > 0


@pytest.mark.parametrize("document", documents(), ids=lambda d: d[0])
def test_cluster_blocks_run(cluster, document):
    """The blocks marked ``snippet: cluster``, against a Redis Cluster
    (``port=6379`` becomes one of its nodes)."""
    name, found = document
    client = cluster.client()
    namespace: dict[str, Any] = {"__name__": "__snippet__", **stubs(client)}
    ran = 0
    try:
        for line, code, skip in found:
            if skip != "cluster":
                continue
            run_block(localise(textwrap.dedent(code), cluster.nodes[0].port), namespace, f"{name}:{line + 1}")
            ran += 1
    finally:
        for value in list(namespace.values()):
            if type(value).__module__.startswith("redis"):
                close = getattr(value, "aclose", None) or getattr(value, "close", None)
                try:
                    result = close() if callable(close) else None
                    if asyncio.iscoroutine(result):
                        asyncio.run(result)
                except Exception:  # noqa: BLE001 - best effort
                    pass
        client.close()
    assert ran > 0, f"{name}: no cluster block"


def test_a_block_that_fails_fails_the_suite(server):
    """The harness does not swallow errors: a typo in a block fails."""
    with pytest.raises(NameError):
        run_block(localise("r = redis.Redis(port=6379)\n", server.port), {}, "typo")
    with pytest.raises(SyntaxError):
        run_block("with lock\n    pass\n", {}, "syntax")


def test_every_python_block_is_found():
    """The extraction sees the blocks a reader sees (none lost to a format slip)."""
    readme = (REPO / "clients" / "python" / "README.md").read_text()
    guide = (REPO / "docs" / "clients.md").read_text()
    _offset, python = section(guide, "Python")
    for text, found in ((readme, blocks(readme, "python")), (python, blocks(python, "python"))):
        assert len(found) == text.count("```python")
