/**
 * Every cancellation path of the TypeScript client, 50-fold and at once
 * (R4.4: a cancelled wait leaves no waiter and no hold behind): an
 * AbortSignal aborted before anything is sent, aborted during the wait,
 * aborted in a race with a grant, and a `wait` that times out in a race
 * with a grant. Each round has its own key; the rounds of one path run
 * together, so the suite takes a few seconds.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Dlock, type Lease, LockBusyError } from "../src/index.js";
import {
  ADAPTERS,
  Server,
  type UserClient,
  eventually,
  serverKinds,
  sleep,
  userClient,
} from "./support.js";

const ROUNDS = 50;
const rounds = Array.from({ length: ROUNDS }, (_, i) => i);

/** How many DLOCK commands the server has received (`INFO commandstats`). */
async function dlockCalls(server: Server): Promise<number> {
  const text = String(await server.admin.call("INFO", "commandstats"));
  let total = 0;
  for (const line of text.split("\n")) {
    if (!line.startsWith("cmdstat_dlock.")) continue;
    for (const field of line.slice(line.indexOf(":") + 1).split(",")) {
      const [name, value] = field.split("=");
      if (name === "calls" || name === "rejected_calls") total += Number(value);
    }
  }
  return total;
}

/** Polls until no key of `keys` exists (no hold, no waiter, no reservation). */
async function nothingLeft(server: Server, keys: string[]): Promise<void> {
  await eventually(`nothing is left on ${keys.length} keys`, 5_000, async () => {
    for (const key of keys) if ((await server.info(key)) !== null) return false;
    return true;
  });
}

/** The lease a call got, or its error. */
function settle(call: Promise<Lease>): Promise<Lease | Error> {
  return call.then(
    (lease) => lease,
    (err: unknown) => err as Error,
  );
}

for (const kind of serverKinds()) {
  describe(`cancellation races on ${kind}`, () => {
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
        before(async () => {
          user = await userClient(adapter, server.port);
        });
        after(async () => {
          await user.close();
        });

        it(`an AbortSignal aborted before the send, ${ROUNDS} times: nothing is sent`, async () => {
          const dlock = new Dlock(user.client);
          try {
            const sent = await dlockCalls(server);
            const reason = new Error("aborted before");
            await Promise.all(
              rounds.map(async (i) => {
                const signal = AbortSignal.abort(reason);
                const key = `${adapter}:before:${i}`;
                await assert.rejects(dlock.acquire(key, { signal }), (e) => e === reason);
                await assert.rejects(
                  dlock.acquire(key, { wait: 5_000, signal }),
                  (e) => e === reason,
                );
              }),
            );
            assert.equal(await dlockCalls(server), sent);
            // Aborted in the same tick as the call, while a client not yet
            // connected opens its connection: the wait is never sent.
            const fresh = new Dlock(user.client);
            try {
              await Promise.all(
                rounds.map(async (i) => {
                  const controller = new AbortController();
                  const waiting = fresh.acquire(`${adapter}:opening:${i}`, {
                    wait: 5_000,
                    signal: controller.signal,
                  });
                  controller.abort(reason);
                  await assert.rejects(waiting, (e) => e === reason);
                }),
              );
              assert.equal(await dlockCalls(server), sent);
            } finally {
              await fresh.close();
            }
          } finally {
            await dlock.close();
          }
        });

        it(`an abort during the wait, ${ROUNDS} waiters: none is left`, async () => {
          const dlock = new Dlock(user.client);
          const key = `${adapter}:during`;
          try {
            const holder = await dlock.acquire(key);
            const controllers = rounds.map(() => new AbortController());
            const waits = controllers.map((c) =>
              settle(dlock.acquire(key, { wait: 30_000, signal: c.signal })),
            );
            await eventually(
              `${ROUNDS} waiters queue`,
              5_000,
              async () => (await server.info(key))?.["waiting"] === String(ROUNDS),
            );
            const reason = new Error("aborted during");
            for (const c of controllers) c.abort(reason);
            for (const outcome of await Promise.all(waits)) assert.equal(outcome, reason);
            await eventually(
              "no waiter is left",
              5_000,
              async () => (await server.info(key))?.["waiting"] === "0",
            );
            await holder.release();
            await nothingLeft(server, [key]);
          } finally {
            await dlock.close();
          }
        });

        it(`an abort racing a grant, ${ROUNDS} times: no waiter and no hold is left`, async () => {
          const dlock = new Dlock(user.client);
          const keys = rounds.map((i) => `${adapter}:race:${i}`);
          try {
            const holders = await Promise.all(keys.map((key) => dlock.acquire(key)));
            const controllers = keys.map(() => new AbortController());
            const waits = keys.map((key, i) =>
              settle(dlock.acquire(key, { wait: 30_000, signal: controllers[i]!.signal })),
            );
            await eventually("every waiter queues", 5_000, async () => {
              for (const key of keys)
                if ((await server.info(key))?.["waiting"] !== "1") return false;
              return true;
            });
            // The abort before the release, in the same tick, or 1 to 9
            // turns of the event loop after it (around when the grant's
            // reply arrives): the grant and the abort race.
            const reason = new Error("aborted in a race");
            const released = keys.map(async (_, i) => {
              if (i % 10 === 0) controllers[i]!.abort(reason);
              const release = holders[i]!.release();
              for (let turn = 0; turn < i % 10; turn++) await new Promise(setImmediate);
              controllers[i]!.abort(reason);
              await release;
            });
            await Promise.all(released);
            let granted = 0;
            for (const outcome of await Promise.all(waits)) {
              if (outcome instanceof Error) {
                assert.equal(outcome, reason);
              } else {
                granted++;
                await outcome.release();
              }
            }
            await nothingLeft(server, keys);
            console.log(`# ${adapter} on ${kind}: ${granted} of ${ROUNDS} grants won the race`);
          } finally {
            await dlock.close();
          }
        });

        it(`a wait timing out against a grant, ${ROUNDS} times: no waiter and no hold is left`, async () => {
          const dlock = new Dlock(user.client);
          const keys = rounds.map((i) => `${adapter}:timeout:${i}`);
          const WAIT = 200;
          try {
            const holders = await Promise.all(keys.map((key) => dlock.acquire(key)));
            const waits = keys.map((key) => settle(dlock.acquire(key, { wait: WAIT })));
            // The holders release from half the wait to one and a half
            // times it: before, around and after the moment the waits end.
            await Promise.all(
              holders.map(async (holder, i) => {
                await sleep(WAIT * (0.5 + i / ROUNDS));
                await holder.release();
              }),
            );
            let granted = 0;
            for (const outcome of await Promise.all(waits)) {
              if (outcome instanceof Error) {
                assert.ok(outcome instanceof LockBusyError, String(outcome));
              } else {
                granted++;
                await outcome.release();
              }
            }
            await nothingLeft(server, keys);
            console.log(`# ${adapter} on ${kind}: ${granted} of ${ROUNDS} waits were granted`);
          } finally {
            await dlock.close();
          }
        });
      });
    }
  });
}
