/**
 * Option parsers for commander that fail with an MdlmError naming the flag, so a bad value prints
 * `mdlm: BAD_ARGUMENT: …` and exits non-zero like every other user mistake.
 */
import { fail } from '../errors.js';

export function intOption(flag: string, min: number): (v: string) => number {
  return (v) => {
    const x = Number(v);
    if (v.trim() === '' || !Number.isSafeInteger(x) || x < min) fail('BAD_ARGUMENT', `${flag}: expected an integer ≥ ${min}, got "${v}"`);
    return x;
  };
}

export function numberOption(flag: string, min: number, max = Infinity, minExclusive = false): (v: string) => number {
  return (v) => {
    const x = Number(v);
    const low = minExclusive ? x > min : x >= min;
    if (v.trim() === '' || !Number.isFinite(x) || !low || x > max) {
      const range = max === Infinity ? `${minExclusive ? '>' : '≥'} ${min}` : `in ${minExclusive ? '(' : '['}${min}, ${max}]`;
      fail('BAD_ARGUMENT', `${flag}: expected a number ${range}, got "${v}"`);
    }
    return x;
  };
}

export function choiceOption<T extends string>(flag: string, choices: readonly T[]): (v: string) => T {
  return (v) => ((choices as readonly string[]).includes(v) ? (v as T) : fail('BAD_ARGUMENT', `${flag}: expected one of ${choices.join(', ')}, got "${v}"`));
}
