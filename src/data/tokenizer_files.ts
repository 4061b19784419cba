/**
 * `tokenizerFromFiles` rebuilds a tokenizer from the files `Tokenizer.files()` wrote, free of Node
 * built-ins, so in a browser too (e.g. from a fetched checkpoint). The Node loader, from paths, is
 * `loadTokenizer` in tokenizer.ts.
 */
import { fail } from '../errors.js';
import { DESCRIPTOR_FILE, HF_TOKENIZER_FILE, type Tokenizer } from './tokenizer_core.js';

/**
 * A tokenizer from checkpoint files (name → contents), as `files()` returns them: the mdlm
 * descriptor for byte / gpt2, or an HF tokenizer.json (+ optional tokenizer_config.json).
 */
export async function tokenizerFromFiles(files: Record<string, string | Uint8Array>, source = 'checkpoint'): Promise<Tokenizer> {
  const text = (name: string): string | undefined => {
    const v = files[name];
    return v === undefined ? undefined : typeof v === 'string' ? v : new TextDecoder().decode(v);
  };
  const parse = (name: string): unknown => {
    try {
      return JSON.parse(text(name)!);
    } catch (e) {
      fail('BAD_FILE', `${source}/${name} is not valid JSON (${(e as Error).message})`);
    }
  };
  const config = text(DESCRIPTOR_FILE) !== undefined ? (parse(DESCRIPTOR_FILE) as Record<string, unknown>) : undefined;
  if (config && (config.mdlm_tokenizer === 'byte' || config.mdlm_tokenizer === 'gpt2')) {
    return config.mdlm_tokenizer === 'byte' ? (await import('./byte.js')).ByteTokenizer.create() : (await import('./gpt2.js')).createGpt2Tokenizer();
  }
  if (text(HF_TOKENIZER_FILE) !== undefined) {
    const { HfTokenizer } = await import('./hf.js');
    return HfTokenizer.fromJson(parse(HF_TOKENIZER_FILE), { name: `hf:${source}`, source: `${source}/${HF_TOKENIZER_FILE}`, config: config ?? {} });
  }
  fail('NOT_FOUND', `${source} holds no tokenizer: expected ${HF_TOKENIZER_FILE} or an mdlm ${DESCRIPTOR_FILE}`);
}
