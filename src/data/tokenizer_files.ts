/**
 * `tokenizerFromFiles` rebuilds a tokenizer from the files `Tokenizer.files()` wrote, free of Node
 * built-ins, so in a browser too (e.g. from a fetched checkpoint). The Node loader, from paths, is
 * `loadTokenizer` in tokenizer.ts; both pick the tokenizer with `tokenizerFromParts`.
 */
import { fail } from '../errors.js';
import { HF_TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, type Tokenizer } from './tokenizer_core.js';

/**
 * The tokenizer a tokenizer_config.json (parsed, if any) and a tokenizer.json (read only when
 * needed) describe. A config with `mdlm_tokenizer` names a built-in (byte, gpt2) whose own
 * implementation runs, with the [MASK] when the config names a mask token and the config's chat
 * template; anything else is the tokenizer.json through @huggingface/tokenizers.
 */
export async function tokenizerFromParts(config: Record<string, unknown> | undefined, tokenizerJson: () => unknown, source: string): Promise<Tokenizer> {
  const builtin = config?.mdlm_tokenizer;
  if (builtin === 'byte' || builtin === 'gpt2') {
    const base = builtin === 'byte' ? (await import('./byte.js')).ByteTokenizer.create() : (await import('./gpt2.js')).createGpt2Tokenizer();
    const masked = config!.mask_token !== undefined && config!.mask_token !== null ? base.withMaskToken() : base;
    checkRecordedIds(`${source}/${TOKENIZER_CONFIG_FILE}`, config!, masked);
    const template = config!.chat_template;
    if (template !== undefined && typeof template !== 'string') fail('BAD_FILE', `${source}/${TOKENIZER_CONFIG_FILE}: chat_template is a ${typeof template}, not the text of a Jinja template`);
    return template === undefined ? masked : masked.withChatTemplate(template);
  }
  if (builtin !== undefined) fail('BAD_FILE', `${source}/${TOKENIZER_CONFIG_FILE}: unknown mdlm_tokenizer "${String(builtin)}" (expected "byte" or "gpt2")`);
  const json = tokenizerJson();
  if (json === undefined) {
    fail('NOT_FOUND', `${source} holds no tokenizer: expected ${HF_TOKENIZER_FILE} (written by a checkpoint, "mdlm data prepare" or Hugging Face)`);
  }
  const { HfTokenizer } = await import('./hf.js');
  return HfTokenizer.fromJson(json, { name: `hf:${source}`, source: `${source}/${HF_TOKENIZER_FILE}`, config: config ?? {} });
}

/** Ids an older mdlm wrote into the config (vocab_size, eos_token_id, mask_token_id) must be the built-in's. */
function checkRecordedIds(path: string, c: Record<string, unknown>, tok: Tokenizer): void {
  const pairs: [string, unknown, number | undefined][] = [
    ['vocab_size', c.vocab_size, tok.vocabSize],
    ['eos_token_id', c.eos_token_id, tok.eosId],
    ['mask_token_id', c.mask_token_id, tok.maskId],
  ];
  for (const [key, got, want] of pairs) {
    if (got !== undefined && got !== want) {
      fail('BAD_FILE', `${path}: ${key} is ${String(got)} but the built-in ${tok.name} tokenizer has ${String(want)}; the file was written by an incompatible mdlm version or edited by hand`);
    }
  }
}

/** A tokenizer from checkpoint files (name → contents), as `files()` returns them. */
export async function tokenizerFromFiles(files: Record<string, string | Uint8Array>, source = 'checkpoint'): Promise<Tokenizer> {
  const parse = (name: string): unknown => {
    const v = files[name];
    if (v === undefined) return undefined;
    try {
      return JSON.parse(typeof v === 'string' ? v : new TextDecoder().decode(v));
    } catch (e) {
      return fail('BAD_FILE', `${source}/${name} is not valid JSON (${(e as Error).message})`);
    }
  };
  return tokenizerFromParts(parse(TOKENIZER_CONFIG_FILE) as Record<string, unknown> | undefined, () => parse(HF_TOKENIZER_FILE), source);
}
