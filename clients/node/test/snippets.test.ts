/**
 * Every ```ts block of clients/node/README.md and of the TypeScript section
 * of docs/clients.md, compiled with `tsc --strict` and run against a test
 * server (as tests/docs.rs runs the server's documented sessions).
 *
 * Each block becomes a module of its own under dist/snippets/, importing
 * the package by its name ("dlock", resolved to this package's build), with
 * a prelude of the helpers the block calls but does not define (each checks
 * what it is given: a fence is a bigint, the signal not aborted). The
 * address the block connects to (`createClient()`, `new Redis()`) becomes
 * the test server's. The block must compile, run without error and exit by
 * itself (a block that leaves a client open keeps the process alive and
 * fails here).
 *
 * A marker comment on the line before a fence, `<!-- snippet: skip REASON -->`,
 * leaves a block out, saying why.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { REPO, Server } from "./support.js";

const NODE_DIR = resolve(REPO, "clients/node");
const OUT = join(NODE_DIR, "dist/snippets");

interface Block {
  name: string;
  line: number;
  code: string;
  skip?: string;
}

/** The blocks fenced with ```ts in `text` (its lines numbered from `offset`). */
function blocksOf(document: string, text: string, offset = 0): Block[] {
  const lines = text.split("\n");
  const found: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]?.trim() !== "```ts") continue;
    const start = i + 1;
    let end = start;
    while (end < lines.length && lines[end]?.trim() !== "```") end++;
    const marker = /<!--\s*snippet:\s*skip\b(.*?)-->/.exec(lines[i - 1] ?? "");
    found.push({
      name: `${document}:${offset + start + 1}`,
      line: offset + start + 1,
      code: lines.slice(start, end).join("\n"),
      skip: marker ? marker[1]?.trim() || "no reason given" : undefined,
    });
    i = end;
  }
  return found;
}

function section(text: string, title: string): { offset: number; text: string } {
  const lines = text.split("\n");
  const start = lines.indexOf(`## ${title}`);
  assert.ok(start >= 0, `no "## ${title}" section`);
  let end = start + 1;
  while (end < lines.length && !lines[end]?.startsWith("## ")) end++;
  return { offset: start, text: lines.slice(start, end).join("\n") };
}

export function documentedBlocks(): Block[] {
  const readme = readFileSync(join(NODE_DIR, "README.md"), "utf8");
  const guide = section(readFileSync(join(REPO, "docs/clients.md"), "utf8"), "TypeScript");
  return [
    ...blocksOf("clients/node/README.md", readme),
    ...blocksOf("docs/clients.md#typescript", guide.text, guide.offset),
  ];
}

/** The helpers the blocks call, each checking its arguments. */
const PRELUDE = `import * as snippetAssert from "node:assert/strict";
const SNIPPET_PORT = Number(process.env["DLOCK_SNIPPET_PORT"]);
async function chargeOrder(order: number, options: { fence: bigint; signal: AbortSignal }): Promise<void> {
  snippetAssert.equal(typeof order, "number");
  snippetAssert.equal(typeof options.fence, "bigint");
  snippetAssert.ok(options.fence > 0n);
  snippetAssert.equal(options.signal.aborted, false);
}
`;

/** The block with its address made the test server's. */
function localised(code: string): string {
  return code
    .replace(/createClient\(\)/g, "createClient({ socket: { port: SNIPPET_PORT } })")
    .replace(/new Redis\(\)/g, "new Redis(SNIPPET_PORT)");
}

const TSCONFIG = {
  compilerOptions: {
    target: "ES2022",
    lib: ["ES2022", "ESNext.Disposable"],
    module: "NodeNext",
    moduleResolution: "NodeNext",
    strict: true,
    noUncheckedIndexedAccess: true,
    types: ["node"],
    skipLibCheck: true,
    noUnusedLocals: false,
  },
};

describe("documented TypeScript blocks", () => {
  const blocks = documentedBlocks();
  let server: Server;
  let compiled: { status: number | null; output: string };

  before(async () => {
    rmSync(OUT, { recursive: true, force: true });
    mkdirSync(OUT, { recursive: true });
    const files: string[] = [];
    for (const [index, block] of blocks.entries()) {
      if (block.skip) continue;
      const file = `snippet${index}.ts`;
      files.push(file);
      writeFileSync(join(OUT, file), `${PRELUDE}// ${block.name}\n${localised(block.code)}\n`);
    }
    writeFileSync(join(OUT, "tsconfig.json"), JSON.stringify({ ...TSCONFIG, files }, null, 2));
    const tsc = spawnSync(
      process.execPath,
      [join(NODE_DIR, "node_modules/typescript/bin/tsc"), "-p", join(OUT, "tsconfig.json")],
      { cwd: OUT, encoding: "utf8", timeout: 120_000 },
    );
    compiled = { status: tsc.status, output: `${tsc.stdout}${tsc.stderr}` };
    server = await Server.start("redis");
  });
  after(async () => {
    await server?.stop();
  });

  it("finds every block a reader sees", () => {
    const readme = readFileSync(join(NODE_DIR, "README.md"), "utf8");
    const guide = section(readFileSync(join(REPO, "docs/clients.md"), "utf8"), "TypeScript");
    const fences = (readme + guide.text).split("\n").filter((l) => l.trim() === "```ts").length;
    assert.equal(blocks.length, fences);
    assert.ok(blocks.length >= 2);
  });

  it("every block compiles with tsc --strict", () => {
    assert.equal(compiled.status, 0, compiled.output);
  });

  for (const [index, block] of blocks.entries()) {
    it(`${block.name} runs against a server and exits by itself`, { skip: block.skip }, () => {
      assert.equal(compiled.status, 0, "the blocks did not compile");
      const run = spawnSync(process.execPath, [join(OUT, `snippet${index}.js`)], {
        cwd: OUT,
        encoding: "utf8",
        timeout: 20_000,
        env: { ...process.env, DLOCK_SNIPPET_PORT: String(server.port) },
      });
      assert.notEqual(
        run.signal,
        "SIGTERM",
        `${block.name} did not exit within 20 s (a client left open?)\n${run.stderr}`,
      );
      assert.equal(run.status, 0, `${block.name} failed:\n${run.stdout}${run.stderr}`);
    });
  }
});
