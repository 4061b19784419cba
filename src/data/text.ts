/**
 * Text input of `mdlm data prepare` and `mdlm eval`: which files a path names, and the documents in
 * each, recognised by content rather than by name.
 *
 * A file is text when it is UTF-8 with no NUL byte; anything else is refused with its name, the
 * byte offset of the first offending byte and what to do about it. A leading UTF-8 byte-order mark
 * is dropped. A text file is JSON Lines when its name ends in .jsonl or .ndjson, or (for names
 * other than .txt / .text) when its first non-blank line is a JSON object; otherwise it is plain
 * text, whose documents are separated by blank lines.
 *
 * A directory contributes every regular file below it (recursively, in sorted path order, hidden
 * entries and the output directory left out); files whose first 8 KiB hold a NUL byte or a UTF-16
 * byte-order mark are skipped as binary, and named in the result.
 */
import { closeSync, createReadStream, existsSync, openSync, readSync, readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fail } from '../errors.js';

export interface InputFiles {
  /** The text files, in the order their documents are read. */
  readonly files: readonly string[];
  /** Files of a directory left out as binary. */
  readonly skipped: readonly string[];
}

/** Bytes of a directory's file looked at to tell binary from text. */
const SNIFF_BYTES = 8192;
const TEXT_NAME = /\.(txt|text)$/i;
const JSONL_NAME = /\.(jsonl|ndjson)$/i;
const FORMATS = 'UTF-8 text (documents separated by blank lines) or JSON Lines (one JSON object per line)';

/**
 * The input files of a file or directory, sorted. `exclude`: a directory left out of the walk (the
 * output directory, when it lies inside the input).
 */
export function listInputFiles(input: string, exclude?: string): InputFiles {
  if (!existsSync(input)) fail('NOT_FOUND', `input ${input} does not exist; pass a text or JSONL file or a directory of them`);
  const st = statSync(input);
  if (st.isFile()) {
    if (st.size === 0) fail('BAD_FILE', `${input} is empty (0 bytes); pass a file holding ${FORMATS}`);
    return { files: [input], skipped: [] };
  }
  if (!st.isDirectory()) fail('BAD_ARGUMENT', `input ${input} is neither a file nor a directory; pass a text or JSONL file or a directory of them`);
  const excluded = exclude === undefined ? undefined : resolve(exclude);
  const files: string[] = [];
  const skipped: string[] = [];
  const walk = (dir: string): void => {
    for (const e of readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      if (e.name.startsWith('.')) continue;
      const p = join(dir, e.name);
      if (e.isDirectory()) {
        if (resolve(p) !== excluded) walk(p);
      } else if (e.isFile()) (binaryStart(p) === undefined ? files : skipped).push(p);
    }
  };
  walk(input);
  if (files.length === 0) {
    const why = skipped.length ? `only binary files (${skipped.length}, e.g. ${skipped[0]})` : 'no files';
    fail('NOT_FOUND', `directory ${input} holds ${why}; it needs ${FORMATS}`);
  }
  return { files, skipped };
}

/** What marks the first bytes of a file as binary (a NUL byte, a UTF-16 byte-order mark), or undefined. */
function binaryStart(path: string): string | undefined {
  const fd = openSync(path, 'r');
  try {
    const buf = new Uint8Array(SNIFF_BYTES);
    const n = readSync(fd, buf, 0, SNIFF_BYTES, 0);
    if (n >= 2 && ((buf[0] === 0xff && buf[1] === 0xfe) || (buf[0] === 0xfe && buf[1] === 0xff))) return 'a UTF-16 byte-order mark';
    const nul = buf.subarray(0, n).indexOf(0);
    return nul >= 0 ? `a NUL byte at ${nul}` : undefined;
  } finally {
    closeSync(fd);
  }
}

/**
 * Where a UTF-8 scan of `buf` stops: `bad` is the offset of the first NUL byte or invalid sequence
 * (−1: none); otherwise `complete` is the length of the prefix made of whole characters (a
 * character cut by the end of the buffer is left for the next chunk).
 */
export function scanUtf8(buf: Uint8Array): { bad: number; complete: number } {
  const n = buf.length;
  let i = 0;
  while (i < n) {
    const b = buf[i]!;
    if (b < 0x80) {
      if (b === 0) return { bad: i, complete: i };
      i++;
      continue;
    }
    // Lead byte: the sequence length and the range of the second byte (RFC 3629: no overlongs,
    // no surrogates, nothing above U+10FFFF).
    let len: number, lo = 0x80, hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) len = 2;
    else if (b >= 0xe0 && b <= 0xef) {
      len = 3;
      if (b === 0xe0) lo = 0xa0;
      else if (b === 0xed) hi = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      len = 4;
      if (b === 0xf0) lo = 0x90;
      else if (b === 0xf4) hi = 0x8f;
    } else return { bad: i, complete: i };
    for (let k = 1; k < len; k++) {
      if (i + k >= n) return { bad: -1, complete: i };
      const c = buf[i + k]!;
      if (k === 1 ? c < lo || c > hi : c < 0x80 || c > 0xbf) return { bad: i, complete: i };
    }
    i += len;
  }
  return { bad: -1, complete: n };
}

function hex(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => `0x${b.toString(16).padStart(2, '0')}`).join(' ');
}

/** The one-line error for the byte at `offset` of `path` (`bytes`: from that byte on). */
function notText(path: string, offset: number, bytes: Uint8Array): never {
  if (offset === 0 && bytes.length >= 2 && ((bytes[0] === 0xff && bytes[1] === 0xfe) || (bytes[0] === 0xfe && bytes[1] === 0xff))) {
    fail('BAD_FILE', `${path}: starts with a UTF-16 byte-order mark; mdlm reads UTF-8 — convert it, e.g. iconv -f UTF-16 -t UTF-8 ${path} > ${path}.utf8`);
  }
  if (bytes[0] === 0) {
    fail('BAD_FILE', `${path}: byte ${offset} is NUL (0x00): a binary file, not text; pass UTF-8 text or JSON Lines (convert other documents first, e.g. pdftotext for a PDF)`);
  }
  fail('BAD_FILE', `${path}: invalid UTF-8 at byte ${offset} (${hex(bytes.subarray(0, 4))}); convert the file to UTF-8 first, e.g. iconv -f LATIN1 -t UTF-8 ${path} > ${path}.utf8`);
}

/** The file's text, chunk by chunk, checked as UTF-8 without NUL bytes; `onBytes` gets the bytes read. */
async function* utf8Chunks(path: string, onBytes?: (n: number) => void): AsyncGenerator<string> {
  let offset = 0;
  let carry = new Uint8Array(0);
  for await (const chunk of createReadStream(path) as AsyncIterable<Buffer>) {
    onBytes?.(chunk.length);
    let buf: Uint8Array = chunk;
    if (carry.length) {
      buf = new Uint8Array(carry.length + chunk.length);
      buf.set(carry);
      buf.set(chunk, carry.length);
    }
    const { bad, complete } = scanUtf8(buf);
    if (bad >= 0) notText(path, offset + bad, buf.subarray(bad));
    let start = 0;
    if (offset === 0 && complete >= 3 && buf[0] === 0xef && buf[1] === 0xbb && buf[2] === 0xbf) start = 3;
    if (complete > start) yield Buffer.from(buf.buffer, buf.byteOffset + start, complete - start).toString('utf8');
    offset += complete;
    carry = buf.slice(complete);
  }
  if (carry.length) notText(path, offset, carry);
}

/** Lines of the file, split at \n, \r\n or \r (what readline does), the line breaks removed. */
async function* lines(path: string, onBytes?: (n: number) => void): AsyncGenerator<string> {
  let buf = '';
  const BREAK = /\r\n|\n|\r/g;
  for await (const text of utf8Chunks(path, onBytes)) {
    buf += text;
    BREAK.lastIndex = 0;
    let start = 0;
    for (let m = BREAK.exec(buf); m; m = BREAK.exec(buf)) {
      // A \r at the end of what has been read may be the first half of a \r\n.
      if (m[0] === '\r' && m.index === buf.length - 1) break;
      yield buf.slice(start, m.index);
      start = m.index + m[0].length;
    }
    buf = buf.slice(start);
  }
  if (buf.endsWith('\r')) buf = buf.slice(0, -1);
  if (buf !== '') yield buf;
}

/** A JSON object parsed from a line, or undefined when the line is not one. */
function parseObject(line: string): Record<string, unknown> | undefined {
  if (!line.trimStart().startsWith('{')) return undefined;
  try {
    const v: unknown = JSON.parse(line);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** The JSON object on line `lineNo` of a JSON Lines file, or an error naming the file and line. */
function jsonObject(path: string, lineNo: number, line: string): Record<string, unknown> {
  const obj = parseObject(line);
  if (obj) return obj;
  let why = 'not a JSON object';
  try {
    JSON.parse(line);
  } catch (e) {
    why = `not valid JSON (${(e as Error).message})`;
  }
  return fail('BAD_FILE', `${path}:${lineNo}: ${why}; each line of a JSON Lines file must be one JSON object`);
}

/** The objects of a JSON Lines file with their line numbers (1-based), blank lines skipped; `onBytes` receives the bytes read. */
export async function* jsonLines(path: string, onBytes?: (n: number) => void): AsyncGenerator<{ line: number; value: Record<string, unknown> }> {
  let lineNo = 0;
  for await (const line of lines(path, onBytes)) {
    lineNo++;
    if (line.trim() !== '') yield { line: lineNo, value: jsonObject(path, lineNo, line) };
  }
}

/**
 * Documents of one input file, streamed: the `field` of each JSON Lines object, or the blank-line
 * separated paragraphs of plain text (lines joined with \n). `onBytes` receives the bytes read.
 */
export async function* readDocuments(path: string, field = 'text', onBytes?: (n: number) => void): AsyncGenerator<string> {
  let format: 'jsonl' | 'text' | undefined = JSONL_NAME.test(path) ? 'jsonl' : TEXT_NAME.test(path) ? 'text' : undefined;
  let lineNo = 0;
  let para: string[] = [];
  for await (const line of lines(path, onBytes)) {
    lineNo++;
    if (format === undefined) {
      if (line.trim() === '') continue;
      format = parseObject(line) ? 'jsonl' : 'text';
      if (format === 'text' && /\.json$/i.test(path)) {
        fail('BAD_FILE', `${path}:${lineNo}: a .json file whose first line is not a JSON object; mdlm reads JSON Lines (one object per line) — for a JSON array convert it first, e.g. jq -c '.[]' ${path} > ${path}l`);
      }
    }
    if (format === 'jsonl') {
      if (line.trim() === '') continue;
      const obj = jsonObject(path, lineNo, line);
      const v = obj[field];
      if (typeof v !== 'string') {
        const keys = Object.keys(obj).slice(0, 8).join(', ');
        fail('BAD_FILE', `${path}:${lineNo}: field "${field}" is ${v === undefined ? 'missing' : `a ${typeof v}, not a string`} (keys: ${keys}); pass the name of the text field as --field (mdlm data prepare, mdlm eval)`);
      }
      if (v.trim() !== '') yield v;
    } else if (line.trim() === '') {
      if (para.length) yield para.join('\n');
      para = [];
    } else para.push(line);
  }
  if (para.length) yield para.join('\n');
}
