import { expect } from 'vitest';
import { MdlmError } from '../../src/errors.js';

/** Run fn, expect an MdlmError with the code, return its message. */
export async function mdlmError(fn: () => unknown, code = 'BAD_ARGUMENT'): Promise<string> {
  try {
    await fn();
  } catch (e) {
    expect(e).toBeInstanceOf(MdlmError);
    expect((e as MdlmError).code).toBe(code);
    return (e as MdlmError).message;
  }
  throw new Error('expected an MdlmError');
}
