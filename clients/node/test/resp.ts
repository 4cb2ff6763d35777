/**
 * A plain RESP2 connection of the tests' own (the conformance suite's "raw
 * connection"): integers as bigint, errors as {@link RespError}, no retry,
 * no reconnect.
 */
import { Socket, connect } from "node:net";

/** The read timeout of a raw connection, ms (at least 10 s: README, `pause_server`). */
export const READ_TIMEOUT_MS = 15_000;

export type RespValue = string | bigint | null | RespValue[] | RespError;

export class RespError {
  constructor(readonly message: string) {}
  get code(): string {
    return this.message.split(" ")[0] ?? "";
  }
}

export class RespConnection {
  private buffer = Buffer.alloc(0);
  private readonly waiting: Array<(value: RespValue | Error) => void> = [];
  private closedError: Error | undefined;

  private constructor(private readonly socket: Socket) {
    socket.on("data", (chunk: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      for (;;) {
        const parsed = parse(this.buffer, 0);
        if (!parsed) break;
        this.buffer = this.buffer.subarray(parsed[1]);
        this.waiting.shift()?.(parsed[0]);
      }
    });
    const fail = () => {
      this.closedError ??= new Error("raw connection closed");
      for (const waiter of this.waiting.splice(0)) waiter(this.closedError);
    };
    socket.on("close", fail);
    socket.on("error", fail);
  }

  static open(port: number): Promise<RespConnection> {
    return new Promise((resolve, reject) => {
      const socket = connect(port, "127.0.0.1");
      socket.once("connect", () => resolve(new RespConnection(socket)));
      socket.once("error", reject);
    });
  }

  /**
   * Sends a command; resolves to its reply (an error reply as a RespError
   * value). Without a reply within `timeoutMs` (default 15 s: longer than
   * any pause of a conformance scenario) the connection is closed and the
   * call rejects.
   */
  call(args: readonly string[], timeoutMs = READ_TIMEOUT_MS): Promise<RespValue> {
    if (this.closedError) return Promise.reject(this.closedError);
    const parts = [`*${args.length}\r\n`];
    for (const arg of args) parts.push(`$${Buffer.byteLength(arg)}\r\n${arg}\r\n`);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.closedError ??= new Error(`raw connection: no reply to ${args[0]} in ${timeoutMs} ms`);
        this.socket.destroy();
      }, timeoutMs);
      this.waiting.push((value) => {
        clearTimeout(timer);
        if (value instanceof Error) reject(value);
        else resolve(value);
      });
      this.socket.write(parts.join(""));
    });
  }

  close(): void {
    this.socket.destroy();
  }
}

function parse(buf: Buffer, at: number): [RespValue, number] | undefined {
  const end = buf.indexOf("\r\n", at);
  if (end < 0) return undefined;
  const kind = String.fromCharCode(buf[at] as number);
  const line = buf.toString("utf8", at + 1, end);
  const next = end + 2;
  switch (kind) {
    case "+":
      return [line, next];
    case "-":
      return [new RespError(line), next];
    case ":":
      return [BigInt(line), next];
    case "$": {
      const len = Number(line);
      if (len < 0) return [null, next];
      if (buf.length < next + len + 2) return undefined;
      return [buf.toString("utf8", next, next + len), next + len + 2];
    }
    case "*": {
      const count = Number(line);
      if (count < 0) return [null, next];
      const items: RespValue[] = [];
      let pos = next;
      for (let i = 0; i < count; i++) {
        const item = parse(buf, pos);
        if (!item) return undefined;
        items.push(item[0]);
        pos = item[1];
      }
      return [items, pos];
    }
    default:
      throw new Error(`unexpected RESP type ${kind}`);
  }
}
