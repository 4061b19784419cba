/**
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"): a counter-based
 * generator, so any draw is a pure function of (key, counter) and the WGSL and CUDA kernels
 * reproduce it bit for bit. mdlm keys every draw by (seed, step, rank, purpose, index):
 * key = seed (64 bits), counter = [index, step, rank, purpose].
 */
const M0 = 0xd2511f53;
const M1 = 0xcd9e8d57;
const W0 = 0x9e3779b9;
const W1 = 0xbb67ae85;

/** High 32 bits of the 64-bit product of two u32, from 16-bit halves (exact in doubles). */
export function mulhi32(a: number, b: number): number {
  const al = a & 0xffff, ah = a >>> 16, bl = b & 0xffff, bh = b >>> 16;
  const ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
  const mid = (ll >>> 16) + (lh & 0xffff) + (hl & 0xffff);
  return (hh + (lh >>> 16) + (hl >>> 16) + Math.floor(mid / 65536)) >>> 0;
}

/** One Philox4x32-10 block: four u32 words for counter c and key k. Writes into `out`. */
export function philox4x32(c: ArrayLike<number>, k: ArrayLike<number>, out: Uint32Array | number[] = new Uint32Array(4)): Uint32Array | number[] {
  let c0 = c[0]! >>> 0, c1 = c[1]! >>> 0, c2 = c[2]! >>> 0, c3 = c[3]! >>> 0;
  let k0 = k[0]! >>> 0, k1 = k[1]! >>> 0;
  for (let r = 0; r < 10; r++) {
    if (r > 0) {
      k0 = (k0 + W0) >>> 0;
      k1 = (k1 + W1) >>> 0;
    }
    const hi0 = mulhi32(M0, c0), lo0 = Math.imul(M0, c0) >>> 0;
    const hi1 = mulhi32(M1, c2), lo1 = Math.imul(M1, c2) >>> 0;
    c0 = (hi1 ^ c1 ^ k0) >>> 0;
    c1 = lo1;
    c2 = (hi0 ^ c3 ^ k1) >>> 0;
    c3 = lo0;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
  return out;
}

/** A u32 to a float in [0, 1) with 24 random bits: exact in f32, so every backend agrees. */
export function uniform01(u: number): number {
  return (u >>> 8) * 5.9604644775390625e-8;
}

/**
 * Box-Muller from two stream words: the pair of standard normals is radius(w1)·cos(angle(w2)),
 * returned first, and radius(w1)·sin(angle(w2)).
 */
export function boxMullerRadius(w1: number): number {
  return Math.sqrt(-2 * Math.log(uniform01(w1) + 5.9604644775390625e-8)); // (0, 1]: log is finite
}
export function boxMullerAngle(w2: number): number {
  return 2 * Math.PI * uniform01(w2);
}

/** What a random draw is for: part of the counter, so streams for different uses never overlap. */
export const RngPurpose = {
  harness: 0,
  init: 1,
  noiseLevel: 2,
  mask: 3,
  dataOrder: 4,
  dropout: 5,
  sampling: 6,
  truncation: 7,
} as const;
export type RngPurpose = (typeof RngPurpose)[keyof typeof RngPurpose];

/** Split a (non-negative, ≤ 2^53) integer seed into the two key words. */
export function seedKey(seed: number): [number, number] {
  if (!Number.isSafeInteger(seed) || seed < 0) throw new RangeError(`seed must be a non-negative safe integer, got ${seed}`);
  return [seed >>> 0, Math.floor(seed / 2 ** 32) >>> 0];
}

/**
 * A sequential stream over Philox blocks for one (seed, step, rank, purpose): word i of the stream
 * is word (i % 4) of block i / 4. Used for host-side draws (init, data order, harness inputs).
 */
export class PhiloxStream {
  private readonly key: [number, number];
  private readonly ctr: [number, number, number, number];
  private readonly block = new Uint32Array(4);
  private used = 4;
  private index = 0;
  private spare: number | null = null;

  constructor(readonly seed: number, readonly purpose: RngPurpose, readonly step = 0, readonly rank = 0) {
    this.key = seedKey(seed);
    this.ctr = [0, step >>> 0, rank >>> 0, purpose];
  }

  /** The next word's index in the stream, and the second value of a normal pair not yet returned. */
  get position(): { readonly word: number; readonly spare: number | null } {
    return { word: this.index * 4 - (4 - this.used), spare: this.spare };
  }

  /** Continue from any word of the stream with the given spare normal (as `position` gave them). */
  seekPosition(word: number, spare: number | null): void {
    this.seekWord(word - (word % 4));
    for (let r = word % 4; r > 0; r--) this.nextU32();
    this.spare = spare;
  }

  /** Continue from word `word` of the stream (a multiple of 4: a block boundary), as a fresh stream there. */
  seekWord(word: number): void {
    if (!Number.isSafeInteger(word) || word < 0 || word % 4 !== 0) throw new RangeError(`seekWord: ${word} is not a block boundary (a non-negative multiple of 4)`);
    this.index = word / 4;
    this.used = 4;
    this.spare = null;
  }

  nextU32(): number {
    if (this.used === 4) {
      this.ctr[0] = this.index++ >>> 0;
      philox4x32(this.ctr, this.key, this.block);
      this.used = 0;
    }
    return this.block[this.used++]!;
  }

  /** Uniform in [0, 1). */
  uniform(): number {
    return uniform01(this.nextU32());
  }

  /** Integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.uniform() * n);
  }

  /** Standard normal (Box-Muller, using 2 draws for 2 values). */
  normal(): number {
    if (this.spare !== null) {
      const s = this.spare;
      this.spare = null;
      return s;
    }
    const r = boxMullerRadius(this.nextU32());
    const a = boxMullerAngle(this.nextU32());
    this.spare = r * Math.sin(a);
    return r * Math.cos(a);
  }
}

/** Uniform integer in [0, n), n ≤ 2^32, by rejection (unbiased, unlike floor(u·n) on 24 bits). */
export function uniformInt(rng: PhiloxStream, n: number): number {
  if (n <= 1) return 0;
  const limit = Math.floor(2 ** 32 / n) * n;
  for (;;) {
    const u = rng.nextU32();
    if (u < limit) return u % n;
  }
}
