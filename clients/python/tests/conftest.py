"""Real servers for the suite: redis-server and Valkey, each with the module
loaded, on a free port in a temporary directory, stopped at the end of the
session whatever happens (as tests/common/mod.rs does for the Rust suites).

``DLOCK_MODULE`` selects the module (default: target/release/libdlock.so of
this repository), ``DLOCK_REDIS_SERVER`` the redis-server binary of kind
``redis`` (default ``redis-server``, Redis 7.0 here), ``DLOCK_REDIS8_SERVER``
the one of kind ``redis8`` (default: what scripts/fetch-redis8.sh prints),
``DLOCK_VALKEY_SERVER`` the Valkey binary (default: what
scripts/fetch-valkey.sh prints) and ``DLOCK_PY_SERVERS`` which kinds run
(``redis,valkey`` by default; ``make python-test`` runs ``redis8`` with the
oldest redis-py)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from dlock._core import parse_info
from dlock._sync import call_on_own_connection


def pytest_configure(config) -> None:  # type: ignore[no-untyped-def]
    # The interrupted-wait tests send SIGINT to the process and expect
    # KeyboardInterrupt. A shell starts a background job (`make test &`
    # without job control, nohup, some CI runners) with SIGINT ignored, and
    # Python then installs no handler: the signal would be dropped and the
    # tests fail for a reason that is not dlock's. Restore Python's own.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_WorkerCounts())


REPO = Path(__file__).resolve().parents[3]
PATIENCE = 20.0


def wait_until(predicate: Callable[[], object], timeout: float = PATIENCE, what: str = "a condition") -> object:
    """Polls ``predicate`` until it returns a true value; fails the test at
    the deadline."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.002)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class NoTLS(RuntimeError):
    """The server binary has no TLS built in (its log says so)."""


class Server:
    """``tls``: a server with only a TLS port (``port 0``, ``tls-port``, the
    settings of docs/operations.md's "TLS and ACL users"), its certificates
    made by scripts/tls-test-certs.sh in ``dir/tls`` (``ca_file`` the CA);
    ``port`` is then the TLS port and ``client()`` connects with TLS as the
    default user. Raises ``NoTLS`` when the binary has no TLS."""

    def __init__(self, binary: str, kind: str, tls: bool = False) -> None:
        self.binary = binary
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix=f"dlock-py-{kind}-")
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.tls = tls
        self.ca_file = str(Path(self.dir) / "tls" / "ca.crt")
        if tls:
            subprocess.run([str(REPO / "scripts" / "tls-test-certs.sh"), str(Path(self.dir) / "tls")], check=True)
        module = os.environ.get("DLOCK_MODULE", str(REPO / "target" / "release" / "libdlock.so"))
        if not Path(module).exists():
            raise RuntimeError(f"{module} is missing: run `cargo build --release` first")
        self.module = module
        for _attempt in range(5):
            self.port = free_port()
            if self._spawn():
                return
        log = self.log()
        self.stop()
        if tls and ("TLS support" in log or "connection type tls" in log):
            raise NoTLS(f"{binary} has no TLS built in")
        raise RuntimeError(f"{kind} did not start; log:\n{log}")

    def _listen_args(self) -> list[str]:
        if not self.tls:
            return ["--port", str(self.port)]
        certs = Path(self.dir) / "tls"
        return [
            "--port",
            "0",
            "--tls-port",
            str(self.port),
            "--tls-cert-file",
            str(certs / "server.crt"),
            "--tls-key-file",
            str(certs / "server.key"),
            "--tls-ca-cert-file",
            str(certs / "ca.crt"),
            "--tls-auth-clients",
            "no",
        ]

    def _spawn(self) -> bool:
        self.process = subprocess.Popen(
            [
                self.binary,
                *self._listen_args(),
                "--bind",
                "127.0.0.1",
                "--dir",
                self.dir,
                "--logfile",
                "server.log",
                "--daemonize",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
                "--loadmodule",
                self.module,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        end = time.monotonic() + PATIENCE
        while time.monotonic() < end:
            if self.process.poll() is not None:
                self.process = None
                return False
            try:
                # A server that could not bind its port exits, but until it
                # has, another test's server may answer there: only our own
                # process counts. INFO answers while the data set loads;
                # PING only once it is loaded.
                # No retries: redis-py's default backoff would spend seconds
                # on a server that is not listening yet (or exited).
                client = self.client(socket_timeout=5, retry=Retry(NoBackoff(), 0))
                if client.ping() and client.info("server").get("process_id") == self.process.pid:
                    return True
            except redis.ConnectionError:
                pass
            time.sleep(0.01)
        return False

    def log(self) -> str:
        try:
            return (Path(self.dir) / "server.log").read_text()
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def client(self, **options: object) -> redis.Redis:
        if self.tls:
            options = {"ssl": True, "ssl_ca_certs": self.ca_file, **options}
        return redis.Redis(port=self.port, **options)

    def has_command(self, name: str) -> bool:
        # Read raw: redis-py's COMMAND reply parser does not take a null entry.
        reply = call_on_own_connection(self.client(), [["COMMAND", "INFO", name]])[0]
        return bool(reply) and reply[0] is not None


#: Per server kind: the variable naming its binary, and the script that
#: prints one when the variable is unset (None: ``redis-server`` on PATH).
SERVER_KINDS: dict[str, tuple[str, str | None]] = {
    "redis": ("DLOCK_REDIS_SERVER", None),
    "redis8": ("DLOCK_REDIS8_SERVER", "fetch-redis8.sh"),
    "valkey": ("DLOCK_VALKEY_SERVER", "fetch-valkey.sh"),
}


def server_binary(kind: str) -> str:
    """The server binary of a kind of ``DLOCK_PY_SERVERS``."""
    if kind not in SERVER_KINDS:
        raise ValueError(f"unknown server kind {kind!r} (known: {', '.join(SERVER_KINDS)})")
    variable, script = SERVER_KINDS[kind]
    path = os.environ.get(variable)
    if path:
        return path
    if script is None:
        return "redis-server"
    out = subprocess.run([str(REPO / "scripts" / script)], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def server_kinds() -> list[str]:
    """The kinds of ``DLOCK_PY_SERVERS``, in its order."""
    return [k.strip() for k in os.environ.get("DLOCK_PY_SERVERS", "redis,valkey").split(",") if k.strip()]


@pytest.fixture(scope="session", params=server_kinds())
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    kind = request.param
    srv = Server(server_binary(kind), kind)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session", params=server_kinds())
def tls_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """A TLS-only server of each kind (skipped where the binary has no TLS)."""
    kind = request.param
    try:
        srv = Server(server_binary(kind), kind, tls=True)
    except NoTLS as error:
        pytest.skip(str(error))
    try:
        yield srv
    finally:
        srv.stop()


def _cluster_kinds() -> list[str]:
    wanted = os.environ.get("DLOCK_PY_CLUSTER_SERVERS", "redis,redis8")
    return [k.strip() for k in wanted.split(",") if k.strip() and k.strip() in server_kinds()]


@pytest.fixture(scope="session", params=_cluster_kinds())
def cluster(request: pytest.FixtureRequest) -> Iterator[object]:
    """A Redis Cluster of three primaries with the module loaded
    (tests/cluster_support.py), for the whole session; stopped whatever
    happens. ``DLOCK_PY_CLUSTER_SERVERS`` (default ``redis,redis8``: the
    Redis kinds, not Valkey) says of which kinds of ``DLOCK_PY_SERVERS``."""
    from cluster_support import Cluster

    kind = request.param
    running = Cluster(server_binary(kind), kind)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def r(server: Server) -> Iterator[redis.Redis]:
    client = server.client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def key(request: pytest.FixtureRequest) -> str:
    return f"{request.node.name}:{uuid.uuid4().hex[:8]}"


def require(server: Server, *commands: str, option: str | None = None) -> None:
    """Skips the test when the server lacks a command (not merged yet)."""
    for command in commands:
        if not server.has_command(command):
            pytest.skip(f"{command} is not on this server yet (COMMAND INFO has no entry)")


def require_shared(server: Server) -> None:
    """Skips the test unless DLOCK.ACQUIRE knows SHARED (issue 11)."""
    client = server.client()
    probe = f"probe:{uuid.uuid4().hex}"
    try:
        client.execute_command("DLOCK.ACQUIRE", probe, "probe", 1000, "SHARED")
    except redis.ResponseError as error:
        pytest.skip(f"DLOCK.ACQUIRE ... SHARED is not on this server yet ({error})")
    client.execute_command("DLOCK.RELEASE", probe, "probe", "SHARED")


def info(client: redis.Redis, key: str) -> dict | None:
    """DLOCK.INFO as a dict with str keys (RESP2 pairs or a RESP3 map)."""
    return parse_info(client.execute_command("DLOCK.INFO", key))


#: Per server kind, [run, skipped] scenarios of test_conformance.py (with
#: pytest-xdist: of this worker, and in the controller the sum over them).
CONFORMANCE_COUNTS: dict = {}


class _WorkerCounts:
    """Under pytest-xdist (``make python-test`` runs ``-n 3``) each worker
    counts its own scenarios: a worker hands its counts over at its end,
    and the controller adds them up for the summary line."""

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = getattr(session.config, "workeroutput", None)
        if output is not None:  # in a worker
            output["dlock_conformance_counts"] = {kind: list(pair) for kind, pair in CONFORMANCE_COUNTS.items()}

    @pytest.hookimpl
    def pytest_testnodedown(self, node, error) -> None:  # type: ignore[no-untyped-def]
        got = getattr(node, "workeroutput", {}).get("dlock_conformance_counts", {})
        for kind, (run, skipped) in got.items():
            counts = CONFORMANCE_COUNTS.setdefault(kind, [0, 0])
            counts[0] += run
            counts[1] += skipped


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    terminalreporter.write_line(f"redis-py {redis.__version__} ({Path(redis.__file__).parent})")
    for kind, (run, skipped) in sorted(CONFORMANCE_COUNTS.items()):
        terminalreporter.write_line(f"conformance ({kind}): {run} run, {skipped} skipped")
