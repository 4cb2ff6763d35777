/**
 * The library matrix: every reply dlock reads, through each library of
 * {@link LIBRARIES} (node-redis 5 and 6, ioredis 5 and 6, RESP2 and RESP3),
 * on one redis-server. A grant, a busy try and a busy wait, an aborted
 * wait, a renewal, NOTOWNER and WRONGTYPE errors, a multi-lock, a weighted
 * semaphore, a latch, an election's leader and observer (the `DLOCK.INFO`
 * and `DLOCK.WATCH` readers that RESP3 maps broke), and 2^63-1 read exactly.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  Dlock,
  LockBusyError,
  NotOwnerError,
  ServerError,
  toBigInt,
  type ClientLike,
} from "../src/index.js";
import { toTransport } from "../src/adapters.js";
import { LIBRARIES, Server, eventually, libraryClient } from "./support.js";

describe("library matrix on redis", () => {
  let server: Server;
  before(async () => {
    server = await Server.start("redis");
  });
  after(async () => {
    await server.stop();
  });

  for (const library of LIBRARIES) {
    it(library, async () => {
      const user = await libraryClient(library, server.port);
      const dlock = new Dlock(user.client as ClientLike);
      const k = (name: string) => `${library}:${name}`;
      try {
        // A grant, read exactly; a busy try; a busy wait on a pooled connection.
        const lease = await dlock.acquire(k("a"), { ttl: 5_000 });
        assert.equal(typeof lease.token, "bigint");
        assert.equal(BigInt(String((await server.info(k("a")))?.["token"])), lease.token);
        assert.equal(lease.holds, 1);
        assert.equal(await dlock.tryAcquire(k("a")), null);
        await assert.rejects(dlock.acquire(k("a"), { wait: 50 }), LockBusyError);
        // An aborted wait (CLIENT ID, CLIENT UNBLOCK) leaves no waiter.
        const controller = new AbortController();
        const waiting = dlock.acquire(k("a"), { wait: 10_000, signal: controller.signal });
        await eventually(
          "the wait blocks",
          5_000,
          async () => (await server.info(k("a")))?.["waiting"] === "1",
        );
        controller.abort(new Error("stop"));
        await assert.rejects(waiting, /stop/);
        await eventually(
          "no waiter is left",
          5_000,
          async () => (await server.info(k("a")))?.["waiting"] === "0",
        );
        await lease.renew();
        assert.equal(lease.held, true);
        await lease.release();
        assert.equal(await server.info(k("a")), null);

        // NOTOWNER and WRONGTYPE.
        const gone = await dlock.acquire(k("gone"));
        await server.admin.del(k("gone"));
        await assert.rejects(gone.release(), NotOwnerError);
        await server.admin.set(k("str"), "x");
        await assert.rejects(
          dlock.acquire(k("str")),
          (err) => err instanceof ServerError && err.code === "WRONGTYPE",
        );

        // A multi-lock: one grant per key.
        const both = await dlock.acquireMany([k("m1"), k("m2")]);
        assert.equal(both.tokens.length, 2);
        assert.ok((both.tokens[1] as bigint) > (both.tokens[0] as bigint));
        await both.release();

        // A weighted semaphore.
        const permits = dlock.semaphore(k("sem"), 3);
        const heavy = await permits.acquire({ weight: 2 });
        assert.equal(await permits.tryAcquire({ weight: 2 }), null);
        const light = await permits.acquire({ weight: 1 });
        await Promise.all([heavy.release(), light.release()]);

        // A latch: its count comes from DLOCK.INFO.
        const latch = dlock.latch(k("latch"));
        assert.equal(await latch.init(2, 10_000), true);
        assert.equal(await latch.count(), 2n);
        await latch.countDown();
        assert.equal(await latch.count(), 1n);
        const opened = latch.wait(5_000);
        await latch.countDown();
        assert.equal(await opened, "opened");
        assert.equal(await latch.count(), null);

        // Election: leader() reads DLOCK.INFO, observe() DLOCK.WATCH.
        const election = dlock.election(k("e"));
        assert.equal(await election.leader(), null);
        const leadership = await election.campaign("host#a:1", { ttl: 5_000 });
        const leader = await election.leader();
        assert.equal(leader?.identity, "host#a:1");
        assert.equal(leader?.term, leadership.term);
        const stop = new AbortController();
        for await (const seen of election.observe({ signal: stop.signal })) {
          assert.equal(seen?.identity, "host#a:1");
          assert.equal(seen?.term, leadership.term);
          stop.abort();
        }
        await leadership.resign();
        assert.equal(await election.leader(), null);

        // dlock's connections read 2^63-1 exactly, whatever the user's client does.
        const conn = await toTransport(user.client as ClientLike).connect();
        try {
          await conn.call(["SET", k("int"), "9223372036854775806"]);
          assert.equal(toBigInt(await conn.call(["INCR", k("int")]), "INCR"), 2n ** 63n - 1n);
        } finally {
          conn.close();
        }
      } finally {
        await dlock.close();
        await user.close();
      }
    });
  }
});
