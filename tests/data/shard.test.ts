import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MdlmError } from '../../src/errors.js';
import { openShard, ShardWriter, writeShard, SHARD_HEADER_BYTES } from '../../src/data/shard.js';

const tmp = () => mkdtempSync(join(tmpdir(), 'mdlm-shard-'));

function expectMdlm(fn: () => unknown, code: string, ...parts: (string | RegExp)[]) {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(MdlmError);
    expect((e as MdlmError).code).toBe(code);
    for (const p of parts) expect((e as MdlmError).message).toMatch(p);
    return;
  }
  throw new Error('expected an MdlmError');
}

describe('token shards', () => {
  it('writes documents separated by EOS and reads them back (uint16, eager and lazy)', async () => {
    const dir = tmp();
    const path = join(dir, 'a.bin');
    const docs = [[1, 2, 3], [4], [5, 6]];
    const s = await writeShard(path, docs, { vocabSize: 10, eosId: 9, bufferTokens: 2 });
    expect(s).toMatchObject({ tokens: 9, documents: 3, dtype: 'uint16' });
    expect(readdirSync(dir)).toEqual(['a.bin']); // no temp file left behind
    const bytes = readFileSync(path);
    expect(bytes.subarray(0, 8).toString('latin1')).toBe('MDLMTOK\0');
    expect(bytes.length).toBe(SHARD_HEADER_BYTES + 9 * 2);
    const want = [1, 2, 3, 9, 4, 9, 5, 6, 9];
    const eager = openShard(path);
    expect(Array.from(eager.tokens())).toEqual(want);
    expect([eager.vocabSize, eager.eosId, eager.documents, eager.length]).toEqual([10, 9, 3, 9]);
    const lazy = openShard(path, { eagerBytes: 0 });
    expect(Array.from(lazy.read(2, 4))).toEqual([3, 9, 4, 9]);
    lazy.close();
  });

  it('uses uint32 for large vocabularies', async () => {
    const path = join(tmp(), 'b.bin');
    await writeShard(path, [[70000, 1], [2]], { vocabSize: 100000, eosId: 0 });
    const sh = openShard(path);
    expect(sh.header.dtype).toBe('uint32');
    expect(Array.from(sh.tokens())).toEqual([70000, 1, 0, 2, 0]);
  });

  it('streams many documents through a small buffer', async () => {
    const path = join(tmp(), 'c.bin');
    const w = await ShardWriter.create(path, { vocabSize: 1000, eosId: 999, bufferTokens: 7 });
    for (let d = 0; d < 200; d++) await w.writeDocument(Array.from({ length: d % 13 }, (_, i) => (d * 7 + i) % 999));
    const s = await w.close();
    const t = openShard(path).tokens();
    expect(t.length).toBe(s.tokens);
    expect(t.filter((x) => x === 999).length).toBe(200);
  });

  it('rejects ids outside the vocabulary at write time and leaves no file', async () => {
    const dir = tmp();
    const w = await ShardWriter.create(join(dir, 'x.bin'), { vocabSize: 5, eosId: 4 });
    await expect(w.writeDocument([1, 5])).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    await w.abort();
    expect(readdirSync(dir)).toEqual([]);
  });

  it('refuses to write an empty shard', async () => {
    const dir = tmp();
    await expect(writeShard(join(dir, 'e.bin'), [], { vocabSize: 5, eosId: 4 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/no documents/) });
    expect(readdirSync(dir)).toEqual([]);
  });

  describe('corrupt files', () => {
    async function good(): Promise<{ path: string; bytes: Buffer }> {
      const path = join(tmp(), 'g.bin');
      await writeShard(path, [[1, 2, 3], [4, 5]], { vocabSize: 8, eosId: 7 });
      return { path, bytes: readFileSync(path) };
    }

    it('bad magic', async () => {
      const { path, bytes } = await good();
      bytes.write('NOTATOK\0', 0, 'latin1');
      writeFileSync(path, bytes);
      expectMdlm(() => openShard(path), 'BAD_FILE', path, /bad magic/);
    });

    it('bad version', async () => {
      const { path, bytes } = await good();
      bytes.writeUInt32LE(7, 8);
      writeFileSync(path, bytes);
      expectMdlm(() => openShard(path), 'BAD_FILE', /version 7/);
    });

    it('bad dtype code', async () => {
      const { path, bytes } = await good();
      bytes.writeUInt32LE(9, 12);
      writeFileSync(path, bytes);
      expectMdlm(() => openShard(path), 'BAD_FILE', /dtype code 9/);
    });

    it('truncated header and truncated body', async () => {
      const { path, bytes } = await good();
      writeFileSync(path, bytes.subarray(0, 20));
      expectMdlm(() => openShard(path), 'BAD_FILE', /shorter than the 64-byte/);
      writeFileSync(path, bytes.subarray(0, bytes.length - 2));
      expectMdlm(() => openShard(path), 'BAD_FILE', path, /7 uint16 tokens/, /truncated/);
    });

    it('token id ≥ vocab names the position and the value (eager and lazy)', async () => {
      const { path, bytes } = await good();
      bytes.writeUInt16LE(8, SHARD_HEADER_BYTES + 2 * 5);
      writeFileSync(path, bytes);
      expectMdlm(() => openShard(path), 'BAD_FILE', path, /token 5 has id 8/, /vocab size 8/);
      const lazy = openShard(path, { eagerBytes: 0 });
      expect(Array.from(lazy.read(0, 5))).toEqual([1, 2, 3, 7, 4]);
      expectMdlm(() => lazy.read(3, 3), 'BAD_FILE', /token 5 has id 8/);
      lazy.close();
    });

    it('empty shard (zero tokens) and missing file', async () => {
      const { path, bytes } = await good();
      const h = Buffer.from(bytes.subarray(0, SHARD_HEADER_BYTES));
      h.writeBigUInt64LE(0n, 16);
      writeFileSync(path, h);
      expectMdlm(() => openShard(path), 'BAD_FILE', /holds no tokens/);
      expectMdlm(() => openShard(join(tmp(), 'nope.bin')), 'NOT_FOUND', /nope\.bin/);
    });
  });
});
