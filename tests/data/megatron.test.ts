import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openMegatron, isMegatronDataset } from '../../src/data/megatron.js';
import { openTokenSource } from '../../src/data/index.js';
import { createLoader } from '../../src/data/loader.js';

/** Write a .bin/.idx pair byte by byte per Megatron's MMIDIDX layout. */
function writeMegatron(prefix: string, docs: number[][][], code = 8, width = 2): void {
  const seqs = docs.flat();
  const lengths = seqs.map((s) => s.length);
  const docIdx = [0];
  for (const d of docs) docIdx.push(docIdx[docIdx.length - 1]! + d.length);
  const S = seqs.length, D = docIdx.length;
  const idx = Buffer.alloc(34 + 4 * S + 8 * S + 8 * D);
  idx.write('MMIDIDX\0\0', 0, 'latin1');
  idx.writeBigUInt64LE(1n, 9);
  idx.writeUInt8(code, 17);
  idx.writeBigUInt64LE(BigInt(S), 18);
  idx.writeBigUInt64LE(BigInt(D), 26);
  let o = 34, ptr = 0;
  for (const l of lengths) { idx.writeInt32LE(l, o); o += 4; }
  for (const l of lengths) { idx.writeBigInt64LE(BigInt(ptr), o); o += 8; ptr += l * width; }
  for (const d of docIdx) { idx.writeBigInt64LE(BigInt(d), o); o += 8; }
  writeFileSync(`${prefix}.idx`, idx);
  const toks = seqs.flat();
  const bin = Buffer.alloc(toks.length * width);
  toks.forEach((t, i) => (width === 2 ? bin.writeUInt16LE(t, 2 * i) : bin.writeInt32LE(t, 4 * i)));
  writeFileSync(`${prefix}.bin`, bin);
}

const tmp = () => mkdtempSync(join(tmpdir(), 'mdlm-mega-'));
// document 0: two sequences (sentences), document 1: one, document 2: one
const DOCS = [[[10, 11, 12], [13, 14]], [[20, 21, 22, 23]], [[30, 31, 32]]];

describe('Megatron indexed dataset', () => {
  it('reads sequences, documents and tokens (uint16 and int32)', () => {
    for (const [code, width] of [[8, 2], [4, 4]] as const) {
      const prefix = join(tmp(), 'corpus_text_document');
      writeMegatron(prefix, DOCS, code, width);
      expect(isMegatronDataset(`${prefix}.bin`)).toBe(true);
      const ds = openMegatron(`${prefix}.idx`, { vocabSize: 50 });
      expect([ds.sequences, ds.documents, ds.length]).toEqual([4, 3, 12]);
      expect(ds.dtype).toBe(code === 8 ? 'uint16' : 'int32');
      expect(Array.from(ds.sequence(1))).toEqual([13, 14]);
      expect(Array.from(ds.sequence(2))).toEqual([20, 21, 22, 23]);
      expect(Array.from(ds.documentStarts)).toEqual([0, 5, 9]);
      expect(Array.from(ds.read(4, 3))).toEqual([14, 20, 21]);
      ds.close();
    }
  });

  it('packs rows with document boundaries taken from the index', () => {
    const prefix = join(tmp(), 'd');
    writeMegatron(prefix, DOCS);
    const ds = openTokenSource(prefix);
    const loader = createLoader(ds, { seqLen: 11, batchSize: 1, seed: 0, mode: 'packed' });
    const b = loader.next();
    expect(Array.from(b.tokens)).toEqual([10, 11, 12, 13, 14, 20, 21, 22, 23, 30, 31]);
    expect(Array.from(b.segIds)).toEqual([0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2]);
    expect(Array.from(b.positions)).toEqual([0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 1]);
    expect(Array.from(b.targets)).toEqual([11, 12, 13, 14, -1, 21, 22, 23, -1, 31, 32]);
  });

  it('rejects corrupt or mismatched files', () => {
    const prefix = join(tmp(), 'bad');
    writeMegatron(prefix, DOCS);
    expect(() => openMegatron(prefix, { vocabSize: 25 }).read(0, 12)).toThrow(/token 9 has id 30/);
    writeFileSync(`${prefix}.bin`, Buffer.alloc(6));
    expect(() => openMegatron(prefix)).toThrow(/describes 24 bytes .* file has 6 bytes/);
    writeFileSync(`${prefix}.idx`, Buffer.from('MMIDIDX\0\0' + '\0'.repeat(30), 'latin1').fill(0x41, 0, 3));
    expect(() => openMegatron(prefix)).toThrow(/bad magic/);
    writeMegatron(prefix, DOCS, 7, 4);
    expect(() => openMegatron(prefix)).toThrow(/float32/);
    expect(() => openMegatron(join(tmp(), 'missing'))).toThrow(/expected both/);
  });
});
