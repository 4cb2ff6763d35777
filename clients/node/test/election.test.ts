import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Dlock, LockLostError, identityOf } from "../src/index.js";
import {
  ADAPTERS,
  Server,
  type UserClient,
  eventually,
  serverKinds,
  userClient,
} from "./support.js";

describe("election owner strings", () => {
  it("the identity is the owner without its campaign id", () => {
    assert.equal(identityOf("host#1:6379#1b4e28ba-2fa1-41d2-883f-0016d3cca427"), "host#1:6379");
    assert.equal(identityOf("host#1:6379#0123456789abcdef0123456789abcdef"), "host#1:6379");
    assert.equal(identityOf("host#not-a-uuid"), "host");
    assert.equal(identityOf("plain"), "plain");
  });
});

for (const kind of serverKinds()) {
  describe(`election on ${kind}`, () => {
    let server: Server;
    let watch = true;
    before(async () => {
      server = await Server.start(kind);
      watch = await server.hasCommand("DLOCK.WATCH");
      if (!watch) console.log(`# SKIPPED election on ${kind}: the module has no DLOCK.WATCH`);
    });
    after(async () => {
      await server.stop();
    });

    for (const adapter of ADAPTERS) {
      describe(adapter, () => {
        let user: UserClient;
        let dlock: Dlock;
        before(async () => {
          user = await userClient(adapter, server.port);
          dlock = new Dlock(user.client);
        });
        after(async () => {
          await dlock.close();
          await user.close();
        });

        it("observe yields the leader, each change, and none; breaking out leaves no watcher", async (t) => {
          if (!watch) return t.skip("no DLOCK.WATCH");
          const election = dlock.election(`${adapter}:e`);
          const seen: Array<string | null> = [];
          const observing = (async () => {
            for await (const leader of election.observe()) {
              seen.push(leader ? `${leader.identity}@${leader.term}` : null);
              if (seen.length === 4) break;
            }
          })();
          await eventually("the first observation", 5_000, () => seen.length === 1);
          assert.deepEqual(seen, [null]);
          const a = await election.campaign("host#a:1", { ttl: 1_000 });
          await eventually("a leads", 5_000, () => seen.length === 2);
          assert.equal(seen[1], `host#a:1@${a.term}`);
          assert.deepEqual(await election.leader().then((l) => l?.identity), "host#a:1");
          const b = election.campaign("host-b", { ttl: 1_000 });
          await eventually(
            "b waits in the queue",
            5_000,
            async () => (await server.info(`${adapter}:e`))?.["waiting"] === "1",
          );
          await a.resign(); // a hand-off in one step: the observer never sees "nobody" here
          const leadership = await b;
          assert.ok(leadership.term > a.term);
          await eventually("b leads", 5_000, () => seen.length === 3);
          assert.equal(seen[2], `host-b@${leadership.term}`);
          // A deleted leadership key: the leader's signal aborts, the observer sees none.
          await server.admin.del(`${adapter}:e`);
          await observing.catch(() => {});
          await eventually("the loss reaches the leader", 2_000, () => leadership.signal.aborted);
          assert.ok(leadership.signal.reason instanceof LockLostError);
          assert.deepEqual(seen.slice(3), [null]);
          await eventually("no watcher is left", 2_000, async () =>
            /dlock_watchers:0\b/.test(String(await server.admin.call("INFO", "dlock"))),
          );
          assert.equal(await election.leader(), null);
        });

        it("aborting observe ends the iterator and unblocks the watch", async (t) => {
          if (!watch) return t.skip("no DLOCK.WATCH");
          const election = dlock.election(`${adapter}:e2`);
          const controller = new AbortController();
          const seen: unknown[] = [];
          const observing = (async () => {
            for await (const leader of election.observe({ signal: controller.signal }))
              seen.push(leader);
          })();
          await eventually("the watch blocks", 5_000, async () =>
            /dlock_watchers:1\b/.test(String(await server.admin.call("INFO", "dlock"))),
          );
          controller.abort();
          await observing;
          assert.deepEqual(seen, [null]);
          await eventually("no watcher is left", 2_000, async () =>
            /dlock_watchers:0\b/.test(String(await server.admin.call("INFO", "dlock"))),
          );
        });
      });
    }
  });
}
