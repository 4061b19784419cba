/** Text input recognised by content: any UTF-8 text, JSON Lines by name or first line; binary and invalid UTF-8 refused with the offset. */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { prepareData } from '../../src/data/prepare.js';
import { listInputFiles, readDocuments, scanUtf8 } from '../../src/data/text.js';
import { mdlm } from '../support/cli.js';

const tmp = () => mkdtempSync(join(tmpdir(), 'mdlm-text-'));

async function docs(path: string, field?: string): Promise<string[]> {
  const out: string[] = [];
  for await (const d of readDocuments(path, field)) out.push(d);
  return out;
}

describe('scanUtf8', () => {
  const scan = (...b: number[]) => scanUtf8(Uint8Array.from(b));
  it('accepts UTF-8 up to U+10FFFF and stops before a character cut by the end', () => {
    const ok = new TextEncoder().encode('aé€😀');
    expect(scanUtf8(ok)).toEqual({ bad: -1, complete: ok.length });
    expect(scanUtf8(ok.subarray(0, ok.length - 1))).toEqual({ bad: -1, complete: ok.length - 4 });
    expect(scanUtf8(ok.subarray(0, 2))).toEqual({ bad: -1, complete: 1 });
  });
  it('finds NUL, stray continuation bytes, overlongs, surrogates, code points past U+10FFFF and bad continuations', () => {
    expect(scan(0x61, 0x00, 0x62).bad).toBe(1);
    expect(scan(0x61, 0x80).bad).toBe(1);
    expect(scan(0xc0, 0x80).bad).toBe(0); // overlong NUL
    expect(scan(0x61, 0xe0, 0x80, 0x80).bad).toBe(1); // overlong 3-byte
    expect(scan(0xed, 0xa0, 0x80).bad).toBe(0); // UTF-16 surrogate
    expect(scan(0xf4, 0x90, 0x80, 0x80).bad).toBe(0); // U+110000
    expect(scan(0xf5, 0x80, 0x80, 0x80).bad).toBe(0);
    expect(scan(0x63, 0x61, 0x66, 0xe9, 0x20).bad).toBe(3); // Latin-1 é
  });
});

describe('input files by content', () => {
  it('reads a Markdown file, a file with no extension and a .log as plain text', async () => {
    const dir = tmp();
    writeFileSync(join(dir, 'notes.md'), '# Title\n\nSome *text*.\nMore.\n');
    writeFileSync(join(dir, 'README'), 'one\n\ntwo\n');
    expect(await docs(join(dir, 'notes.md'))).toEqual(['# Title', 'Some *text*.\nMore.']);
    expect(await docs(join(dir, 'README'))).toEqual(['one', 'two']);
    const meta = await prepareData({ input: join(dir, 'notes.md'), tokenizer: 'byte', out: join(dir, 'o') });
    expect(meta.train.documents + meta.val.documents).toBe(2);
  });

  it('detects JSON Lines by the first non-blank line unless the name says .txt; .jsonl by name', async () => {
    const dir = tmp();
    const lines = '\n{"text":"a"}\n{"text":"b","n":1}\n';
    writeFileSync(join(dir, 'data'), lines);
    writeFileSync(join(dir, 'data.json'), lines);
    writeFileSync(join(dir, 'data.txt'), lines);
    writeFileSync(join(dir, 'data.jsonl'), 'not json\n');
    expect(await docs(join(dir, 'data'))).toEqual(['a', 'b']);
    expect(await docs(join(dir, 'data.json'))).toEqual(['a', 'b']);
    expect(await docs(join(dir, 'data.txt'))).toEqual(['{"text":"a"}\n{"text":"b","n":1}']);
    await expect(docs(join(dir, 'data.jsonl'))).rejects.toMatchObject({ code: 'BAD_FILE', message: expect.stringMatching(/data\.jsonl:1: not valid JSON/) });
    writeFileSync(join(dir, 'array.json'), '[\n{"text":"a"}\n]\n');
    await expect(docs(join(dir, 'array.json'))).rejects.toMatchObject({ code: 'BAD_FILE', message: expect.stringMatching(/array\.json:1: .*JSON Lines.*jq -c/) });
  });

  it('drops a byte-order mark and splits CRLF and CR lines as LF', async () => {
    const dir = tmp();
    writeFileSync(join(dir, 'bom.txt'), Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('first\r\nline\r\n\r\nsecond\rx\r')]));
    expect(await docs(join(dir, 'bom.txt'))).toEqual(['first\nline', 'second\nx']);
    writeFileSync(join(dir, 'bom.jsonl'), Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"text":"é"}\r\n')]));
    expect(await docs(join(dir, 'bom.jsonl'))).toEqual(['é']);
  });

  it('reads characters cut by a read-chunk boundary, and names the offset of a bad byte far into the file', async () => {
    const dir = tmp();
    // createReadStream reads 64 KiB chunks: put a 4-byte character across the first boundary.
    const head = 'a'.repeat(65536 - 2);
    writeFileSync(join(dir, 'cut.txt'), `${head}😀b\n`);
    expect(await docs(join(dir, 'cut.txt'))).toEqual([`${head}😀b`]);
    writeFileSync(join(dir, 'late.txt'), Buffer.concat([Buffer.from('x'.repeat(200_000)), Buffer.from([0xff]), Buffer.from('\n')]));
    await expect(docs(join(dir, 'late.txt'))).rejects.toMatchObject({ code: 'BAD_FILE', message: expect.stringMatching(/late\.txt: invalid UTF-8 at byte 200000 \(0xff 0x0a\); convert the file to UTF-8 first, e\.g\. iconv/) });
    writeFileSync(join(dir, 'short.txt'), Buffer.from([0x61, 0xe2, 0x82]));
    await expect(docs(join(dir, 'short.txt'))).rejects.toMatchObject({ message: expect.stringMatching(/short\.txt: invalid UTF-8 at byte 1 \(0xe2 0x82\)/) });
  });

  it('refuses binary files, invalid UTF-8, UTF-16, empty files and directories without text, before writing anything', async () => {
    const dir = tmp();
    const out = join(dir, 'o');
    const refuse = async (file: string, content: Uint8Array | string, code: string, message: RegExp) => {
      writeFileSync(join(dir, file), content);
      await expect(prepareData({ input: join(dir, file), tokenizer: 'byte', out })).rejects.toMatchObject({ code, message: expect.stringMatching(message) });
      expect(existsSync(out)).toBe(false);
    };
    const binary = Uint8Array.from({ length: 3000 }, (_, i) => (i * 37) % 256);
    await refuse('blob.dat', binary, 'BAD_FILE', /blob\.dat: byte 0 is NUL \(0x00\): a binary file, not text; pass UTF-8 text or JSON Lines/);
    await refuse('nul.txt', Buffer.concat([Buffer.from('text\n\nmore text '), Buffer.from([0]), Buffer.from('\n')]), 'BAD_FILE', /nul\.txt: byte 16 is NUL/);
    await refuse('latin1.md', Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a, 0x0a, 0x62, 0x0a]), 'BAD_FILE', /latin1\.md: invalid UTF-8 at byte 3 \(0xe9 0x0a 0x0a 0x62\)/);
    await refuse('utf16.txt', Buffer.from('\ufeffhello\n\nworld\n', 'utf16le'), 'BAD_FILE', /utf16\.txt: starts with a UTF-16 byte-order mark; .*iconv -f UTF-16/);
    await refuse('empty.txt', '', 'BAD_FILE', /empty\.txt is empty \(0 bytes\)/);
    const bin = join(dir, 'bin');
    mkdirSync(bin);
    writeFileSync(join(bin, 'a.bin'), binary);
    await expect(prepareData({ input: bin, tokenizer: 'byte', out })).rejects.toMatchObject({ code: 'NOT_FOUND', message: expect.stringMatching(/directory .*bin holds only binary files \(1, e\.g\. .*a\.bin\)/) });
    mkdirSync(join(dir, 'none'));
    await expect(prepareData({ input: join(dir, 'none'), tokenizer: 'byte', out })).rejects.toMatchObject({ code: 'NOT_FOUND', message: expect.stringMatching(/holds no files/) });
    expect(listInputFiles(join(dir, 'latin1.md')).files).toHaveLength(1);
  });

  it('a failed prepare into an existing dataset leaves that dataset whole', async () => {
    const dir = tmp();
    const out = join(dir, 'o');
    writeFileSync(join(dir, 'good.txt'), 'one\n\ntwo\n\nthree\n');
    await prepareData({ input: join(dir, 'good.txt'), tokenizer: 'byte', out });
    const before = ['meta.json', 'train.bin', 'val.bin'].map((f) => readFileSync(join(out, f)));
    writeFileSync(join(dir, 'bad.txt'), Buffer.concat([Buffer.from('fine\n\n'.repeat(1000)), Buffer.from([0xc3, 0x28])]));
    await expect(prepareData({ input: join(dir, 'bad.txt'), tokenizer: 'byte', out })).rejects.toMatchObject({ code: 'BAD_FILE' });
    expect(['meta.json', 'train.bin', 'val.bin'].map((f) => readFileSync(join(out, f)))).toEqual(before);
  });

  it('the CLI prints one line and exits 1 for a binary file', () => {
    const dir = tmp();
    writeFileSync(join(dir, 'x.txt'), Uint8Array.from({ length: 100 }, (_, i) => i));
    const r = mdlm('data', 'prepare', '--input', join(dir, 'x.txt'), '--tokenizer', 'byte', '--out', join(dir, 'o'), '--no-progress');
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^mdlm: BAD_FILE: .*x\.txt: byte 0 is NUL/);
  });
});
