/**
 * Filesystem errors as users read them: a Node error (EACCES, EROFS, ENOSPC, ENOTDIR, EEXIST,
 * ENOENT, ...) together with the path and what mdlm was doing there becomes one MdlmError line
 * that names the path, says what is wrong and how to fix it. Every write the CLI makes goes
 * through `fileError` (directly, through `withFileErrors`, or through the CLI's last-resort
 * catch), so no Node stack trace reaches the user.
 *
 * `makeDir` replaces `mkdirSync(path, { recursive: true })`, which loops forever where mkdir
 * answers ENOENT under a directory that exists (Node retries creating the parent, which exists,
 * then the child again): any path under /proc, for one. `checkWritableDir` and
 * `checkWritableFile` test a destination up front with a bounded number of operations.
 */
import { accessSync, closeSync, constants, mkdirSync, openSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { MdlmError } from '../errors.js';

/** A Node system error (has an errno code such as 'EACCES'). */
export function isSystemError(e: unknown): e is NodeJS.ErrnoException & { code: string } {
  return e instanceof Error && typeof (e as NodeJS.ErrnoException).code === 'string' && /^E[A-Z0-9]+$/.test((e as NodeJS.ErrnoException).code!);
}

export interface FileAction {
  /** The file or directory the operation was on. */
  readonly path: string;
  /** What mdlm was doing, as a verb phrase: 'create the run directory', 'write', ... */
  readonly action: string;
  /** The flag that chose the path (--out, --save-logits), named in the fix. */
  readonly flag?: string;
}

/** What an errno code means, and what the user can do about it. */
function explain(code: string, { path, action, flag }: FileAction): { reason: string; fix: string } {
  const another = flag ? `pass another ${flag}` : 'choose another path';
  switch (code) {
    case 'EACCES':
    case 'EPERM':
      return { reason: 'permission denied', fix: `${another}, or give your user write access to it` };
    case 'EROFS':
      return { reason: 'the file system is read-only', fix: `${another} on a writable file system` };
    case 'ENOSPC':
      return { reason: 'no space left on the device', fix: `free space there (train.keepCheckpoints bounds how many checkpoints a run keeps) or ${another} on another device` };
    case 'EDQUOT':
      return { reason: 'the disk quota is exhausted', fix: `free space within the quota or ${another}` };
    case 'ENOTDIR': {
      const file = fileAncestor(path);
      return { reason: file ? `${file} is a file, not a directory` : 'a component of the path is not a directory', fix: another };
    }
    case 'EEXIST':
      return { reason: 'something that is not a directory is already there', fix: `${another}, or move that file away` };
    case 'EISDIR':
      return { reason: 'it is a directory', fix: `${another} naming a file` };
    case 'ENOENT': {
      // ENOENT although the directory it goes in exists: a file system that takes no new entries.
      const parent = dirname(resolve(path));
      return /^(create|write)/.test(action) && existingAncestor(path) === parent
        ? { reason: `${parent} does not take new entries (not a regular file system)`, fix: `${another} on a regular file system` }
        : { reason: 'no such file or directory', fix: `check the path or ${another}` };
    }
    case 'ENAMETOOLONG':
      return { reason: 'the name is too long', fix: `${another} with a shorter name` };
    case 'EMFILE':
    case 'ENFILE':
      return { reason: 'too many open files', fix: 'raise the open-file limit (ulimit -n) and retry' };
    case 'EIO':
      return { reason: 'an input/output error of the device', fix: `check the device, or ${another}` };
    case 'ELOOP':
      return { reason: 'too many symbolic links', fix: `check the links on the path or ${another}` };
    default:
      return { reason: code, fix: another };
  }
}

/** The nearest ancestor of `path` (itself included) that exists. */
function existingAncestor(path: string): string | undefined {
  for (let p = resolve(path); ; p = dirname(p)) {
    try {
      statSync(p);
      return p;
    } catch {
      if (dirname(p) === p) return undefined;
    }
  }
}

/** The first component of `path` that exists and is not a directory. */
function fileAncestor(path: string): string | undefined {
  const chain: string[] = [];
  for (let p = resolve(path); ; p = dirname(p)) {
    chain.unshift(p);
    if (dirname(p) === p) break;
  }
  for (const p of chain) {
    try {
      if (!statSync(p).isDirectory()) return p;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** The MdlmError for a failed filesystem operation: `cannot <action> <path>: <reason> (<CODE>); <fix>`. */
export function fileError(e: NodeJS.ErrnoException & { code: string }, at: FileAction): MdlmError {
  const { reason, fix } = explain(e.code, at);
  return new MdlmError(e.code === 'ENOENT' && /^(read|open)/.test(at.action) ? 'NOT_FOUND' : 'IO_ERROR', `cannot ${at.action} ${at.path}: ${reason} (${e.code}); ${fix}`);
}

/** `e` as fileError's one line where it is a filesystem error; anything else (a bug keeps its stack) as it is. */
export function asFileError(e: unknown, at: FileAction): unknown {
  return isSystemError(e) ? fileError(e, at) : e;
}

/** `fn()`, its filesystem errors turned into fileError's one line. */
export function withFileErrors<T>(at: FileAction, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    throw asFileError(e, at);
  }
}

/** The action of a Node error's syscall, for errors caught far from where they were raised. */
export function syscallAction(syscall: string | undefined): string {
  const actions: Record<string, string> = {
    open: 'open', mkdir: 'create the directory', write: 'write', read: 'read', rename: 'rename', unlink: 'remove', rmdir: 'remove',
    scandir: 'list the directory', stat: 'read', lstat: 'read', copyfile: 'copy to', fsync: 'write', ftruncate: 'write', access: 'access',
  };
  return (syscall && actions[syscall]) ?? 'use';
}

/**
 * Create `path` and any missing parents, in a bounded number of steps (one mkdir per missing
 * component); a component that is a file, or a place that takes no new directories, is a
 * fileError naming `flag`.
 */
export function makeDir(path: string, flag?: string): void {
  const missing: string[] = [];
  for (let p = resolve(path); ; p = dirname(p)) {
    let isDir: boolean;
    try {
      isDir = statSync(p).isDirectory();
    } catch (e) {
      if (!isSystemError(e) || e.code !== 'ENOENT') throw asFileError(e, { path, action: 'create the directory', ...(flag ? { flag } : {}) });
      missing.push(p);
      if (dirname(p) === p) break;
      continue;
    }
    if (!isDir) {
      const what = p === resolve(path) ? `${path} is a file, not a directory` : `${p} is a file, not a directory`;
      throw new MdlmError('IO_ERROR', `cannot create the directory ${path}: ${what}; ${flag ? `pass another ${flag}` : 'choose another path'}, or move that file away`);
    }
    break;
  }
  for (const dir of missing.reverse()) {
    try {
      mkdirSync(dir);
    } catch (e) {
      if (isSystemError(e) && e.code === 'EEXIST' && statSync(dir).isDirectory()) continue; // made meanwhile
      throw asFileError(e, { path: dir, action: 'create the directory', ...(flag ? { flag } : {}) });
    }
  }
}

/**
 * Make sure files can be written in directory `dir`, creating it if needed: a probe file is
 * created, written and removed. Errors name the directory and `flag`.
 */
export function checkWritableDir(dir: string, flag?: string): void {
  makeDir(dir, flag);
  const probe = resolve(dir, `.tmp-write-test-${process.pid}`);
  const at = { path: dir, action: 'write in the directory', ...(flag ? { flag } : {}) };
  withFileErrors(at, () => {
    const fd = openSync(probe, 'w');
    try {
      writeSync(fd, 'ok');
    } finally {
      closeSync(fd);
    }
    unlinkSync(probe);
  });
}

/**
 * Make sure `file` can be written (created or replaced): its directory exists and takes a new
 * file, and it is not a directory itself. Nothing is left behind.
 */
export function checkWritableFile(file: string, flag?: string): void {
  const at = { path: file, action: 'write', ...(flag ? { flag } : {}) };
  let isDir = false;
  try {
    isDir = statSync(file).isDirectory();
    accessSync(file, constants.W_OK);
  } catch (e) {
    if (!isSystemError(e) || e.code !== 'ENOENT') throw asFileError(e, at);
  }
  if (isDir) throw fileError(Object.assign(new Error('EISDIR'), { code: 'EISDIR' }), at);
  const dir = dirname(resolve(file));
  try {
    if (!statSync(dir).isDirectory()) throw Object.assign(new Error('ENOTDIR'), { code: 'ENOTDIR' });
  } catch (e) {
    throw asFileError(e, at);
  }
  const probe = resolve(dir, `.tmp-write-test-${process.pid}`);
  withFileErrors(at, () => {
    closeSync(openSync(probe, 'w'));
    unlinkSync(probe);
  });
}
