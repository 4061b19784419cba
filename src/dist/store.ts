/**
 * A small TCP key-value store for the ranks of one job: rank 0 hosts it (node:net) and every rank,
 * rank 0 included, is a client. It carries the rendezvous, the config check, barriers and the host
 * collectives (host_collectives.ts).
 *
 * Wire format, little-endian, every frame length-prefixed:
 * - request:  u32 length | u8 op | u32 id | u32 timeout ms | u32 arg | u16 key length | key (UTF-8) | payload
 * - response: u32 length | u32 id | u8 status | payload (status 0: the value; else a UTF-8 message)
 * A client may have several requests in flight; responses name the request by id. Id 0 (no
 * request's) is the store telling every client that the job failed, and why.
 *
 * Faults: a wait (get, barrier) that outlasts its timeout fails naming the key or the ranks that did
 * not arrive; a rank whose connection drops without saying goodbye (it exited or crashed) fails every
 * wait of every rank at once, naming it, and a rank that leaves after a failure of its own
 * (destroy with a reason) fails them with its reason; a client that loses rank 0's store fails its waits, naming
 * the address. The store lives on rank 0's event loop: while rank 0 computes synchronously it does not
 * answer, so each client also gives up on its own shortly after the timeout.
 */
import { configLeaves } from '../config/leaves.js';
import { createHash } from 'node:crypto';
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import { fail, MdlmError } from '../errors.js';

const enum Op {
  Hello = 1,
  Set = 2,
  Get = 3,
  Add = 4,
  Barrier = 5,
  Bye = 6,
  /** A rank leaves after a failure; the payload says why (UTF-8). */
  Fail = 7,
}

const enum Status {
  Ok = 0,
  Error = 1,
}

/** "MDLM" then the protocol version, in HELLO's payload: a stray client is refused. */
const MAGIC = 0x4d444c4d;
const PROTOCOL = 1;
/** Frames above this are refused as garbage (collectives send at most CHUNK_BYTES of data a frame). */
const MAX_FRAME = 1 << 30;
/** How long a client keeps trying to reach the store, and how long it waits past a timeout for an answer. */
const CONNECT_RETRY_MS = 100;
const ANSWER_GRACE_MS = 2000;

export interface StoreOptions {
  /** Host of rank 0 (MASTER_ADDR). */
  readonly addr: string;
  /** Its port (MASTER_PORT); rank 0 may pass 0 to take a free port (see Store.port). */
  readonly port: number;
  readonly rank: number;
  readonly worldSize: number;
  /** How long a wait (get, barrier) lasts before it fails. */
  readonly timeoutMs: number;
  /** How long the rendezvous (connecting, then every rank's arrival) lasts; default timeoutMs. */
  readonly rendezvousTimeoutMs?: number;
  /** Rank 0: called with the port once the store listens, before the rendezvous (a launcher that asked for port 0 hands it on). */
  readonly onListening?: (port: number) => void;
}

/** Splits a byte stream into length-prefixed frames. */
class Framer {
  private parts: Buffer[] = [];
  private size = 0;
  constructor(private readonly onFrame: (frame: Buffer) => void, private readonly onGarbage: (why: string) => void) {}

  push(chunk: Buffer): void {
    this.parts.push(chunk);
    this.size += chunk.length;
    while (this.size >= 4) {
      const head = this.parts[0]!.length >= 4 ? this.parts[0]! : Buffer.concat(this.parts);
      const len = head.readUInt32LE(0);
      if (len > MAX_FRAME) return this.onGarbage(`a frame of ${len} bytes`);
      if (this.size < 4 + len) return;
      const all = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts);
      this.parts = all.length > 4 + len ? [all.subarray(4 + len)] : [];
      this.size = all.length - 4 - len;
      this.onFrame(all.subarray(4, 4 + len));
    }
  }
}

function frame(head: Buffer, payload: Uint8Array | undefined): Buffer {
  const n = payload?.length ?? 0;
  const out = Buffer.allocUnsafe(4 + head.length + n);
  out.writeUInt32LE(head.length + n, 0);
  head.copy(out, 4);
  if (payload) out.set(payload, 4 + head.length);
  return out;
}

function requestFrame(op: Op, id: number, key: string, arg: number, payload: Uint8Array | undefined, timeoutMs: number): Buffer {
  const k = Buffer.from(key);
  const head = Buffer.allocUnsafe(15 + k.length);
  head.writeUInt8(op, 0);
  head.writeUInt32LE(id, 1);
  head.writeUInt32LE(timeoutMs, 5);
  head.writeUInt32LE(arg, 9);
  head.writeUInt16LE(k.length, 13);
  k.copy(head, 15);
  return frame(head, payload);
}

function response(id: number, status: Status, payload: Uint8Array): Buffer {
  const head = Buffer.allocUnsafe(5);
  head.writeUInt32LE(id, 0);
  head.writeUInt8(status, 4);
  return frame(head, payload);
}

interface Request {
  readonly op: Op;
  readonly id: number;
  readonly timeoutMs: number;
  readonly arg: number;
  readonly key: string;
  readonly payload: Buffer;
}

function parseRequest(f: Buffer): Request {
  const keyLen = f.readUInt16LE(13);
  return { op: f.readUInt8(0), id: f.readUInt32LE(1), timeoutMs: f.readUInt32LE(5), arg: f.readUInt32LE(9), key: f.toString('utf8', 15, 15 + keyLen), payload: f.subarray(15 + keyLen) };
}

interface Waiter {
  readonly socket: Socket;
  readonly id: number;
  readonly timer: NodeJS.Timeout | undefined;
}

interface Entry {
  readonly value: Buffer;
  /** GETs left before the entry is dropped; 0: kept. */
  readersLeft: number;
}

/** Rank 0's side: the keys, the waiting requests, and which rank each connection is. */
class StoreServer {
  private readonly values = new Map<string, Entry>();
  private readonly counters = new Map<string, number>();
  private readonly getters = new Map<string, Waiter[]>();
  private readonly barriers = new Map<string, { arrived: Set<number>; waiters: Waiter[] }>();
  private readonly ranks = new Map<Socket, number>();
  private readonly gone = new Set<Socket>();
  private readonly sockets = new Set<Socket>();
  /** Each connection's peer address as it connected (a closed socket no longer has one). */
  private readonly peers = new Map<Socket, string>();
  /** Set once a rank drops without goodbye: every wait fails with it. */
  private broken: string | undefined;

  constructor(readonly server: Server, private readonly worldSize: number) {
    server.on('connection', (s) => this.accept(s));
  }

  private accept(socket: Socket): void {
    this.sockets.add(socket);
    socket.setNoDelay(true);
    this.peers.set(socket, socket.remoteAddress ?? '?');
    const framer = new Framer(
      (f) => this.handle(socket, parseRequest(f)),
      (why) => {
        socket.destroy();
        this.lost(socket, `sent ${why}`);
      },
    );
    socket.on('data', (c: Buffer) => framer.push(c));
    socket.on('error', () => {});
    socket.on('close', () => {
      this.sockets.delete(socket);
      if (!this.gone.has(socket)) this.lost(socket, 'disconnected without closing the store (it exited or crashed)');
    });
  }

  private lost(socket: Socket, what: string): void {
    const rank = this.ranks.get(socket);
    if (rank === undefined) return;
    this.fail(`rank ${rank} (${this.peers.get(socket)}) ${what}`);
  }

  /**
   * Fails every wait of every rank, now and from now on, with `why` (the first failure wins), and
   * tells every client (id 0), so that what a rank sends next fails with `why` too, not with the
   * loss of the store when rank 0 then leaves.
   */
  fail(why: string): void {
    if (this.broken !== undefined) return;
    this.broken = why;
    for (const ws of this.getters.values()) for (const w of ws) this.reply(w, Status.Error, this.broken);
    for (const b of this.barriers.values()) for (const w of b.waiters) this.reply(w, Status.Error, this.broken);
    this.getters.clear();
    this.barriers.clear();
    for (const s of this.sockets) if (!s.destroyed && !this.gone.has(s)) s.write(response(0, Status.Error, Buffer.from(why)));
  }

  private reply(w: Waiter, status: Status, payload: Uint8Array | string): void {
    if (w.timer) clearTimeout(w.timer);
    if (!w.socket.destroyed) w.socket.write(response(w.id, status, typeof payload === 'string' ? Buffer.from(payload) : payload));
  }

  private waiter(socket: Socket, r: Request, onTimeout: (w: Waiter) => void): Waiter {
    const w: Waiter = { socket, id: r.id, timer: r.timeoutMs > 0 ? setTimeout(() => onTimeout(w), r.timeoutMs) : undefined };
    return w;
  }

  private handle(socket: Socket, r: Request): void {
    const now: Waiter = { socket, id: r.id, timer: undefined };
    if (r.op === Op.Hello) return this.hello(socket, r, now);
    if (!this.ranks.has(socket)) return this.reply(now, Status.Error, 'the first request on a connection must be HELLO');
    if (r.op === Op.Bye) {
      this.gone.add(socket);
      return this.reply(now, Status.Ok, new Uint8Array(0));
    }
    if (r.op === Op.Fail) {
      this.gone.add(socket);
      return this.lost(socket, `failed: ${r.payload.toString('utf8')}`);
    }
    // After a rank's loss, values already set are still served; waits that would block fail at once.
    if (this.broken !== undefined && (r.op === Op.Barrier || (r.op === Op.Get && !this.values.has(r.key)))) return this.reply(now, Status.Error, this.broken);
    switch (r.op) {
      case Op.Set: {
        const waiting = this.getters.get(r.key) ?? [];
        this.getters.delete(r.key);
        let readersLeft = r.arg;
        for (const w of waiting) {
          this.reply(w, Status.Ok, r.payload);
          readersLeft--;
        }
        if (r.arg === 0 || readersLeft > 0) this.values.set(r.key, { value: Buffer.from(r.payload), readersLeft: r.arg === 0 ? 0 : readersLeft });
        else this.values.delete(r.key);
        return this.reply(now, Status.Ok, new Uint8Array(0));
      }
      case Op.Get: {
        const e = this.values.get(r.key);
        if (e) {
          if (e.readersLeft > 0 && --e.readersLeft === 0) this.values.delete(r.key);
          return this.reply(now, Status.Ok, e.value);
        }
        const list = this.getters.get(r.key) ?? [];
        this.getters.set(r.key, list);
        list.push(
          this.waiter(socket, r, (w) => {
            const l = this.getters.get(r.key);
            if (l) l.splice(l.indexOf(w), 1);
            this.reply(w, Status.Error, `timed out after ${r.timeoutMs} ms: no rank set ${JSON.stringify(r.key)}`);
          }),
        );
        return;
      }
      case Op.Add: {
        const v = (this.counters.get(r.key) ?? 0) + r.payload.readDoubleLE(0);
        this.counters.set(r.key, v);
        const out = Buffer.allocUnsafe(8);
        out.writeDoubleLE(v, 0);
        return this.reply(now, Status.Ok, out);
      }
      case Op.Barrier: {
        const b = this.barriers.get(r.key) ?? { arrived: new Set<number>(), waiters: [] };
        this.barriers.set(r.key, b);
        b.arrived.add(this.ranks.get(socket)!);
        b.waiters.push(
          // The first timeout fails every rank waiting in the barrier, with the same message.
          this.waiter(socket, r, () => {
            this.barriers.delete(r.key);
            const missing = Array.from({ length: this.worldSize }, (_, i) => i).filter((i) => !b.arrived.has(i));
            const why = `timed out after ${r.timeoutMs} ms in barrier ${JSON.stringify(r.key)}: rank${missing.length > 1 ? 's' : ''} ${missing.join(', ')} did not arrive`;
            for (const w of b.waiters) this.reply(w, Status.Error, why);
          }),
        );
        if (b.arrived.size === this.worldSize) {
          this.barriers.delete(r.key);
          for (const w of b.waiters) this.reply(w, Status.Ok, new Uint8Array(0));
        }
        return;
      }
      default:
        return this.reply(now, Status.Error, `unknown request ${r.op}`);
    }
  }

  private hello(socket: Socket, r: Request, now: Waiter): void {
    if (r.payload.length < 12 || r.payload.readUInt32LE(0) !== MAGIC) {
      socket.destroy();
      return;
    }
    const version = r.payload.readUInt32LE(4);
    const world = r.payload.readUInt32LE(8);
    const rank = r.arg;
    let why: string | undefined;
    if (version !== PROTOCOL) why = `rank ${rank} speaks store protocol ${version}, rank 0 speaks ${PROTOCOL} (different mdlm versions)`;
    else if (world !== this.worldSize) why = `rank ${rank} says the world has ${world} processes, rank 0 says ${this.worldSize}`;
    else if (rank >= this.worldSize) why = `rank ${rank} is not below the world size ${this.worldSize}`;
    else if ([...this.ranks.values()].includes(rank)) why = `two processes claim rank ${rank}`;
    if (why !== undefined) return this.reply(now, Status.Error, why);
    this.ranks.set(socket, rank);
    this.reply(now, Status.Ok, new Uint8Array(0));
  }

  /** Resolves once every rank's connection has closed, or after `ms`. */
  drained(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t0 = Date.now();
      const poll = (): void => {
        if (this.sockets.size === 0 || Date.now() - t0 >= ms) resolve();
        else setTimeout(poll, 20);
      };
      poll();
    });
  }
}

interface Pending {
  readonly what: string;
  readonly resolve: (payload: Buffer) => void;
  readonly reject: (e: Error) => void;
  readonly timer: NodeJS.Timeout | undefined;
}

/** One rank's connection to the job's store. */
export class Store {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private lostWith: string | undefined;
  /** The job's failure as the store told it: every request from then on fails with it. */
  private brokenWith: string | undefined;

  private constructor(
    private readonly socket: Socket,
    private readonly host: StoreServer | undefined,
    readonly rank: number,
    readonly worldSize: number,
    readonly timeoutMs: number,
    /** The store's address as errors name it. */
    readonly address: string,
  ) {
    const framer = new Framer(
      (f) => {
        const id = f.readUInt32LE(0);
        if (id === 0) return this.broke(f.toString('utf8', 5));
        const p = this.pending.get(id);
        if (!p) return;
        this.pending.delete(id);
        if (p.timer) clearTimeout(p.timer);
        if (f.readUInt8(4) === Status.Ok) p.resolve(f.subarray(5));
        else p.reject(this.error(p.what, f.toString('utf8', 5)));
      },
      (why) => socket.destroy(new Error(`the store sent ${why}`)),
    );
    socket.on('data', (c: Buffer) => framer.push(c));
    socket.on('error', (e) => {
      this.lostWith ??= e.message;
    });
    socket.on('close', () => {
      this.lostWith ??= 'the connection closed';
      for (const [id, p] of this.pending) {
        if (p.timer) clearTimeout(p.timer);
        this.pending.delete(id);
        p.reject(this.error(p.what, `lost the store hosted by rank 0 (${this.lostWith})`));
      }
    });
  }

  /** The store said the job failed: every request in flight, and every later one, fails with its reason. */
  private broke(why: string): void {
    this.brokenWith ??= why;
    for (const [id, p] of this.pending) {
      if (p.timer) clearTimeout(p.timer);
      this.pending.delete(id);
      p.reject(this.error(p.what, why));
    }
  }

  /** The port rank 0's store listens on (the chosen one when it was asked for port 0). */
  get port(): number {
    return Number(this.address.slice(this.address.lastIndexOf(':') + 1));
  }

  private error(what: string, why: string): MdlmError {
    return new MdlmError('IO_ERROR', `rank ${this.rank}, store ${this.address}, ${what}: ${why}`);
  }

  /**
   * Joins the job: rank 0 starts the store on `port` (all interfaces) and every rank connects, retrying
   * until the timeout, says who it is, and waits for all ranks (the rendezvous barrier).
   */
  static async connect(o: StoreOptions): Promise<Store> {
    let host: StoreServer | undefined;
    let port = o.port;
    if (o.rank === 0) {
      const server = createServer();
      await new Promise<void>((resolve, reject) => {
        server.once('error', (e) => reject(new MdlmError('IO_ERROR', `rank 0 cannot host the store on port ${o.port}: ${e.message} (set MASTER_PORT to a free port)`)));
        server.listen(o.port, () => resolve());
      });
      host = new StoreServer(server, o.worldSize);
      port = (server.address() as { port: number }).port;
      o.onListening?.(port);
    }
    const target = o.rank === 0 ? '127.0.0.1' : o.addr;
    const address = `tcp://${o.addr}:${port}`;
    const rendezvous = o.rendezvousTimeoutMs ?? o.timeoutMs;
    const socket = await connectWithRetry(target, port, rendezvous, `rank ${o.rank} could not reach the store at ${address} (hosted by rank 0)`);
    socket.setNoDelay(true);
    const store = new Store(socket, host, o.rank, o.worldSize, o.timeoutMs, address);
    const hello = Buffer.allocUnsafe(12);
    hello.writeUInt32LE(MAGIC, 0);
    hello.writeUInt32LE(PROTOCOL, 4);
    hello.writeUInt32LE(o.worldSize, 8);
    try {
      await store.request(Op.Hello, '', o.rank, hello, 0, 'joining');
      await store.barrier('mdlm/rendezvous', rendezvous);
    } catch (e) {
      store.destroy();
      throw e;
    }
    return store;
  }

  private request(op: Op, key: string, arg: number, payload: Uint8Array | undefined, timeoutMs: number, what: string): Promise<Buffer> {
    if (this.brokenWith !== undefined) return Promise.reject(this.error(what, this.brokenWith));
    if (this.lostWith !== undefined) return Promise.reject(this.error(what, `lost the store hosted by rank 0 (${this.lostWith})`));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      // The store answers a timed-out wait itself; this guard covers a store that does not answer at all.
      const guard = timeoutMs > 0 ? timeoutMs + ANSWER_GRACE_MS : this.timeoutMs + ANSWER_GRACE_MS;
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(this.error(what, `no answer from the store within ${guard} ms (rank 0 busy, hung or unreachable)`));
      }, guard);
      this.pending.set(id, { what, resolve, reject, timer });
      this.socket.write(requestFrame(op, id, key, arg, payload, timeoutMs));
    });
  }

  /**
   * Sets `key` to a copy of `value`. `readers` > 0 drops the value after that many gets (data meant
   * for known ranks); 0 keeps it. `what` names the call in errors.
   */
  async set(key: string, value: Uint8Array, readers = 0, what = `setting ${JSON.stringify(key)}`): Promise<void> {
    await this.request(Op.Set, key, readers, value, 0, what);
  }

  /** The value of `key`, waiting until some rank sets it; `what` names the wait in errors. */
  async get(key: string, what = `waiting for ${JSON.stringify(key)}`, timeoutMs = this.timeoutMs): Promise<Buffer> {
    return this.request(Op.Get, key, 0, undefined, timeoutMs, what);
  }

  /** Adds `n` to the counter `key` (0 if new) and returns the sum. */
  async add(key: string, n: number): Promise<number> {
    const p = Buffer.allocUnsafe(8);
    p.writeDoubleLE(n, 0);
    return (await this.request(Op.Add, key, 0, p, 0, `adding to ${JSON.stringify(key)}`)).readDoubleLE(0);
  }

  /** Waits until every rank has reached the barrier `name`. */
  async barrier(name: string, timeoutMs = this.timeoutMs): Promise<void> {
    await this.request(Op.Barrier, name, 0, undefined, timeoutMs, `in barrier ${JSON.stringify(name)}`);
  }

  /**
   * Every rank's config must equal rank 0's: each rank publishes the SHA-256 of its canonical JSON,
   * rank 0 compares and publishes the ranks that differ, and if any do, every rank throws BAD_CONFIG:
   * a differing rank naming the fields (`describe(rank 0's config, this rank's)`), the others naming
   * the differing ranks.
   */
  async checkSameConfig(config: unknown, describe: (theirs: unknown, ours: unknown) => string[] = configDifferences): Promise<void> {
    const json = canonicalJson(config);
    const hash = createHash('sha256').update(json).digest('hex');
    await this.set(`mdlm/config/hash/${this.rank}`, Buffer.from(hash), this.rank === 0 ? 0 : 1);
    if (this.rank === 0) {
      await this.set('mdlm/config/json', Buffer.from(json));
      const odd: number[] = [];
      for (let r = 1; r < this.worldSize; r++) {
        if ((await this.get(`mdlm/config/hash/${r}`, `waiting for rank ${r}'s config hash`)).toString() !== hash) odd.push(r);
      }
      await this.set('mdlm/config/odd', Buffer.from(JSON.stringify(odd)));
    }
    const odd = JSON.parse((await this.get('mdlm/config/odd', "waiting for rank 0's verdict on the configs")).toString()) as number[];
    if (odd.length === 0) return;
    const ranks = `rank${odd.length > 1 ? 's' : ''} ${odd.join(', ')}`;
    const theirs = odd.includes(this.rank) ? (JSON.parse((await this.get('mdlm/config/json', "waiting for rank 0's config")).toString()) as unknown) : undefined;
    // No rank leaves (taking the store with it, on rank 0) before every rank has read what it needs.
    await this.barrier('mdlm/config/done');
    if (!odd.includes(this.rank)) fail('BAD_CONFIG', `rank ${this.rank}: ${ranks} run a config different from rank 0's; every rank refuses to start`);
    const diff = describe(theirs, config);
    fail('BAD_CONFIG', `rank ${this.rank}: the config differs from rank 0's (${ranks} differ): ${diff.length > 0 ? diff.join('; ') : 'in no field describe() names'}`);
  }

  /** Leaves the job: every rank meets in a last barrier, says goodbye, and rank 0 stops the store once all have. */
  async close(): Promise<void> {
    await this.barrier('mdlm/close');
    await this.request(Op.Bye, '', 0, undefined, 0, 'closing');
    this.socket.end();
    if (this.host) {
      await this.host.drained(this.timeoutMs);
      await new Promise<void>((resolve) => this.host!.server.close(() => resolve()));
    }
  }

  /**
   * Leaves at once, without goodbye: the other ranks' waits fail, naming this rank, with `reason`
   * (this rank's failure) when given; stops the store on rank 0.
   */
  destroy(reason?: string): void {
    if (this.host) {
      if (reason !== undefined) this.host.fail(`rank 0 (the store's host) failed: ${reason}`);
      this.socket.destroy();
      this.host.server.close();
      return;
    }
    if (reason === undefined || this.lostWith !== undefined) {
      this.socket.destroy();
      return;
    }
    // The reason goes out before the connection closes (end: the frame, then the close).
    this.socket.end(requestFrame(Op.Fail, this.nextId++, '', 0, Buffer.from(reason), 0));
  }
}

function connectWithRetry(host: string, port: number, timeoutMs: number, what: string): Promise<Socket> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const attempt = (): void => {
      const s = netConnect({ host, port });
      s.once('connect', () => {
        s.removeAllListeners('error');
        resolve(s);
      });
      s.once('error', (e: NodeJS.ErrnoException) => {
        s.destroy();
        if (Date.now() - t0 + CONNECT_RETRY_MS > timeoutMs) reject(new MdlmError('IO_ERROR', `${what} within ${timeoutMs} ms (${e.code ?? e.message}); check MASTER_ADDR and MASTER_PORT, and that rank 0 runs`));
        else setTimeout(attempt, CONNECT_RETRY_MS);
      });
    };
    attempt();
  });
}

/** JSON with object keys sorted at every level: equal configs give equal text. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) =>
    v !== null && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : v,
  );
}

/** The first `limit` dotted fields where `ours` differs from `theirs` (rank 0's), as "field x on rank 0, y here". */
export function configDifferences(theirs: unknown, ours: unknown, limit = 5): string[] {
  const a = configLeaves(theirs);
  const b = configLeaves(ours);
  const keys = [...new Set([...a.keys(), ...b.keys()])].sort();
  const out: string[] = [];
  for (const k of keys) {
    const x = canonicalJson(a.get(k));
    const y = canonicalJson(b.get(k));
    if (x !== y) out.push(`${k || '(the whole config)'} ${x ?? 'absent'} on rank 0, ${y ?? 'absent'} here`);
  }
  return out.length > limit ? [...out.slice(0, limit), `and ${out.length - limit} more`] : out;
}
