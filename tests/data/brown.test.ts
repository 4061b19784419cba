import { describe, expect, it } from 'vitest';
import { brownDocuments, detokenize } from '../../src/data/brown.js';

describe('Brown corpus', () => {
  it('has 500 documents of plain text without tags', () => {
    const docs = brownDocuments();
    expect(docs.length).toBe(500);
    expect(docs[0]!.startsWith("The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary election produced \"no evidence\" that any irregularities took place.")).toBe(true);
    // Word/tag remnants such as "jury/nn" or "./.": the tagged files hold ~1.16M tags; the text keeps
    // only genuine slashes (one phonetics text writes "/r/.").
    const tag = /\/(at|nn|nns|np|np\$|vbd|vbn|vbz|in|jj|cc|rb|dt|pps|\.|,)(-tl|-hl)?(\s|$)/g;
    let remnants = 0;
    for (const d of docs) {
      expect(d.length).toBeGreaterThan(1000);
      remnants += [...d.matchAll(tag)].length;
      expect(d).not.toContain(';;');
      expect(d).not.toContain('``');
    }
    expect(remnants).toBeLessThanOrEqual(1);
  });

  it('spaces punctuation like ordinary prose', () => {
    expect(detokenize(['He', 'said', ',', '``', 'Go', '(', 'now', ')', "''", '.'])).toBe('He said, "Go (now)".');
    expect(detokenize(['Why', '?', '?', 'Because', ';', ';', 'so'])).toBe('Why? Because; so');
  });
});
