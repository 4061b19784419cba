/** src/runtime/files.ts: filesystem errors as one line naming the path and the fix; bounded directory creation. */
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MdlmError } from '../src/errors.js';
import { checkWritableDir, checkWritableFile, fileError, makeDir, withFileErrors } from '../src/runtime/files.js';

const root = mkdtempSync(join(tmpdir(), 'mdlm-files-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A Node system error as fs raises it. */
function sysError(code: string, syscall = 'open'): NodeJS.ErrnoException & { code: string } {
  return Object.assign(new Error(`${code}: ${syscall}`), { code, syscall, errno: -1 });
}

function thrown(fn: () => unknown): MdlmError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(MdlmError);
    return e as MdlmError;
  }
  throw new Error('expected an MdlmError');
}

describe('fileError', () => {
  it('says what failed, where, why and what to do, on one line', () => {
    const at = { path: '/data/run/step-0000010/model.safetensors', action: 'write the checkpoint file', flag: '--out' };
    const cases: [string, RegExp][] = [
      ['EACCES', /permission denied \(EACCES\); pass another --out, or give your user write access/],
      ['EPERM', /permission denied \(EPERM\)/],
      ['EROFS', /the file system is read-only \(EROFS\); pass another --out on a writable file system/],
      ['ENOSPC', /no space left on the device \(ENOSPC\); free space there \(train\.keepCheckpoints .*\) or pass another --out on another device/],
      ['EDQUOT', /disk quota/],
      ['EMFILE', /too many open files \(EMFILE\); raise the open-file limit/],
      ['EIO', /input\/output error/],
      ['EWHATEVER', /EWHATEVER/],
    ];
    for (const [code, message] of cases) {
      const e = fileError(sysError(code), at);
      expect(e.code).toBe('IO_ERROR');
      expect(e.message).toMatch(/^cannot write the checkpoint file \/data\/run\/step-0000010\/model\.safetensors: /);
      expect(e.message).toMatch(message);
      expect(e.message).not.toContain('\n');
    }
    // Without a flag the fix names no flag.
    expect(fileError(sysError('EACCES'), { path: '/x', action: 'write' }).message).toMatch(/choose another path, or give your user/);
    // A missing file being read is NOT_FOUND.
    expect(fileError(sysError('ENOENT'), { path: join(root, 'nope'), action: 'read' }).code).toBe('NOT_FOUND');
  });

  it('names the component of the path that is a file (ENOTDIR)', () => {
    const file = join(root, 'plain-file');
    writeFileSync(file, 'x');
    const e = fileError(sysError('ENOTDIR', 'mkdir'), { path: join(file, 'a', 'b'), action: 'create the directory', flag: '--out' });
    expect(e.message).toBe(`cannot create the directory ${join(file, 'a', 'b')}: ${file} is a file, not a directory (ENOTDIR); pass another --out`);
  });

  it('withFileErrors turns system errors into one line and lets other errors through untouched', () => {
    const at = { path: '/somewhere', action: 'write' };
    expect(thrown(() => withFileErrors(at, () => { throw sysError('ENOSPC', 'write'); })).message).toMatch(/^cannot write \/somewhere: no space left/);
    const bug = new TypeError('a bug');
    expect(() => withFileErrors(at, () => { throw bug; })).toThrow(bug);
  });
});

describe('makeDir', () => {
  it('creates missing parents', () => {
    const dir = join(root, 'a', 'b', 'c');
    makeDir(dir);
    expect(existsSync(dir)).toBe(true);
    makeDir(dir); // exists: nothing to do
  });

  // mkdirSync(path, { recursive: true }) never returns here: mkdir answers ENOENT under /proc, and
  // Node's recursive mkdir creates the (existing) parent and retries, forever.
  it.runIf(existsSync('/proc/self'))('fails at once on a file system that takes no new directories (/proc)', () => {
    const started = performance.now();
    const e = thrown(() => makeDir('/proc/mdlm-test/run', '--out'));
    expect(performance.now() - started).toBeLessThan(1000);
    expect(e.message).toBe('cannot create the directory /proc/mdlm-test: /proc does not take new entries (not a regular file system) (ENOENT); pass another --out on a regular file system');
  });

  it('refuses a path that is a file, or runs through one', () => {
    const file = join(root, 'file-out');
    writeFileSync(file, 'x');
    expect(thrown(() => makeDir(file, '--out')).message).toBe(`cannot create the directory ${file}: ${file} is a file, not a directory; pass another --out, or move that file away`);
    expect(thrown(() => makeDir(join(file, 'sub'), '--out')).message).toBe(`cannot create the directory ${join(file, 'sub')}: ${file} is a file, not a directory (ENOTDIR); pass another --out`);
  });
});

// Permission bits bind every user but root.
const asRoot = process.getuid?.() === 0;

describe('checkWritableDir and checkWritableFile', () => {
  it('accept a writable place and leave nothing behind', () => {
    const dir = join(root, 'fine');
    checkWritableDir(dir, '--out');
    expect(readdirSync(dir)).toEqual([]);
    checkWritableFile(join(dir, 'logits.safetensors'), '--save-logits');
    expect(readdirSync(dir)).toEqual([]);
  });

  it('refuse a directory given as the file, and a file whose directory is missing', () => {
    const dir = join(root, 'a-dir');
    mkdirSync(dir);
    expect(thrown(() => checkWritableFile(dir, '--save-logits')).message).toBe(`cannot write ${dir}: it is a directory (EISDIR); pass another --save-logits naming a file`);
    expect(thrown(() => checkWritableFile(join(root, 'missing', 'x.safetensors'), '--save-logits')).message).toMatch(/no such file or directory \(ENOENT\); check the path or pass another --save-logits/);
  });

  it.skipIf(asRoot)('refuse a read-only directory (EACCES)', () => {
    const dir = join(root, 'read-only');
    mkdirSync(dir);
    chmodSync(dir, 0o555);
    try {
      expect(thrown(() => checkWritableDir(dir, '--out')).message).toBe(`cannot write in the directory ${dir}: permission denied (EACCES); pass another --out, or give your user write access to it`);
      expect(thrown(() => checkWritableFile(join(dir, 'x'), '--save-logits')).message).toMatch(/permission denied \(EACCES\); pass another --save-logits/);
    } finally {
      chmodSync(dir, 0o755);
    }
  });
});
