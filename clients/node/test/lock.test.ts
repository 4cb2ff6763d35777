import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  Dlock,
  LockBusyError,
  LockLostError,
  LeaseReleasedError,
  DeadlockError,
  NotReplicatedError,
  NotOwnerError,
  type Lease,
} from "../src/index.js";
import {
  ADAPTERS,
  Server,
  type UserClient,
  eventually,
  serverKinds,
  sleep,
  userClient,
} from "./support.js";

for (const kind of serverKinds()) {
  describe(`locks on ${kind}`, () => {
    let server: Server;
    before(async () => {
      server = await Server.start(kind);
    });
    after(async () => {
      await server.stop();
    });

    for (const adapter of ADAPTERS) {
      describe(adapter, () => {
        let user: UserClient;
        let dlock: Dlock;
        const k = (name: string) => `${adapter}:${name}`;
        before(async () => {
          user = await userClient(adapter, server.port);
          dlock = new Dlock(user.client);
        });
        after(async () => {
          await dlock.close();
          await user.close();
        });

        it("acquires with an exact bigint token and releases", async () => {
          const lease = await dlock.acquire(k("a"));
          assert.equal(typeof lease.token, "bigint");
          const info = await server.info(k("a"));
          assert.equal(BigInt(String(info?.["token"])), lease.token);
          assert.equal(info?.["owner"], lease.owner);
          assert.equal(lease.held, true);
          await lease.release();
          await lease.release(); // idempotent
          assert.equal(await server.info(k("a")), null);
          // A release is not a loss (R3.3): the signal does not fire.
          assert.equal(lease.signal.aborted, false);
          assert.equal(lease.lost, false);
          assert.equal(lease.held, false);
          await assert.rejects(lease.renew(), LeaseReleasedError);
        });

        it("keeps a fair poller's place: its next try asks under the same owner (R8)", async () => {
          const holder = await dlock.acquire(k("fair"));
          const poller = new Dlock(user.client);
          const other = new Dlock(user.client);
          try {
            assert.equal(await poller.tryAcquire(k("fair"), { fair: true }), null);
            assert.equal(await poller.tryAcquire(k("fair"), { fair: true }), null);
            await holder.release();
            // The reservation keeps the lock for the poller: a newcomer is refused ...
            assert.equal(await other.tryAcquire(k("fair")), null);
            // ... and the poller's next try gets it, under the owner it reserved with.
            const lease = await poller.tryAcquire(k("fair"), { fair: true });
            assert.ok(lease, "the poller lost its place");
            // A granted owner is not kept: the next acquisition has a new one (R1.1).
            await lease.release();
            const next = await poller.tryAcquire(k("fair"), { fair: true });
            assert.ok(next && next.owner !== lease.owner);
            await next.release();
          } finally {
            await poller.close();
            await other.close();
          }
        });

        it("does not abort the signal of a released lease, read before or after (R3.3)", async () => {
          const early = await dlock.acquire(k("sig"));
          const seen: unknown[] = [];
          early.signal.addEventListener("abort", () => seen.push(early.signal.reason));
          await early.release();
          const late = await dlock.acquire(k("sig"), { autoRenew: false });
          await late.release();
          assert.equal(early.signal.aborted, false);
          assert.equal(late.signal.aborted, false);
          // A NOTOWNER at the release of a lease not known lost is the loss: it fires then.
          const gone = await dlock.acquire(k("sig"));
          const signal = gone.signal;
          await server.admin.del(k("sig"));
          await assert.rejects(gone.release(), NotOwnerError);
          assert.equal(signal.aborted, true);
          assert.ok(signal.reason instanceof LockLostError);
          assert.equal(gone.lost, true);
          await new Promise((resolve) => setImmediate(resolve));
          assert.deepEqual(seen, []);
        });

        it("gives every acquisition an owner of its own (R1.1)", async () => {
          const other = new Dlock(user.client);
          try {
            const leases = [
              await dlock.acquire(k("own1")),
              await dlock.acquire(k("own2")),
              await other.acquire(k("own3")),
            ];
            const owners = leases.map((lease) => lease.owner);
            assert.equal(new Set(owners).size, owners.length, `${owners}`);
            for (const owner of owners) assert.match(owner, /^[0-9a-f]{32}-[0-9a-z]+$/);
            // Re-taking a released lock is a new acquisition: a new owner.
            await leases[0]?.release();
            const again = await dlock.acquire(k("own1"));
            assert.ok(!owners.includes(again.owner), again.owner);
            for (const lease of [...leases, again]) await lease.release();
          } finally {
            await other.close();
          }
        });

        it("tryAcquire resolves null when busy, acquire rejects LockBusyError", async () => {
          const held = await dlock.acquire(k("busy"));
          assert.equal(await dlock.tryAcquire(k("busy")), null);
          await assert.rejects(dlock.acquire(k("busy")), LockBusyError);
          await assert.rejects(dlock.acquire(k("busy"), { wait: 50 }), LockBusyError);
          await held.release();
        });

        it("a blocking wait is granted at the release, and never stalls other commands", async () => {
          const held = await dlock.acquire(k("handoff"));
          const waiting = dlock.acquire(k("handoff"), { wait: 10_000 });
          await eventually(
            "the waiter queues",
            5_000,
            async () => (await server.info(k("handoff")))?.["waiting"] === "1",
          );
          // The shared command connection still answers while the wait blocks.
          const other = await dlock.acquire(k("other"));
          await other.release();
          await held.release();
          const next = await waiting;
          assert.ok(next.token > held.token);
          await next.release();
        });

        it("re-enters with the same owner", async () => {
          const first = await dlock.acquire(k("re"), { owner: `${adapter}-me` });
          const second = await dlock.acquire(k("re"), { owner: `${adapter}-me` });
          assert.equal(second.token, first.token);
          assert.equal(second.holds, 2);
          await second.release();
          await first.release();
          assert.equal(await server.info(k("re")), null);
        });

        it("withLock releases after the routine, await using at the end of the block", async () => {
          const token = await dlock.withLock(k("with"), {}, async (lease, signal) => {
            assert.equal(signal.aborted, false);
            assert.ok(await server.info(k("with")));
            return lease.token;
          });
          assert.equal(typeof token, "bigint");
          assert.equal(await server.info(k("with")), null);
          {
            await using lease = await dlock.acquire(k("using"));
            assert.ok(lease.held);
            assert.ok(await server.info(k("using")));
          }
          assert.equal(await server.info(k("using")), null);
        });

        it("withLock rethrows the routine's error and still releases", async () => {
          await assert.rejects(
            dlock.withLock(k("throws"), {}, async () => {
              throw new Error("boom");
            }),
            /boom/,
          );
          assert.equal(await server.info(k("throws")), null);
        });

        it("the watchdog keeps a 500 ms lease for 1.2 s", async () => {
          const lease = await dlock.acquire(k("dog"), { ttl: 500 });
          await sleep(1_200);
          assert.equal(lease.held, true);
          const info = await server.info(k("dog"));
          assert.equal(BigInt(String(info?.["token"])), lease.token);
          await lease.release();
        });

        it("one watchdog for many leases: each of mixed ttls renewed, one lost alone, released ones gone", async () => {
          const ttls = [900, 300, 600, 450, 300, 750, 600, 350, 900, 400, 500, 300];
          const leases = await Promise.all(
            ttls.map((ttl, i) => dlock.acquire(k(`many${i}`), { ttl })),
          );
          const released = [1, 5, 9];
          await Promise.all(released.map((i) => (leases[i] as Lease).release()));
          await server.admin.del(k("many6"));
          const kept = ttls.map((_, i) => i).filter((i) => i !== 6 && !released.includes(i));
          // A renewal shows as the server's pttl going up; wait for two of each lease.
          const lastPttl = new Map<number, number>();
          const renewals = new Map<number, number>(kept.map((i) => [i, 0]));
          await eventually("every kept lease renewed twice", 5_000, async () => {
            for (const i of kept) {
              const info = await server.info(k(`many${i}`));
              assert.equal(BigInt(String(info?.["token"])), (leases[i] as Lease).token);
              const pttl = Number(info?.["pttl"]);
              if (pttl > (lastPttl.get(i) ?? Infinity)) renewals.set(i, (renewals.get(i) ?? 0) + 1);
              lastPttl.set(i, pttl);
            }
            return kept.every((i) => (renewals.get(i) as number) >= 2);
          });
          await eventually("the deleted one is lost", 2_000, () => (leases[6] as Lease).lost);
          for (const i of kept) assert.equal((leases[i] as Lease).held, true, `lease ${i} held`);
          for (const i of released) {
            assert.equal(await server.info(k(`many${i}`)), null);
            assert.equal((leases[i] as Lease).lost, false);
          }
          await Promise.all(kept.map((i) => (leases[i] as Lease).release()));
          assert.equal(dlock.watchdog.size, 0);
        });

        it("a deleted lock aborts the signal with LockLostError", async () => {
          const lease = await dlock.acquire(k("del"), { ttl: 300 });
          await server.admin.del(k("del"));
          await eventually("the lease is lost", 2_000, () => lease.signal.aborted);
          assert.ok(lease.signal.reason instanceof LockLostError);
          assert.equal(lease.lost, true);
          await lease.release(); // no error for a lost lease
        });

        it("without renewals the lease is lost at its local deadline, before the server's", async () => {
          const lease = await dlock.acquire(k("norenew"), { ttl: 200, autoRenew: false });
          const lostAt = await new Promise<number>((r) =>
            lease.signal.addEventListener("abort", () => r(Date.now())),
          );
          assert.ok(lease.signal.reason instanceof LockLostError);
          // The server still holds it for the margin (5 ms + 1%) at least: the client knew first.
          const pttl = Number((await server.info(k("norenew")))?.["pttl"] ?? -1);
          assert.ok(pttl >= 0 || Date.now() - lostAt >= 0);
          await lease.release();
        });

        it("acquireMany takes every key at once", async () => {
          const keys = [k("{m}1"), k("{m}2")];
          const blocker = await dlock.acquire(keys[1] as string);
          assert.equal(await dlock.tryAcquireMany(keys), null);
          assert.equal(await server.info(keys[0] as string), null);
          await blocker.release();
          const both = await dlock.acquireMany(keys);
          assert.equal(both.tokens.length, 2);
          assert.notEqual(both.tokens[0], both.tokens[1]);
          await both.release();
          assert.equal(await server.info(keys[0] as string), null);
          assert.equal(await server.info(keys[1] as string), null);
        });

        it("read locks share, a write lock excludes, a second upgrader gets DEADLOCK", async () => {
          const r1 = await dlock.readLock(k("rw"), { owner: `${adapter}-r1` });
          const r2 = await dlock.readLock(k("rw"), { owner: `${adapter}-r2` });
          assert.equal(await dlock.tryAcquire(k("rw")), null);
          const upgrade = dlock.writeLock(k("rw"), { owner: `${adapter}-r1`, wait: 10_000 });
          await eventually(
            "the upgrade waits",
            5_000,
            async () => (await server.info(k("rw")))?.["waiting"] === "1",
          );
          await assert.rejects(
            dlock.writeLock(k("rw"), { owner: `${adapter}-r2`, wait: 1_000 }),
            DeadlockError,
          );
          await r2.release();
          const w = await upgrade;
          assert.equal(w.shared, false);
          await w.release();
          await r1.release();
          assert.equal(await server.info(k("rw")), null);
        });

        it("a semaphore grants permits by weight up to its limit, then queues", async () => {
          const sem = dlock.semaphore(k("sem"), 3);
          const one = await sem.acquire();
          const two = await sem.acquire({ weight: 2 });
          assert.equal(await sem.tryAcquire(), null);
          const waiting = sem.acquire({ weight: 2, wait: 10_000 });
          await eventually(
            "the permit request waits",
            5_000,
            async () => (await server.info(k("sem")))?.["waiting"] === "1",
          );
          await one.release();
          assert.equal((await server.info(k("sem")))?.["waiting"], "1", "2 + 2 > 3: still waiting");
          await two.release();
          const granted = await waiting;
          assert.equal(granted.shared, true);
          await granted.release();
          assert.equal(await server.info(k("sem")), null);
        });

        it("replicas: fewer confirmations than asked release the grant and reject", async () => {
          await assert.rejects(
            dlock.acquire(k("replicas"), { replicas: { count: 1, timeout: 50 } }),
            (e) => e instanceof NotReplicatedError && e.wanted === 1 && e.acked === 0,
          );
          assert.equal(await server.info(k("replicas")), null);
        });

        it("SESSION holds end with dlock's connection", async () => {
          const other = new Dlock(user.client);
          await other.acquire(k("session"), { session: true });
          assert.ok(await server.info(k("session")));
          await other.close();
          await eventually(
            "the session hold ends",
            5_000,
            async () => (await server.info(k("session"))) === null,
          );
        });

        it("refuses a key that is not a string before sending, as node-redis does (R9.2)", async () => {
          for (const key of [null, undefined, 42]) {
            await assert.rejects(dlock.acquire(key as unknown as string), TypeError);
            await assert.rejects(dlock.tryAcquire(key as unknown as string), TypeError);
            await assert.rejects(dlock.acquireMany([k("m"), key as unknown as string]), TypeError);
          }
          for (const ghost of ["", "null", "undefined", "42"])
            assert.equal(await server.info(ghost), null);
          assert.equal(await server.info(k("m")), null);
        });

        it("holds a ttl and a wait above what a timer holds without a 1 ms timer (R9.2)", async () => {
          // 200 days of lease (ttl / 3 above 2^31-1 ms) and 30 days of wait
          // (the read timeout above it): Node would fire such a timer after
          // 1 ms, again and again, with a TimeoutOverflowWarning each time.
          const warnings: Error[] = [];
          const onWarning = (warning: Error) => {
            if (warning.name === "TimeoutOverflowWarning") warnings.push(warning);
          };
          process.on("warning", onWarning);
          try {
            const day = 24 * 3600 * 1000;
            const lease = await dlock.acquire(k("long"), { ttl: 200 * day, wait: 30 * day });
            const info = await server.info(k("long"));
            assert.ok(Number(info?.["pttl"]) > 199 * day);
            await sleep(100);
            assert.equal(lease.held, true);
            await lease.release();
            await sleep(10);
          } finally {
            process.off("warning", onWarning);
          }
          assert.deepEqual(warnings, []);
        });
      });
    }
  });
}
