import { expect } from 'vitest';
import { MdlmError } from '../../src/errors.js';

/** The message of the BAD_CONFIG error `fn` throws; fails the test when it throws another or none. */
export function badConfig(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(MdlmError);
    expect((e as MdlmError).code).toBe('BAD_CONFIG');
    return (e as MdlmError).message;
  }
  throw new Error('expected a BAD_CONFIG error');
}
