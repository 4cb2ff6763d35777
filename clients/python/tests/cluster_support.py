"""A Redis Cluster of three primaries for the suite: each node a ``Server``
of conftest.py (the module loaded, a free port, its own directory) with
cluster mode on and its bus on a free port of its own, a third of the slots
each, met through the first node; stopped whatever happens."""

from __future__ import annotations

import time

import redis
from redis.crc import key_slot

from conftest import PATIENCE, Server, free_port, info

#: The slot ranges of the three primaries (as ``redis-cli --cluster create``).
RANGES = [(0, 5460), (5461, 10922), (10923, 16383)]


class ClusterNode(Server):
    """A ``Server`` in cluster mode (``--cluster-port`` a free port, so two
    suites never fight over port+10000)."""

    def _listen_args(self) -> list[str]:
        self.bus_port = free_port()
        return [
            *super()._listen_args(),
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
            "--cluster-port",
            str(self.bus_port),
        ]


class Cluster:
    """Three primaries serving every slot; ``nodes[i]`` serves ``RANGES[i]``
    until a test moves a slot."""

    def __init__(self, binary: str, kind: str) -> None:
        self.kind = kind
        self.nodes: list[ClusterNode] = []
        try:
            for _ in RANGES:
                self.nodes.append(ClusterNode(binary, kind))
            first = self.nodes[0]
            for node, (low, high) in zip(self.nodes, RANGES):
                client = node.client()
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
                if node is not first:
                    client.execute_command("CLUSTER", "MEET", "127.0.0.1", first.port, first.bus_port)
                client.close()
            end = time.monotonic() + PATIENCE
            for node in self.nodes:
                client = node.client()
                while True:
                    state = client.execute_command("CLUSTER", "INFO")
                    state = state.decode() if isinstance(state, bytes) else str(state)
                    if "cluster_state:ok" in state and "cluster_known_nodes:3" in state:
                        break
                    if time.monotonic() > end:
                        raise RuntimeError(f"the cluster did not settle: {state}")
                    time.sleep(0.02)
                client.close()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def client(self, **options: object) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, **options)

    def serving(self, key: str) -> ClusterNode:
        """The node that serves ``key``'s slot now (the others answer MOVED)."""
        for node in self.nodes:
            client = node.client()
            try:
                client.execute_command("DLOCK.INFO", key)
                return node
            except redis.ResponseError as error:
                # MovedError where the plain client's parser knows MOVED (redis-py 6+)
                if isinstance(error, redis.exceptions.MovedError) or str(error).startswith("MOVED"):
                    continue
                raise
            finally:
                client.close()
        raise AssertionError(f"no node serves {key}")

    def node_id(self, node: ClusterNode) -> str:
        client = node.client()
        try:
            reply = client.execute_command("CLUSTER", "MYID")
            return reply.decode() if isinstance(reply, bytes) else str(reply)
        finally:
            client.close()

    def key_on(self, index: int, prefix: str) -> str:
        """A key starting with ``prefix`` whose slot ``nodes[index]`` was given."""
        low, high = RANGES[index]
        for n in range(100_000):
            name = f"{prefix}:{n}"
            if low <= key_slot(name.encode()) <= high:
                return name
        raise AssertionError("no key found")

    def info(self, key: str) -> dict | None:
        """``DLOCK.INFO key`` on the node serving the key."""
        client = self.serving(key).client()
        try:
            return info(client, key)
        finally:
            client.close()

    def errors(self, code: str) -> int:
        """How many ``code`` error replies (MOVED, ASK, CROSSSLOT) every node
        sent since it started (``INFO errorstats``)."""
        total = 0
        for node in self.nodes:
            client = node.client()
            try:
                stats = client.info("errorstats")
            finally:
                client.close()
            total += int(stats.get(f"errorstat_{code}", {}).get("count", 0))
        return total

    def calls(self, command: str) -> int:
        """How many times every node ran ``command`` (``INFO commandstats``)."""
        total = 0
        for node in self.nodes:
            client = node.client()
            try:
                stats = client.info("commandstats")
            finally:
                client.close()
            total += int(stats.get(f"cmdstat_{command.lower()}", {}).get("calls", 0))
        return total

    def start_moving(self, key: str, target: ClusterNode) -> None:
        """Marks ``key``'s slot importing on ``target`` and migrating on the
        node serving it (as ``redis-cli --cluster reshard`` does first)."""
        source = self.serving(key)
        slot = key_slot(key.encode())
        self._setslot(target, slot, "IMPORTING", self.node_id(source))
        self._setslot(source, slot, "MIGRATING", self.node_id(target))

    def migrate(self, key: str, source: ClusterNode, target: ClusterNode) -> None:
        """``MIGRATE`` of ``key`` (with its lock) from ``source`` to ``target``."""
        client = source.client()
        try:
            client.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", key)
        finally:
            client.close()

    def finish_moving(self, key: str, target: ClusterNode) -> None:
        """Gives ``key``'s slot to ``target`` on every node."""
        slot = key_slot(key.encode())
        target_id = self.node_id(target)
        for node in [target, *[n for n in self.nodes if n is not target]]:
            self._setslot(node, slot, "NODE", target_id)

    @staticmethod
    def _setslot(node: ClusterNode, slot: int, state: str, node_id: str) -> None:
        client = node.client()
        try:
            client.execute_command("CLUSTER", "SETSLOT", slot, state, node_id)
        finally:
            client.close()

    def add_replica(self, primary: ClusterNode) -> ClusterNode:
        """A fourth node, made a replica of ``primary``; returns once it has
        synced and both it and the primary's view of the cluster are ready
        for a manual failover. Stopped with the cluster."""
        replica = ClusterNode(self.nodes[0].binary, self.kind)
        self.nodes.append(replica)
        end = time.monotonic() + PATIENCE
        primary_id = self.node_id(primary)
        admin, client = primary.client(), replica.client()
        try:
            admin.config_set("repl-diskless-sync-delay", 0)  # no 5 s pause before the sync
            client.execute_command("CLUSTER", "MEET", "127.0.0.1", primary.port, primary.bus_port)
            while True:
                try:
                    client.execute_command("CLUSTER", "REPLICATE", primary_id)
                    break
                except redis.ResponseError:  # the primary is not known yet
                    self._patience(end, "the replica to know its primary")
            while True:
                state = client.execute_command("CLUSTER", "INFO")
                state = state.decode() if isinstance(state, bytes) else str(state)
                if (
                    client.info("replication").get("master_link_status") == "up"
                    and "cluster_state:ok" in state
                    and len(admin.execute_command("CLUSTER", "REPLICAS", primary_id)) == 1
                ):
                    return replica
                self._patience(end, "the replica to sync")
        finally:
            admin.close()
            client.close()

    def fail_over(self, replica: ClusterNode) -> None:
        """``CLUSTER FAILOVER`` on ``replica`` (asked again every 2 s), until
        it is a primary and every node knows it (see ``_agrees``)."""
        end = time.monotonic() + PATIENCE
        asked = 0.0
        client = replica.client()
        try:
            while client.info("replication")["role"] != "master":
                if time.monotonic() > asked + 2:
                    client.execute_command("CLUSTER", "FAILOVER")
                    asked = time.monotonic()
                self._patience(end, "the failover")
        finally:
            client.close()
        replica_id = self.node_id(replica)
        for node in self.nodes:
            while not self._agrees(node, replica_id):
                self._patience(end, f"node {node.port} to see the new primary")

    @staticmethod
    def _agrees(node: ClusterNode, primary_id: str) -> bool:
        """Whether ``node`` sees ``primary_id`` as a primary and every slot
        served. Until the gossip has reached it, a node may already see the
        old primary as a replica but not yet the new one as a primary: its
        slot map then lacks that range, and a ``RedisCluster`` made from it
        later in the session fails ("All slots are not covered")."""
        client = node.client()
        try:
            reply = client.execute_command("CLUSTER", "NODES")
        finally:
            client.close()
        text = reply.decode() if isinstance(reply, bytes) else str(reply)
        served = 0
        promoted = False
        for line in text.splitlines():
            fields = line.split()
            if len(fields) < 8 or "master" not in fields[2].split(","):
                continue
            promoted = promoted or fields[0] == primary_id
            for entry in fields[8:]:
                if entry.startswith("["):  # a slot being moved, listed again
                    continue
                low, _, high = entry.partition("-")
                served += int(high or low) - int(low) + 1
        return promoted and served == 16384

    @staticmethod
    def _patience(end: float, what: str) -> None:
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
