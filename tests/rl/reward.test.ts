/**
 * Rewards (src/rl/reward.ts): the built-in exact-match and format rewards, a user's module (sync
 * and async default exports), and the errors of a module that throws, returns a non-number or
 * exports no function, each naming the module and the prompt.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { exactMatchReward, formatReward, parsePrompts, rewardFrom, scoreAll } from '../../src/rl/reward.js';

const dir = mkdtempSync(join(tmpdir(), 'mdlm-reward-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const p = (prompt: string, answer?: string, line = 1) => ({ prompt, ...(answer !== undefined ? { answer } : {}), where: `prompts.jsonl:${line}` });
const module = (name: string, body: string) => {
  const file = join(dir, name);
  writeFileSync(file, body);
  return file;
};

describe('built-in rewards', () => {
  it('exact-match compares trimmed text with the gold answer and needs one', async () => {
    const r = exactMatchReward();
    expect(await scoreAll(r, [{ prompt: p('abc', 'cba'), completion: ' cba\n' }, { prompt: p('abc', 'cba'), completion: 'cab' }])).toEqual([1, 0]);
    await expect(scoreAll(r, [{ prompt: p('abc', undefined, 7), completion: 'cba' }])).rejects.toThrow(/reward exact-match threw on the prompt at prompts\.jsonl:7 \("abc"\): the prompt has no "answer"/);
  });

  it('format matches the whole completion', async () => {
    const r = await rewardFrom('format:<answer>\\d+</answer>');
    expect(await scoreAll(r, [{ prompt: p('x'), completion: '<answer>42</answer>' }, { prompt: p('x'), completion: 'so <answer>42</answer>' }])).toEqual([1, 0]);
    expect(() => formatReward('(')).toThrow(/format reward: \/\(\/ is not a regular expression/);
  });
});

describe('reward modules', () => {
  it('a default-exported function, sync or async, gets the prompt, the completion and the answer', async () => {
    const sync = await rewardFrom(module('len.mjs', 'export default (prompt, completion, answer) => completion.length + (answer === undefined ? 0 : 100) + prompt.length / 10;'));
    expect(await scoreAll(sync, [{ prompt: p('abcd', 'z'), completion: 'xy' }])).toEqual([102.4]);
    const async = await rewardFrom(module('async.mjs', 'export default async (prompt, completion) => { await new Promise((r) => setTimeout(r, 1)); return completion === prompt ? 1 : -1; };'));
    expect(await scoreAll(async, [{ prompt: p('a'), completion: 'a' }, { prompt: p('a'), completion: 'b' }])).toEqual([1, -1]);
  });

  it('a module that throws, returns a non-number or exports no function is an error naming it and the prompt', async () => {
    const throws = module('throws.mjs', "export default () => { throw new Error('no verifier'); };");
    await expect(scoreAll(await rewardFrom(throws), [{ prompt: p('2+2', '4', 3), completion: '4' }])).rejects.toThrow(`reward ${throws} threw on the prompt at prompts.jsonl:3 ("2+2"): no verifier`);
    const str = module('string.mjs', "export default () => '1';");
    await expect(scoreAll(await rewardFrom(str), [{ prompt: p('q', undefined, 5), completion: 'c' }])).rejects.toThrow(`reward ${str} returned a string for the prompt at prompts.jsonl:5 ("q"); it must return a finite number`);
    const nan = module('nan.mjs', 'export default async () => NaN;');
    await expect(scoreAll(await rewardFrom(nan), [{ prompt: p('q'), completion: 'c' }])).rejects.toThrow(/returned NaN for the prompt at prompts\.jsonl:1/);
    const none = module('none.mjs', 'export const reward = () => 1;');
    await expect(rewardFrom(none)).rejects.toThrow(`reward module ${none}: its default export is missing`);
    await expect(rewardFrom(join(dir, 'absent.mjs'))).rejects.toThrow(/reward module .*absent\.mjs: cannot be loaded/);
  });
});

describe('prompt files', () => {
  it('reads {"prompt", "answer"} rows with their file:line and refuses malformed rows by line', () => {
    expect(parsePrompts('{"prompt": "abc", "answer": "cba"}\n\n{"prompt": "de"}\n', 'p.jsonl')).toEqual([
      { prompt: 'abc', answer: 'cba', where: 'p.jsonl:1' },
      { prompt: 'de', where: 'p.jsonl:3' },
    ]);
    expect(() => parsePrompts('{"prompt": "a"}\n{"prompt": 3}\n', 'p.jsonl')).toThrow(/p\.jsonl:2: expected \{"prompt"/);
    expect(() => parsePrompts('{"prompt": "a", "answer": 4}\n', 'p.jsonl')).toThrow(/p\.jsonl:1: "answer" must be a string/);
    expect(() => parsePrompts('{"prompt": "a", "response": "b"}\n', 'p.jsonl')).toThrow(/p\.jsonl:1: unknown keys response/);
    expect(() => parsePrompts('{"prompt": \n', 'p.jsonl')).toThrow(/p\.jsonl:1: not JSON/);
    expect(() => parsePrompts('\n', 'p.jsonl')).toThrow(/p\.jsonl: no prompts/);
  });
});
