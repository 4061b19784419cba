import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { f32ToBf16, f32ToF16 } from '../../src/convert.js';
import { MdlmError } from '../../src/errors.js';
import {
  decodeSafetensors, encodeSafetensors, openSafetensors, openTensors, readSafetensors, writeSafetensors,
} from '../../src/checkpoint/safetensors.js';

const dir = mkdtempSync(join(tmpdir(), 'mdlm-st-'));
let counter = 0;
const path = (name = `f${counter++}.safetensors`) => join(dir, name);

function badFile(fn: () => unknown, ...parts: (string | RegExp)[]): string {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(MdlmError);
    expect((e as MdlmError).code).toBe('BAD_FILE');
    for (const p of parts) expect((e as Error).message).toMatch(p);
    return (e as Error).message;
  }
  throw new Error('expected a BAD_FILE error');
}

/** Build a safetensors file by hand, following the spec (not our writer). */
function handMade(header: object | string, data: Uint8Array, pad = true): Uint8Array {
  let json = typeof header === 'string' ? header : JSON.stringify(header);
  if (pad) while ((8 + json.length) % 8 !== 0) json += ' ';
  const hb = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + hb.length + data.length);
  const dv = new DataView(out.buffer);
  dv.setUint32(0, hb.length, true); // low 32 bits of the u64
  dv.setUint32(4, 0, true);
  out.set(hb, 8);
  out.set(data, 8 + hb.length);
  return out;
}

const special = new Float32Array([0, -0, 1, -1.5, 3.4028234663852886e38, 1.4e-45, 1e-40, Infinity, -Infinity, Math.PI, -2.5e-8, 65504, 1e5]);

describe('round trip', () => {
  test('F32, F16, BF16 (raw and from f32), I32 come back bit-exact, file and bytes', () => {
    const nan = new Float32Array(4);
    new Uint32Array(nan.buffer).set([0x7fc00001, 0xffc12345, 0x7f800001, 0x3f800000]); // NaN payloads survive
    const raw16 = new Uint16Array([0, 0x8000, 0x3c00, 0x7bff, 0x0001, 0x7c00, 0xfe00, 0x1234, 0xabcd]);
    const tensors = {
      'a.f32': { dtype: 'F32' as const, shape: [13], data: special },
      'b.nan': { dtype: 'F32' as const, shape: [2, 2], data: nan },
      'c.f16raw': { dtype: 'F16' as const, shape: [3, 3], data: raw16 },
      'd.bf16raw': { dtype: 'BF16' as const, shape: [9], data: raw16 },
      'e.bf16': { dtype: 'BF16' as const, shape: [13], data: special },
      'f.f16': { dtype: 'F16' as const, shape: [13], data: special },
      'g.i32': { dtype: 'I32' as const, shape: [1, 3], data: new Int32Array([-2147483648, 0, 2147483647]) },
      'h.empty': { dtype: 'F32' as const, shape: [0, 4], data: new Float32Array(0) },
      'i.scalar': { dtype: 'F32' as const, shape: [], data: new Float32Array([7]) },
    };
    const meta = { format: 'pt', note: 'ünïcode ✓' };
    const p = path();
    writeSafetensors(p, tensors, { metadata: meta });
    const bytes = new Uint8Array(readFileSync(p));
    expect(bytes).toEqual(encodeSafetensors(tensors, meta));
    const n = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
    expect((8 + n) % 8).toBe(0);
    expect(bytes[8]).toBe(0x7b); // '{'
    for (const { tensors: back, metadata } of [readSafetensors(p), decodeSafetensors(bytes)]) {
      expect(metadata).toEqual(meta);
      expect(Object.keys(back)).toEqual(Object.keys(tensors));
      const u32 = (a: Float32Array) => [...new Uint32Array(a.buffer, a.byteOffset, a.length)];
      expect(u32(back['a.f32']!.data as Float32Array)).toEqual(u32(special));
      expect(u32(back['b.nan']!.data as Float32Array)).toEqual(u32(nan));
      expect([...(back['c.f16raw']!.data as Uint16Array)]).toEqual([...raw16]);
      expect(back['c.f16raw']!.shape).toEqual([3, 3]);
      expect([...(back['d.bf16raw']!.data as Uint16Array)]).toEqual([...raw16]);
      expect([...(back['e.bf16']!.data as Uint16Array)]).toEqual([...special].map(f32ToBf16));
      expect([...(back['f.f16']!.data as Uint16Array)]).toEqual([...special].map(f32ToF16));
      expect([...(back['g.i32']!.data as Int32Array)]).toEqual([-2147483648, 0, 2147483647]);
      expect(back['h.empty']!.shape).toEqual([0, 4]);
      expect(back['i.scalar']).toMatchObject({ shape: [], dtype: 'F32' });
    }
    const f = openSafetensors(p);
    expect(f.readFloat32('e.bf16')[3]).toBe(-1.5);
    expect(f.readFloat32('c.f16raw')[2]).toBe(1);
    f.close();
  });

  test('writer refuses data that does not match dtype or shape', () => {
    const bad = (t: object) => {
      try {
        encodeSafetensors({ x: t } as never);
      } catch (e) {
        return (e as MdlmError).code + ': ' + (e as Error).message;
      }
      return 'no error';
    };
    expect(bad({ dtype: 'F32', shape: [3], data: new Float32Array(2) })).toMatch(/BAD_ARGUMENT.*'x'.*holds 3 elements but data has 2/);
    expect(bad({ dtype: 'I32', shape: [2], data: new Float32Array(2) })).toMatch(/I32 needs Int32Array/);
    expect(bad({ dtype: 'F64', shape: [2], data: new Float32Array(2) })).toMatch(/cannot write dtype 'F64'/);
  });
});

describe('a file written by hand per the spec', () => {
  test('reads back, including I64, F64, U8, out-of-order header entries and metadata', () => {
    const data = new Uint8Array(8 * 2 + 4 * 3 + 2 * 2 + 8 + 4);
    const dv = new DataView(data.buffer);
    // "w" I64 [2] at [0,16); "x" F32 [3] at [16,28); "y" BF16 [2] at [28,32); "z" F64 [] at [32,40); "u" U8 [4] at [40,44)
    dv.setBigInt64(0, -5n, true);
    dv.setBigInt64(8, 1n << 40n, true);
    [1.5, -2, 0.25].forEach((v, i) => dv.setFloat32(16 + 4 * i, v, true));
    dv.setUint16(28, 0x3f80, true); // bf16 1.0
    dv.setUint16(30, 0xc040, true); // bf16 -3.0
    dv.setFloat64(32, Math.E, true);
    data.set([1, 2, 3, 250], 40);
    const header = {
      z: { dtype: 'F64', shape: [], data_offsets: [32, 40] },
      x: { dtype: 'F32', shape: [3], data_offsets: [16, 28] },
      __metadata__: { format: 'pt' },
      u: { dtype: 'U8', shape: [2, 2], data_offsets: [40, 44] },
      w: { dtype: 'I64', shape: [2], data_offsets: [0, 16] },
      y: { dtype: 'BF16', shape: [1, 2], data_offsets: [28, 32] },
    };
    const p = path();
    writeFileSync(p, handMade(header, data));
    const { tensors, metadata } = readSafetensors(p);
    expect(metadata).toEqual({ format: 'pt' });
    expect(Object.keys(tensors)).toEqual(['w', 'x', 'y', 'z', 'u']); // data order
    expect([...(tensors.w!.data as BigInt64Array)]).toEqual([-5n, 1n << 40n]);
    expect([...(tensors.x!.data as Float32Array)]).toEqual([1.5, -2, 0.25]);
    expect([...(tensors.y!.data as Uint16Array)]).toEqual([0x3f80, 0xc040]);
    expect(tensors.z!.data[0]).toBe(Math.E);
    expect([...(tensors.u!.data as Uint8Array)]).toEqual([1, 2, 3, 250]);
    const src = openTensors(p);
    expect([...src.readFloat32('y')]).toEqual([1, -3]);
    src.close();
    // An unpadded header is legal too.
    const q = path();
    writeFileSync(q, handMade({ x: { dtype: 'F32', shape: [1], data_offsets: [0, 4] } }, new Uint8Array(new Float32Array([9]).buffer), false));
    expect(readSafetensors(q).tensors.x!.data[0]).toBe(9);
  });
});

describe('corruption is a clear BAD_FILE naming the file and tensor', () => {
  const f32 = (n: number) => new Uint8Array(new Float32Array(n).fill(1).buffer);
  const write = (bytes: Uint8Array) => {
    const p = path();
    writeFileSync(p, bytes);
    return p;
  };
  const ok = { a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] }, b: { dtype: 'F32', shape: [2], data_offsets: [8, 16] } };

  test('too short, header length beyond the file, malformed JSON', () => {
    let p = write(new Uint8Array(5));
    badFile(() => readSafetensors(p), p, /too short/);
    const bytes = handMade(ok, f32(4));
    new DataView(bytes.buffer).setUint32(0, 10_000, true);
    p = write(bytes);
    badFile(() => readSafetensors(p), p, /header length 10000 runs past the end of the file/);
    p = write(handMade('{"a": {"dtype": "F32", ', f32(4)));
    badFile(() => readSafetensors(p), p, /not valid JSON/);
    p = write(handMade('[1, 2]', new Uint8Array(0)));
    badFile(() => readSafetensors(p), /must start with '\{'/);
    expect(() => decodeSafetensors(handMade(ok, f32(4)).subarray(0, 20))).toThrow(/runs past the end/);
  });

  test('offsets outside the data, overlapping, gaps, trailing bytes', () => {
    let p = write(handMade({ ...ok, b: { dtype: 'F32', shape: [3], data_offsets: [8, 20] } }, f32(4)));
    badFile(() => readSafetensors(p), p, /tensor 'b'.*run past the end of the data \(16 bytes\)/);
    p = write(handMade({ ...ok, b: { dtype: 'F32', shape: [2], data_offsets: [4, 12] } }, f32(3)));
    badFile(() => readSafetensors(p), p, /tensor 'b' \[4, 12\) overlaps tensor 'a' \[0, 8\)/);
    p = write(handMade({ ...ok, b: { dtype: 'F32', shape: [2], data_offsets: [12, 20] } }, f32(5)));
    badFile(() => readSafetensors(p), /tensor 'b' starts at 12 .* gap/);
    p = write(handMade(ok, f32(5)));
    badFile(() => readSafetensors(p), /4 trailing bytes/);
    p = write(handMade({ a: { dtype: 'F32', shape: [2], data_offsets: [8, 0] } }, f32(2)));
    badFile(() => readSafetensors(p), /tensor 'a': data_offsets \[8,0\] must be \[begin, end\]/);
  });

  test('dtype / shape / size mismatch, unknown dtype, bad metadata', () => {
    let p = write(handMade({ ...ok, b: { dtype: 'F16', shape: [2], data_offsets: [8, 16] } }, f32(4)));
    badFile(() => readSafetensors(p), p, /tensor 'b': F16 shape \[2\] needs 4 bytes but data_offsets \[8, 16\] span 8/);
    p = write(handMade({ ...ok, b: { dtype: 'F32', shape: [3], data_offsets: [8, 16] } }, f32(4)));
    badFile(() => readSafetensors(p), /tensor 'b': F32 shape \[3\] needs 12 bytes/);
    p = write(handMade({ ...ok, b: { dtype: 'FP32', shape: [2], data_offsets: [8, 16] } }, f32(4)));
    badFile(() => readSafetensors(p), /tensor 'b': unknown dtype "FP32"/);
    p = write(handMade({ ...ok, b: { dtype: 'F32', shape: [-2], data_offsets: [8, 16] } }, f32(4)));
    badFile(() => readSafetensors(p), /tensor 'b': shape \[-2\]/);
    p = write(handMade({ ...ok, __metadata__: { step: 3 } }, f32(4)));
    badFile(() => readSafetensors(p), /__metadata__ must be an object of string values/);
    p = write(handMade({ ...ok, b: { dtype: 'U16', shape: [4], data_offsets: [8, 16] } }, f32(4)));
    const f = openSafetensors(p); // valid header, unsupported dtype only when read
    badFile(() => f.read('b'), /tensor 'b': dtype U16 is not supported for reading/);
    badFile(() => f.read('nope'), /no tensor named 'nope'/);
    f.close();
  });
});

describe('sharded checkpoints', () => {
  test('model.safetensors.index.json weight_map is followed; broken indexes error', () => {
    const d = mkdtempSync(join(dir, 'shard-'));
    writeSafetensors(join(d, 'model-00001-of-00002.safetensors'), { a: { dtype: 'F32', shape: [2], data: new Float32Array([1, 2]) } });
    writeSafetensors(join(d, 'model-00002-of-00002.safetensors'), { b: { dtype: 'BF16', shape: [1], data: new Float32Array([3]) } });
    const index = { metadata: { total_size: 10 }, weight_map: { a: 'model-00001-of-00002.safetensors', b: 'model-00002-of-00002.safetensors' } };
    writeFileSync(join(d, 'model.safetensors.index.json'), JSON.stringify(index));
    const src = openTensors(d);
    expect(src.names().sort()).toEqual(['a', 'b']);
    expect([...src.readFloat32('a')]).toEqual([1, 2]);
    expect([...src.readFloat32('b')]).toEqual([3]);
    expect(src.files).toHaveLength(2);
    src.close();
    const ix = join(d, 'model.safetensors.index.json');
    writeFileSync(ix, JSON.stringify({ weight_map: { ...index.weight_map, c: 'model-00001-of-00002.safetensors' } }));
    badFile(() => openTensors(d), ix, /puts tensor 'c' in shard 'model-00001-of-00002.safetensors', but that shard has no such tensor/);
    writeFileSync(ix, JSON.stringify({ weight_map: { a: 'model-00003-of-00003.safetensors' } }));
    badFile(() => openTensors(d), /shard 'model-00003-of-00003.safetensors' named in weight_map does not exist/);
    writeFileSync(ix, JSON.stringify({ weight_map: { a: '../x.safetensors' } }));
    badFile(() => openTensors(d), /must be a file name/);
    writeFileSync(ix, JSON.stringify({ weights: {} }));
    badFile(() => openTensors(d), /"weight_map"/);
  });
});
