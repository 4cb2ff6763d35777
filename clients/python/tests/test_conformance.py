"""The conformance suite of clients/conformance (docs/clients.md, "What
every client does"), run by the Python client on Redis and on Valkey (the
``server`` fixture). Every scenario is one test; it runs through
``dlock.asyncio`` (whose cancellation is a task's, as the format's
``cancel`` step needs; the threaded API shares ``dlock._core`` and its
rules). The format is clients/conformance/README.md: an unknown step or
field, or an unmet expectation, fails the scenario, and a scenario is
skipped only when its ``skip`` list names ``python``. The run and skipped
counts are printed at the end of the session (conftest.py)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import LockError, LockNotOwnedError, ResponseError

import dlock
import dlock.asyncio
from conftest import CONFORMANCE_COUNTS, PATIENCE

LANGUAGE = "python"
CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
DEFAULT_AWAIT = 5.0
#: The read timeout of the runner's raw connections, in seconds: at least
#: 10 s, longer than any pause of a scenario.
RAW_READ_TIMEOUT = 15.0
POLL = 0.005

STEP_FIELDS = {
    "op",
    "note",
    "result",
    "error",
    "capture",
    "within_ms",
    "background",
    "client",
    "conn",
    "guard",
    "task",
    "observer",
    "as",
    "kind",
    "key",
    "keys",
    "limit",
    "weight",
    "lease_ms",
    "wait_ms",
    "wait_forever",
    "fair",
    "session",
    "owner",
    "count",
    "n",
    "ttl_ms",
    "timeout_ms",
    "identity",
    "args",
    "ms",
    "field",
    "returns_within_ms",
}
READ_STEPS = {"info", "info_dlock", "command", "held", "lost", "leader", "observed", "latch_count"}


def _files() -> list[Path]:
    files = sorted((CONFORMANCE / "scenarios").glob("*.json"))
    assert files, f"no scenario files in {CONFORMANCE}"
    return files


def _scenarios() -> list[Any]:
    out = []
    for path in _files():
        for scenario in json.loads(path.read_text())["scenarios"]:
            out.append(pytest.param(scenario, id=scenario["name"]))
    return out


def test_scenario_files_follow_the_schema():
    schema = json.loads((CONFORMANCE / "schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    names = set()
    for path in _files():
        data = json.loads(path.read_text())
        jsonschema.validate(data, schema, cls=jsonschema.Draft202012Validator)
        assert data["area"] == path.stem
        for scenario in data["scenarios"]:
            assert scenario["name"] not in names, f"{scenario['name']} twice"
            names.add(scenario["name"])


class Failure(Exception):
    """An unmet expectation or an unknown step: the scenario fails."""


class StepError(Exception):
    """A step failed with an error of a kind of the README."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def kind_of(error: BaseException) -> str:
    if isinstance(error, dlock.LockLostError):
        return "lost"
    if isinstance(error, dlock.DeadlockError):
        return "deadlock"
    if isinstance(error, LockNotOwnedError):
        return "not_owner"
    if isinstance(error, (redis.TimeoutError, asyncio.TimeoutError)):
        return "timeout"
    if isinstance(error, (redis.ConnectionError, ConnectionError)):
        return "connection"
    if isinstance(error, ResponseError):
        code = str(error).split(" ", 1)[0]
        return "wrongtype" if code == "WRONGTYPE" else f"server:{code}"
    if isinstance(error, (ValueError, TypeError)):
        return "invalid_argument"
    return f"other:{type(error).__name__}: {error}"


def dlock_calls(commandstats: str) -> int:
    """The DLOCK commands the server received: calls and rejected_calls of
    every ``cmdstat_dlock.*`` line of INFO commandstats."""
    total = 0
    for line in commandstats.splitlines():
        name, _, stats = line.strip().partition(":")
        if not name.startswith("cmdstat_dlock."):
            continue
        for field in stats.split(","):
            key, _, value = field.partition("=")
            if key in ("calls", "rejected_calls"):
                total += int(value)
    return total


def to_json(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {to_json(k): to_json(v) for k, v in value.items()}
    return value


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check(expected: Any, actual: Any) -> None:
    def fail() -> None:
        raise Failure(f"expected {expected!r}, got {actual!r}")

    if isinstance(expected, dict) and len(expected) == 1 and next(iter(expected)).startswith("~"):
        op, arg = next(iter(expected.items()))
        if op == "~any":
            return
        if op in ("~gt", "~ge", "~lt", "~le"):
            if not (is_int(actual) and is_int(arg)):
                fail()
            ok = {"~gt": actual > arg, "~ge": actual >= arg, "~lt": actual < arg, "~le": actual <= arg}[op]
            if not ok:
                fail()
            return
        if op == "~ne":
            try:
                check(arg, actual)
            except Failure:
                return
            fail()
        if op == "~len":
            if not isinstance(actual, (list, str)) or len(actual) != arg:
                fail()
            return
        if op == "~in":
            for option in arg:
                try:
                    check(option, actual)
                    return
                except Failure:
                    pass
            fail()
        raise Failure(f"unknown matcher {op}")
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            fail()
        for name, want in expected.items():
            if name not in actual:
                raise Failure(f"no field {name} in {actual!r}")
            try:
                check(want, actual[name])
            except Failure as error:
                raise Failure(f"{name}: {error}") from None
        return
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            fail()
        for want, got in zip(expected, actual):
            check(want, got)
        return
    if is_int(expected):
        if not is_int(actual) or actual != expected:
            fail()
        return
    if expected != actual or type(expected) is not type(actual):
        fail()


class Guard:
    """A hold as the runner sees it: the lock object of one acquisition."""

    def __init__(self, lock: Any, multi: bool) -> None:
        self.lock = lock
        fence = lock.fence
        self.tokens: list[int] = list(fence) if multi else [fence]
        self.owner = to_json(lock.local.token)
        self.released = False
        #: The leadership of a campaign's guard (``resign`` gives it up).
        self.leadership: Any = None


class Runner:
    def __init__(self, server: Any) -> None:
        self.server = server
        self.clients: dict[str, Any] = {}
        self.conns: dict[str, Any] = {}
        self.guards: dict[str, Guard] = {}
        self.tasks: dict[str, tuple[str, asyncio.Task[Any]]] = {}
        self.vars: dict[str, Any] = {}
        #: name -> (observer, the task reading it, {"latest": observation})
        self.observers: dict[str, tuple[Any, asyncio.Task[Any], dict[str, Any]]] = {}

    # -- names -------------------------------------------------------------

    def client(self, step: dict[str, Any]) -> Any:
        name = step.get("client")
        if name is None:
            raise Failure("the step names no client")
        if name not in self.clients:
            self.clients[name] = redis.asyncio.Redis(port=self.server.port)
        return self.clients[name]

    def raw(self, name: str) -> RawConnection:
        if name not in self.conns:
            self.conns[name] = RawConnection(self.server.port)
        return self.conns[name]

    def guard(self, step: dict[str, Any]) -> Guard:
        name = step.get("guard")
        if name not in self.guards:
            raise Failure(f"unknown guard {name}")
        return self.guards[name]

    def resolve(self, value: Any) -> Any:
        if isinstance(value, str) and value.startswith("$$"):
            return value[1:]
        if isinstance(value, str) and value.startswith("$"):
            path = value[1:].split(".")
            if len(path) == 1:
                if path[0] not in self.vars:
                    raise Failure(f"unknown variable {value}")
                return self.vars[path[0]]
            guard = self.guards.get(path[0])
            if guard is None:
                raise Failure(f"unknown guard in {value}")
            if path[1:] == ["token"]:
                return guard.tokens[0]
            if path[1:] == ["owner"]:
                return guard.owner
            if path[1:] == ["tokens"]:
                return list(guard.tokens)
            if len(path) == 3 and path[1] == "tokens":
                return guard.tokens[int(path[2])]
            raise Failure(f"unknown reference {value}")
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items()}
        return value

    def text(self, value: str) -> str:
        resolved = self.resolve(value)
        if isinstance(resolved, (str, int)) and not isinstance(resolved, bool):
            return str(resolved)
        raise Failure(f"{value} is not text: {resolved!r}")

    # -- steps -------------------------------------------------------------

    async def step(self, step: dict[str, Any]) -> None:
        unknown = set(step) - STEP_FIELDS
        if unknown:
            raise Failure(f"unknown fields {sorted(unknown)}")
        if step.get("background"):
            name = step.get("as")
            if name is None:
                raise Failure("a background step needs `as`")
            self.tasks[name] = (step["op"], asyncio.ensure_future(self.timed(self.start(step))))
            await asyncio.sleep(0)  # let it send its command
            return
        within = step.get("within_ms") if step["op"] in READ_STEPS else None
        deadline = None if within is None else time.monotonic() + within / 1000
        while True:
            began = time.monotonic()
            try:
                value, error = await self.run(step), None
            except StepError as failed:
                value, error = None, failed.kind
            took = time.monotonic() - began
            if step["op"] == "await":
                value, error, took = value
            try:
                self.judge(step, value, error)
                bound = step.get("returns_within_ms")
                if bound is not None and took * 1000 > bound:
                    raise Failure(f"returned after {took * 1000:.0f} ms, more than {bound} ms")
            except Failure:
                if deadline is not None and time.monotonic() < deadline:
                    await asyncio.sleep(POLL)
                    continue
                raise
            if "capture" in step and error is None:
                self.vars[step["capture"]] = value
            return

    def judge(self, step: dict[str, Any], value: Any, error: str | None) -> None:
        # With both `result` and `error` the step may end either way (README, Matchers).
        if error is not None:
            if "error" not in step:
                raise Failure(f"failed with {error}")
            kinds = step["error"] if isinstance(step["error"], list) else [step["error"]]
            if error not in kinds:
                raise Failure(f"expected error {step['error']}, got {error}")
            return
        if "error" in step and "result" not in step:
            raise Failure(f"expected error {step['error']}, got {value!r}")
        if "result" in step:
            check(self.resolve(step["result"]), value)

    @staticmethod
    async def timed(work: Any) -> tuple[Any, str | None, float]:
        """A background step: (value, error kind, seconds from its start to
        its end). Any error of the library is a kind (R9.1), never a crash
        of the runner."""
        began = time.monotonic()
        try:
            value, error = await work, None
        except StepError as failed:
            value, error = None, failed.kind
        except (redis.exceptions.RedisError, OSError, asyncio.TimeoutError, LockError, ValueError, TypeError) as failed:
            value, error = None, kind_of(failed)
        return value, error, time.monotonic() - began

    def start(self, step: dict[str, Any]) -> Any:
        op = step["op"]
        if op == "acquire":
            return self.acquire(step)
        if op == "latch_wait":
            return self.latch_wait(step)
        if op == "command":
            return self.command(step, dedicated=True)
        if op == "campaign":
            return self.campaign(step)
        if op == "renew":
            return self.run(step)
        raise Failure(f"{op} cannot run in the background")

    def make_lock(self, step: dict[str, Any]) -> tuple[Any, bool]:
        r = self.client(step)
        kind = step.get("kind", "lock")
        options: dict[str, Any] = {"watchdog_timeout": step.get("lease_ms", 30000) / 1000}
        if step.get("session"):
            options["session"] = True
        if step.get("fair"):
            options["fair"] = True
        if kind == "lock" or kind == "write":
            return dlock.asyncio.Lock(r, step["key"], **options), False
        if kind == "read":
            return dlock.asyncio.ReadLock(r, step["key"], **options), False
        if kind == "semaphore":
            return dlock.asyncio.Semaphore(r, step["key"], step["limit"], weight=step.get("weight"), **options), False
        if kind == "multi":
            return dlock.asyncio.MultiLock(r, step["keys"], **options), True
        raise Failure(f"unknown kind {kind}")

    async def acquire(self, step: dict[str, Any]) -> Any:
        try:
            lock, multi = self.make_lock(step)
        except (ValueError, TypeError) as error:
            raise StepError(kind_of(error)) from None
        token = self.text(step["owner"]) if "owner" in step else None
        if step.get("wait_forever"):
            blocking, timeout = True, None
        elif "wait_ms" in step:
            blocking, timeout = True, step["wait_ms"] / 1000
        else:
            blocking, timeout = False, None
        try:
            granted = await lock.acquire(blocking=blocking, blocking_timeout=timeout, token=token)
        except (redis.exceptions.RedisError, OSError, LockError, ValueError, TypeError) as error:
            raise StepError(kind_of(error)) from None
        if not granted:
            raise StepError("busy")
        self.guards[step["as"]] = Guard(lock, multi)
        return None

    def election(self, step: dict[str, Any]) -> Any:
        return dlock.asyncio.Election(
            self.client(step), step["key"], watchdog_timeout=step.get("lease_ms", 30000) / 1000
        )

    async def campaign(self, step: dict[str, Any]) -> Any:
        if step.get("wait_forever"):
            timeout = None
        else:
            timeout = step.get("wait_ms", 0) / 1000
        try:
            leadership = await self.election(step).campaign(self.text(step["identity"]), timeout=timeout)
        except (redis.exceptions.RedisError, OSError, LockError) as error:
            raise StepError(kind_of(error)) from None
        if leadership is None:
            raise StepError("busy")
        guard = Guard(leadership.lock, False)
        guard.leadership = leadership
        self.guards[step["as"]] = guard
        return None

    async def observe(self, step: dict[str, Any]) -> None:
        observer = self.election(step).observe()
        seen: dict[str, Any] = {"latest": "nothing"}

        async def follow() -> None:
            while True:
                try:
                    state = await observer.__anext__()
                except StopAsyncIteration:
                    return
                except (redis.exceptions.RedisError, OSError):
                    await asyncio.sleep(POLL)  # read again: nothing is missed
                    continue
                seen["latest"] = None if state is None else {"identity": state.text, "term": state.term}

        self.observers[step["as"]] = (observer, asyncio.ensure_future(follow()), seen)

    async def stop(self, name: str) -> None:
        observer, task, _seen = self.observers.pop(name)
        await observer.aclose()
        task.cancel()
        try:
            await task
        except BaseException:  # stopped either way
            pass

    async def latch_wait(self, step: dict[str, Any]) -> Any:
        latch = dlock.asyncio.Latch(self.client(step), step["key"])
        timeout = step["timeout_ms"]
        try:
            opened = await latch.wait(None if timeout == 0 else timeout / 1000)
        except dlock.LatchBrokenError:
            return "vanished"
        except (redis.exceptions.RedisError, OSError) as error:
            raise StepError(kind_of(error)) from None
        return "opened" if opened else "timed_out"

    async def command(self, step: dict[str, Any], dedicated: bool = False) -> Any:
        args = [self.text(a) for a in step["args"]]
        conn = self.raw(step["conn"]) if not dedicated else RawConnection(self.server.port)
        try:
            return to_json(await conn.execute_command(*args))
        except ResponseError as error:
            raise StepError("server:" + str(error).split(" ", 1)[0]) from None
        finally:
            if dedicated:
                await conn.aclose()

    async def run(self, step: dict[str, Any]) -> Any:
        op = step["op"]
        if op == "acquire":
            return await self.acquire(step)
        if op == "release":
            guard = self.guard(step)
            if guard.released:
                raise Failure("the guard was released already")
            guard.released = True
            was_lost = guard.lock.lost.is_set()
            try:
                await guard.lock.release()
            except LockNotOwnedError as error:
                # R3.4: the drop-in raises where redis-py raises, so the
                # release of a lost guard the server no longer holds raises
                # LockNotOwnedError where the scenario's plain guard is quiet.
                if was_lost and "error" not in step:
                    return None
                raise StepError(kind_of(error)) from None
            except (redis.exceptions.RedisError, OSError, LockError) as error:
                raise StepError(kind_of(error)) from None
            return None
        if op == "renew":
            try:
                await self.guard(step).lock.renew()
            except (redis.exceptions.RedisError, OSError, LockError) as error:
                raise StepError(kind_of(error)) from None
            return None
        if op == "held":
            lock = self.guard(step).lock
            return lock.local.token is not None and not lock.lost.is_set()
        if op == "lost":
            return self.guard(step).lock.lost.is_set()
        if op == "token":
            return self.guard(step).tokens[0]
        if op == "await":
            name = step.get("task")
            if name not in self.tasks:
                raise Failure(f"unknown task {name}")
            # Kept: a later `cancel` of the finished task releases its guard.
            kind, task = self.tasks[name]
            within = step.get("within_ms", DEFAULT_AWAIT * 1000) / 1000
            try:
                value, error, took = await asyncio.wait_for(asyncio.shield(task), within)
            except asyncio.TimeoutError:
                raise Failure(f"task {name} not done within {within} s") from None
            if kind in ("acquire", "campaign") and error is None:
                guard = self.guards.get(name)
                if guard is None:
                    raise Failure(f"task {name} registered no guard")
            return value, error, took
        if op == "cancel":
            name = step.get("task")
            if name not in self.tasks:
                raise Failure(f"unknown task {name}")
            _kind, task = self.tasks.pop(name)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            guard = self.guards.get(name)
            if guard is not None and not guard.released:
                # The acquire finished before the cancel: the caller that
                # cancels drops what it got (README, `cancel`).
                guard.released = True
                await guard.lock.release()
            return None
        if op == "latch_create":
            latch = dlock.asyncio.Latch(self.client(step), step["key"])
            return await latch.try_set_count(step["count"], step["ttl_ms"] / 1000)
        if op == "latch_count_down":
            latch = dlock.asyncio.Latch(self.client(step), step["key"])
            return await latch.count_down(step.get("n", 1))
        if op == "latch_count":
            return await dlock.asyncio.Latch(self.client(step), step["key"]).count()
        if op == "latch_wait":
            return await self.latch_wait(step)
        if op == "command":
            return await self.command(step)
        if op == "info":
            reply = await self.raw(step.get("conn", "admin")).execute_command("DLOCK.INFO", step["key"])
            if reply is None:
                return None
            reply = to_json(reply)
            return {reply[i]: reply[i + 1] for i in range(0, len(reply) - 1, 2)}
        if op == "dlock_calls":
            text = to_json(await self.raw(step.get("conn", "admin")).execute_command("INFO", "commandstats"))
            return dlock_calls(text)
        if op == "info_dlock":
            text = to_json(await self.raw(step.get("conn", "admin")).execute_command("INFO", "dlock"))
            values: dict[str, Any] = {}
            for line in text.splitlines():
                if ":" in line:
                    name, _, raw = line.strip().partition(":")
                    try:
                        values[name] = int(raw)
                    except ValueError:
                        values[name] = raw
            if "field" in step:
                if step["field"] not in values:
                    raise Failure(f"INFO dlock has no {step['field']}")
                return values[step["field"]]
            return values
        if op == "restart_server":
            await self.close_raw()
            await asyncio.get_running_loop().run_in_executor(None, restart, self.server)
            return None
        if op == "stop_server":
            await self.close_raw()
            await asyncio.get_running_loop().run_in_executor(None, stop, self.server)
            return None
        if op == "start_server":
            await self.close_raw()
            await asyncio.get_running_loop().run_in_executor(None, start, self.server)
            return None
        if op == "pause_server":
            # A connection of the runner's own, closed at once: the pause
            # holds every other connection, the runner's raw ones included.
            conn = RawConnection(self.server.port)
            try:
                await conn.execute_command("CLIENT", "PAUSE", str(step["ms"]), "ALL")
            finally:
                await conn.aclose()
            return None
        if op == "sleep":
            await asyncio.sleep(step["ms"] / 1000)
            return None
        if op == "campaign":
            return await self.campaign(step)
        if op == "resign":
            guard = self.guard(step)
            if guard.leadership is None:
                raise Failure("resign names a guard that no campaign made")
            if guard.released:
                raise Failure("the guard was released already")
            guard.released = True
            try:
                await guard.leadership.resign()
            except (ResponseError, LockError) as error:
                raise StepError(kind_of(error)) from None
            return None
        if op == "leader":
            try:
                leader = await self.election(step).leader()
            except (redis.exceptions.RedisError, OSError) as error:
                raise StepError(kind_of(error)) from None
            return None if leader is None else {"identity": leader.text, "term": leader.term}
        if op == "observe":
            await self.observe(step)
            return None
        if op == "observed":
            name = step.get("observer")
            if name not in self.observers:
                raise Failure(f"unknown observer {name}")
            return self.observers[name][2]["latest"]
        if op == "stop":
            name = step.get("observer")
            if name not in self.observers:
                raise Failure(f"unknown observer {name}")
            await self.stop(name)
            return None
        raise Failure(f"unknown step {op}")

    async def close_raw(self) -> None:
        for conn in self.conns.values():
            try:
                await conn.aclose()
            except Exception:  # a stopped server's connection is gone already
                pass
        self.conns.clear()

    async def close(self) -> None:
        if self.server.process is None:
            # A scenario that failed with the server stopped: the next one needs it.
            await asyncio.get_running_loop().run_in_executor(None, start, self.server)
        for name in list(self.observers):
            try:
                await self.stop(name)
            except Exception:  # the next scenario starts from FLUSHALL anyway
                pass
        for _kind, task in self.tasks.values():
            task.cancel()
            try:
                await task
            except BaseException:  # the scenario's outcome is decided already
                pass
        for guard in self.guards.values():
            if not guard.released and guard.lock.local.token is not None:
                try:
                    await guard.lock.release()
                except Exception:  # the next scenario starts from FLUSHALL anyway
                    pass
        for conn in self.conns.values():
            await conn.aclose()
        for client in self.clients.values():
            # redis-py 5.0.0 has close() only (aclose() came with 5.0.1).
            await (client.aclose() if hasattr(client, "aclose") else client.close())


class RawConnection:
    """A plain connection of the runner's own (not the client library's):
    replies as the server sent them (no redis-py response callbacks), no
    retries, no re-sends."""

    def __init__(self, port: int) -> None:
        # Longer than any pause of a scenario (README, pause_server).
        self.conn = redis.asyncio.Connection(
            port=port, protocol=2, retry=Retry(NoBackoff(), 0), socket_timeout=RAW_READ_TIMEOUT
        )

    async def execute_command(self, *args: Any) -> Any:
        await self.conn.send_command(*args)
        return await self.conn.read_response()

    async def aclose(self) -> None:
        await self.conn.disconnect()


def restart(server: Any) -> None:
    """Stops the server and starts it again on the same port, without
    persistence: every key is gone."""
    stop(server)
    start(server)


def stop(server: Any) -> None:
    """SIGKILL: the server is gone; its port refuses connections."""
    if server.process is not None:
        server.process.kill()
        server.process.wait()
        server.process = None


def start(server: Any) -> None:
    """Starts the stopped server again on the same port, without persistence."""
    end = time.monotonic() + PATIENCE
    while not server._spawn():
        if time.monotonic() > end:
            raise RuntimeError(f"{server.kind} did not restart; log:\n{server.log()}")
        time.sleep(0.1)


async def run_scenario(server: Any, scenario: dict[str, Any]) -> None:
    for run in range(1, scenario.get("repeat", 1) + 1):
        try:
            await run_once(server, scenario)
        except Failure as failure:
            if "repeat" not in scenario:
                raise
            raise Failure(f"run {run}: {failure}") from None


async def run_once(server: Any, scenario: dict[str, Any]) -> None:
    runner = Runner(server)
    admin = runner.raw("admin")
    await admin.execute_command("CLIENT", "UNPAUSE")
    await admin.execute_command("FLUSHALL")
    try:
        for index, step in enumerate(scenario["steps"], 1):
            try:
                await runner.step(step)
            except Failure as failure:
                raise Failure(f"step {index} ({step['op']}): {failure}") from None
    finally:
        await runner.close()


@pytest.mark.parametrize("scenario", _scenarios())
def test_conformance(server, scenario):
    counts = CONFORMANCE_COUNTS.setdefault(server.kind, [0, 0])
    reason = scenario.get("skip", {}).get(LANGUAGE)
    if reason is not None:
        counts[1] += 1
        pytest.skip(reason)
    counts[0] += 1
    try:
        asyncio.run(run_scenario(server, scenario))
    except Failure as failure:
        pytest.fail(f"{scenario['name']}: {failure}", pytrace=False)
