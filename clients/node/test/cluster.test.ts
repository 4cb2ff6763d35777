import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Dlock, DlockError, slotOf } from "../src/index.js";
import {
  ADAPTERS,
  TestCluster,
  type UserCluster,
  eventually,
  serverKinds,
  sleep,
  userCluster,
} from "./support.js";

for (const kind of serverKinds()) {
  describe(`cluster of three masters on ${kind}`, () => {
    let cluster: TestCluster;
    before(async () => {
      cluster = await TestCluster.start(kind);
    });
    after(async () => {
      await cluster.stop();
    });

    /** MOVED replies counted by every node since it started. */
    async function movedCount(): Promise<number> {
      let total = 0;
      for (const server of cluster.servers) {
        const stats = String(await server.admin.call("INFO", "errorstats"));
        total += Number(/errorstat_MOVED:count=(\d+)/.exec(stats)?.[1] ?? 0);
      }
      return total;
    }

    for (const adapter of ADAPTERS) {
      describe(adapter, () => {
        let user: UserCluster;
        let dlock: Dlock;
        before(async () => {
          user = await userCluster(adapter, cluster);
          dlock = new Dlock(user.client);
        });
        after(async () => {
          await dlock.close();
          await user.close();
        });

        it("routes every command to the master of its key's slot, without MOVED", async () => {
          const keys = Array.from({ length: 12 }, (_, i) => `${adapter}:route:${i}`);
          const nodes = new Set(keys.map((key) => cluster.serverOfSlot(slotOf(key)).port));
          assert.equal(nodes.size, 3, "the keys spread over the three masters");
          const before = await movedCount();
          const leases = await Promise.all(keys.map((key) => dlock.acquire(key, { ttl: 1_000 })));
          for (const [i, key] of keys.entries()) {
            const owner = cluster.serverOfSlot(slotOf(key));
            const info = await owner.info(key);
            assert.equal(BigInt(String(info?.["token"])), leases[i]?.token);
          }
          await sleep(1_200); // past the lease: the watchdog renewed on the right nodes
          assert.ok(leases.every((lease) => lease.held));
          await Promise.all(leases.map((lease) => lease.release()));
          for (const key of keys)
            assert.equal(await cluster.serverOfSlot(slotOf(key)).info(key), null);
          assert.equal(await movedCount(), before, "no MOVED on the normal path");
        });

        it("takes a multi-lock on one slot and refuses keys of different slots before sending", async () => {
          const keys = [`{${adapter}:order}:pay`, `{${adapter}:order}:stock`];
          const lease = await dlock.acquireMany(keys);
          assert.equal(lease.tokens.length, 2);
          await lease.release();
          const spread = [`${adapter}:a`, `${adapter}:b`, `${adapter}:c`];
          await assert.rejects(
            dlock.acquireMany(spread),
            (e) => e instanceof DlockError && e.code === "CROSSSLOT",
          );
        });

        it("a blocking wait and its abort reach the key's node", async () => {
          const key = `${adapter}:wait`;
          const node = cluster.serverOfSlot(slotOf(key));
          const holder = await dlock.acquire(key);
          const controller = new AbortController();
          const waiting = dlock.acquire(key, { wait: 30_000, signal: controller.signal });
          await eventually(
            "the waiter queues",
            5_000,
            async () => (await node.info(key))?.["waiting"] === "1",
          );
          controller.abort(new Error("cancelled"));
          await assert.rejects(waiting, /cancelled/);
          // The CLIENT UNBLOCK runs in the background (R4.7).
          await eventually(
            "the waiter leaves",
            5_000,
            async () => (await node.info(key))?.["waiting"] === "0",
          );
          const second = dlock.acquire(key, { wait: 30_000 });
          await eventually(
            "the waiter queues",
            5_000,
            async () => (await node.info(key))?.["waiting"] === "1",
          );
          await holder.release();
          const next = await second;
          assert.ok(next.token > holder.token);
          await next.release();
        });
      });
    }
  });
}
