/**
 * The client over TLS as a restricted ACL user (docs/operations.md, "TLS and
 * ACL users"), over node-redis and ioredis: a TLS-only server, the
 * document's ACL line and connection blocks, then an acquire, a blocking
 * hand-off, a renewal, a release and an election; a key outside the user's
 * pattern gets NOPERM as a ServerError.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Redis } from "ioredis";
import { createClient } from "redis";
import { Dlock, ServerError } from "../src/index.js";
import { ADAPTERS, type AdapterName, REPO, Server, eventually, serverKinds } from "./support.js";

/** The lines of the fenced block of docs/operations.md after `<!-- tls: what -->`. */
function docBlock(what: string): string[] {
  const lines = readFileSync(join(REPO, "docs/operations.md"), "utf8").split("\n");
  const start = lines.findIndex((line) => line.trim() === `<!-- tls: ${what} -->`);
  assert.ok(start >= 0, `docs/operations.md has no <!-- tls: ${what} -->`);
  assert.ok(lines[start + 1]?.startsWith("```"), `<!-- tls: ${what} --> has no fence`);
  const end = lines.findIndex((line, i) => i > start + 1 && line.startsWith("```"));
  return lines.slice(start + 2, end);
}

interface Connected {
  dlock: Dlock;
  close(): Promise<void>;
}

/** The document's connection block for node-redis, as written there. */
async function connectNodeRedis(host: string, port: number, caFile: string): Promise<Connected> {
  const client = createClient({
    url: `rediss://app1:app1-secret@${host}:${port}`,
    socket: { tls: true, ca: readFileSync(caFile) },
  });
  await client.connect();
  const dlock = new Dlock(client);
  return { dlock, close: async () => void client.destroy() };
}

/** The document's connection block for ioredis, as written there. */
async function connectIoredis(host: string, port: number, caFile: string): Promise<Connected> {
  const client = new Redis({
    host,
    port,
    username: "app1",
    password: "app1-secret",
    tls: { ca: readFileSync(caFile) },
    enableReadyCheck: false, // its ready check sends INFO, which app1 may not run
  });
  const dlock = new Dlock(client);
  return { dlock, close: async () => void client.disconnect() };
}

const connect = (adapter: AdapterName, server: Server): Promise<Connected> =>
  (adapter === "ioredis" ? connectIoredis : connectNodeRedis)(
    "127.0.0.1",
    server.port,
    server.caFile as string,
  );

describe("the documented TLS connection blocks", () => {
  for (const adapter of ADAPTERS) {
    it(`${adapter}: the block of docs/operations.md is the one this suite runs`, () => {
      const normalise = (lines: string[]) => lines.map((l) => l.trim()).filter((l) => l !== "");
      const doc = normalise(docBlock(`client ${adapter}`));
      const here = normalise(
        readFileSync(join(REPO, "clients/node/test/tls.test.ts"), "utf8").split("\n"),
      );
      const found = here.some((_, i) => doc.every((line, j) => here[i + j] === line));
      assert.ok(doc.length > 0 && found, `not in test/tls.test.ts:\n${doc.join("\n")}`);
    });
  }
});

for (const kind of serverKinds()) {
  describe(`TLS and an ACL user on ${kind}`, () => {
    let server: Server | null;
    before(async () => {
      server = await Server.startTls(kind);
      if (!server) return;
      // The document's ACL line: +@dlock where the server has it, else Redis 7.0's.
      const categories = (await server.admin.call("ACL", "CAT")) as string[];
      const [line, ...rest] = docBlock(
        categories.includes("dlock") ? "acl app" : "acl app redis-7.0",
      );
      assert.equal(rest.length, 0);
      const [command, ...args] = (line as string).split(/\s+/);
      await server.admin.call(command as string, ...args);
    });
    after(async () => {
      await server?.stop();
    });

    for (const adapter of ADAPTERS) {
      it(`${adapter}: acquire, hand-off, renew, release, election and NOPERM`, async (t) => {
        if (!server) return t.skip(`${kind} has no TLS built in`);
        const s = server;
        const firstConnection = await connect(adapter, s);
        const secondConnection = await connect(adapter, s);
        const first = firstConnection.dlock;
        const second = secondConnection.dlock;
        try {
          const key = `app1:${adapter}:job`;
          const held = await first.acquire(key, { ttl: 10_000, autoRenew: false });
          // The lease's deadline is the key's PEXPIRETIME: a renewal 50 ms or
          // more later moves it on, however slowly the replies come.
          const deadline = BigInt(String(await s.admin.call("PEXPIRETIME", key)));
          await eventually("50 ms of the lease pass", 10_000, async () => {
            return Number((await s.info(key))?.["pttl"]) < 9_950;
          });
          await held.renew();
          const after = BigInt(String(await s.admin.call("PEXPIRETIME", key)));
          assert.ok(after > deadline, "the renewal moved the deadline on");

          // A blocking hand-off: the second client waits until the first releases.
          const waiting = second.acquire(key, { ttl: 10_000, wait: 10_000 });
          await eventually("the waiter queues", 10_000, async () => {
            return String((await s.info(key))?.["waiting"]) === "1";
          });
          await held.release();
          const granted = await waiting;
          assert.ok(granted.token > held.token, "the hand-off has a larger token");
          await granted.release();
          assert.equal(await s.info(key), null);

          // An election: one leads, the other sees it.
          const election = `app1:${adapter}:leader`;
          const leadership = await first.election(election).campaign("node-a");
          const leader = await second.election(election).leader();
          assert.equal(leader?.identity, "node-a");
          assert.equal(leader?.term, leadership.term);
          await leadership.resign();
          assert.equal(await second.election(election).leader(), null);

          // Outside the user's key pattern: NOPERM, as a ServerError.
          await assert.rejects(first.tryAcquire(`app2:${adapter}:job`), (err: unknown) => {
            assert.ok(err instanceof ServerError, String(err));
            assert.equal(err.code, "NOPERM");
            return true;
          });
        } finally {
          await first.close();
          await second.close();
          await firstConnection.close();
          await secondConnection.close();
        }
      });
    }
  });
}
