/** `mdlm --version` as a user runs it: bin/mdlm.js over the compiled dist/ (npm test builds it first). */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { mdlm } from './support/cli.js';

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };

describe('mdlm --version', () => {
  it.each(['--version', '-V'])('%s prints the package.json version alone and exits 0', (flag) => {
    const r = mdlm(flag);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(`${pkg.version}\n`);
    expect(r.stderr).toBe('');
  });

  it('--help lists the flag', () => {
    expect(mdlm('--help').stdout).toMatch(/-V, --version\s+print the version and exit/);
  });
});
