/**
 * A stalled server (CLIENT PAUSE, longer than every bound) and a stopped
 * one, through every library of the matrix ({@link LIBRARIES}) at once,
 * under one pause per server (Redis 8 for {@link ON_REDIS8}, Redis 7.0 for
 * the others): R4.2 (a wait ends by its wait plus the margin), R4.6 (a
 * renewal by hand ends by the lease's local deadline; with the server down
 * it rejects), R4.7 (clean-ups in the background; opening a connection has
 * a timeout) and R5.3 on read timeouts. Each check failed before the fix it
 * covers (issue 36): a wait that timed out released its owner before
 * returning (seconds more during the pause), a client not yet connected
 * hung until the resume, and a renewal by hand waited for the response
 * timeout on a frozen server and resolved with the server down.
 */
import assert from "node:assert/strict";
import { performance } from "node:perf_hooks";
import { describe, it } from "node:test";
import {
  Dlock,
  LockBusyError,
  LockLostError,
  TimeoutError,
  type ClientLike,
} from "../src/index.js";
import {
  LIBRARIES,
  type Library,
  Server,
  type ServerKind,
  eventually,
  libraryClient,
  redis8Kind,
} from "./support.js";
import { RespConnection } from "./resp.js";

/** The pause: longer than every bound checked below, so a call that waits for the resume fails. */
const PAUSE_MS = 4_500;
/** Slack for a loaded machine on top of each bound. */
const SLACK_MS = 1_000;
const WAIT_MS = 300;
const MARGIN_MS = 2_000; // the client's default waitMargin (R4.2)

/** How long `call` took to settle, and how. */
async function timed<T>(
  call: () => Promise<T>,
): Promise<{ ms: number; value?: T; error?: unknown }> {
  const start = performance.now();
  try {
    const value = await call();
    return { ms: performance.now() - start, value };
  } catch (error) {
    return { ms: performance.now() - start, error };
  }
}

/**
 * Today's default installs (`npm install redis`: node-redis 6, `npm install
 * ioredis`: ioredis 6, both RESP3) meet the stall on Redis 8, the other
 * libraries on Redis 7.0, each server with a pause of its own at the same
 * time: Redis 8 at no added time (every library meets Redis 7.0 in the
 * library matrix).
 */
const ON_REDIS8: readonly Library[] = ["node-redis@6 RESP3", "ioredis@6 RESP3"];

/**
 * Runs `check` at once on a server of each kind with its libraries, each
 * server its own, stopped at the end; every failure is reported, by server.
 */
async function onEachServer(
  check: (server: Server, libraries: readonly Library[]) => Promise<void>,
): Promise<void> {
  const placements: [ServerKind, Library[]][] = [
    ["redis", LIBRARIES.filter((library) => !ON_REDIS8.includes(library))],
    [redis8Kind(), [...ON_REDIS8]],
  ];
  const results = await Promise.allSettled(
    placements.map(async ([kind, libraries]) => {
      const server = await Server.start(kind);
      try {
        await check(server, libraries);
      } finally {
        await server.stop();
      }
    }),
  );
  const failures = results.flatMap((result, i) =>
    result.status === "rejected"
      ? [`on ${placements[i]![0]} (${placements[i]![1].join(", ")}): ${String(result.reason)}`]
      : [],
  );
  assert.deepEqual(failures, []);
}

describe("a stalled server, through every library", () => {
  it("every call ends within its bound during a pause, and nothing is left after it", () =>
    onEachServer(async (server, libraries) => {
      const users = await Promise.all(
        libraries.map((library) => libraryClient(library, server.port)),
      );
      const dlocks: Dlock[] = [];
      const make = (client: object, options = {}) => {
        const dlock = new Dlock(client as ClientLike, options);
        dlocks.push(dlock);
        return dlock;
      };
      try {
        // Per library: a client with its connections open (a blocking one
        // idle in the pool), a lease of 1.5 s, and two clients not yet connected.
        const setups = await Promise.all(
          libraries.map(async (library: Library, i) => {
            const k = (name: string) => `${library}:${name}`;
            const warm = make(users[i]!.client);
            await (await warm.acquire(k("warm-up"), { wait: 100 })).release();
            const short = await warm.acquire(k("short"), { ttl: 1_500 });
            const fresh = make(users[i]!.client);
            const impatient = make(users[i]!.client, { responseTimeout: 1_000 });
            return { library, k, warm, short, fresh, impatient };
          }),
        );
        const pauser = await RespConnection.open(server.port);
        try {
          assert.equal(await pauser.call(["CLIENT", "PAUSE", String(PAUSE_MS), "ALL"]), "OK");
        } finally {
          pauser.close();
        }
        const pausedAt = performance.now();
        const outcomes = await Promise.all(
          setups.map(async ({ library, k, warm, short, fresh, impatient }) => {
            const [sent, unconnected, renewal, immediate] = await Promise.all([
              // On an open pooled connection: the ACQUIRE is sent, and would
              // be granted at the resume; its release must not delay the caller.
              timed(() => warm.acquire(k("free"), { wait: WAIT_MS })),
              // A client not yet connected: the handshake is not answered.
              timed(() => fresh.acquire(k("other"), { wait: WAIT_MS })),
              timed(() => short.renew()),
              timed(() => impatient.tryAcquire(k("now"))),
            ]);
            return { library, k, warm, short, sent, unconnected, renewal, immediate };
          }),
        );
        // Every defect is listed (each failed before its fix), not only the first.
        const failures: string[] = [];
        const expect = (ok: boolean, what: string) => {
          if (!ok) failures.push(what);
        };
        const show = (r: { ms: number; error?: unknown }) =>
          `${Math.round(r.ms)} ms, ${r.error === undefined ? "no error" : String(r.error)}`;
        for (const o of outcomes) {
          const waitBound = WAIT_MS + MARGIN_MS + SLACK_MS;
          for (const [what, r] of [
            ["a wait sent on an open connection (R4.2, R4.7)", o.sent],
            ["a wait of a client not yet connected (R4.7)", o.unconnected],
          ] as const) {
            expect(
              r.ms < waitBound &&
                (r.error instanceof TimeoutError || r.error instanceof LockBusyError),
              `${o.library}: ${what}: ${show(r)}`,
            );
          }
          // The local deadline is 1.5 s (less its margin) after the acquire's send.
          expect(
            o.renewal.ms < 1_500 + SLACK_MS &&
              (o.renewal.error instanceof LockLostError || o.renewal.error instanceof TimeoutError),
            `${o.library}: a renewal by hand on a frozen server (R4.6): ${show(o.renewal)}`,
          );
          expect(o.short.lost, `${o.library}: the lease is not lost by its deadline`);
          expect(
            o.immediate.ms < 1_000 + SLACK_MS && o.immediate.error instanceof TimeoutError,
            `${o.library}: an immediate call of a client not yet connected (R4.7): ${show(o.immediate)}`,
          );
        }
        expect(
          performance.now() - pausedAt < PAUSE_MS,
          "the calls ended after the resume: the checks above prove nothing",
        );
        assert.deepEqual(failures, []);
        // After the resume: the timed-out ACQUIRE's owner was released (R5.3),
        // and the next call is not delayed by the clean-ups.
        await Promise.all(
          outcomes.map(async ({ library, k, warm }) => {
            await eventually(
              `${library}: no hold is left on ${k("free")}`,
              PAUSE_MS + 5_000,
              async () => (await server.info(k("free"))) === null,
            );
            const next = await timed(() => warm.acquire(k("next")));
            assert.ok(next.ms < SLACK_MS, `${library}: the next acquire took ${next.ms} ms`);
            await (next.value as Awaited<ReturnType<Dlock["acquire"]>>).release();
          }),
        );
      } finally {
        await Promise.all(dlocks.map((dlock) => dlock.close()));
        await Promise.all(users.map((user) => user.close()));
      }
    }));

  it("a renewal by hand with the server stopped rejects, and the lease is lost", () =>
    onEachServer(async (victim, libraries) => {
      await Promise.all(
        libraries.map(async (library) => {
          const user = await libraryClient(library, victim.port);
          const dlock = new Dlock(user.client as ClientLike);
          try {
            const lease = await dlock.acquire(`${library}:k`, { ttl: 1_000 });
            return { user, dlock, lease, library };
          } catch (err) {
            await dlock.close();
            await user.close();
            throw err;
          }
        }),
      ).then(async (held) => {
        try {
          await victim.stop();
          for (const { lease, library } of held) {
            const renewal = await timed(() => lease.renew());
            assert.ok(
              renewal.error !== undefined,
              `${library}: renew resolved with the server down`,
            );
            assert.ok(renewal.ms < 1_000 + SLACK_MS, `${library}: renew took ${renewal.ms} ms`);
          }
          for (const { lease, library } of held) {
            await eventually(`${library}: the lease is lost`, 1_000 + SLACK_MS, () => lease.lost);
            await assert.rejects(lease.renew(), LockLostError);
          }
        } finally {
          for (const { dlock, user } of held) {
            await dlock.close();
            await user.close();
          }
        }
      });
    }));
});
