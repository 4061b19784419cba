/**
 * Conversations for supervised fine-tuning and `mdlm chat`: what a row of chat data is, and how a
 * conversation becomes tokens with the assistant's marked, through the model's chat template.
 *
 * A row is `{"messages": [{"role", "content"}, ...]}` (roles system, user, assistant) or
 * `{"prompt", "response"}` (with an optional `"system"`). The chat template is Jinja, rendered by
 * @huggingface/jinja as transformers renders it (trim_blocks and lstrip_blocks), with `messages`,
 * `add_generation_prompt` and the tokenizer's special tokens (`eos_token`, ...); a tokenizer
 * without one uses BUILTIN_CHAT_TEMPLATE.
 *
 * Which tokens are the assistant's: for each assistant message i, the conversation up to message
 * i with the generation prompt and the conversation through message i are rendered; the
 * characters between the two are the assistant's turn (its content and whatever closes the turn,
 * e.g. <|im_end|> or EOS). A template that does not render a conversation's beginning as the
 * beginning of the whole (one that rewrites earlier turns) is refused: the turns cannot be told
 * apart. The text is tokenised piece by piece, the assistant's turns apart from the rest, as at
 * inference, where the prompt is tokenised alone and the reply generated after it. The text of
 * the EOS token is encoded as the EOS id wherever it stands (the byte and GPT-2 tokenizers encode
 * special-token text as plain text otherwise).
 */
import { Template } from '@huggingface/jinja';
import { fail } from '../errors.js';
import type { Tokenizer } from './tokenizer_core.js';

export const CHAT_ROLES = ['system', 'user', 'assistant'] as const;
export type ChatRole = (typeof CHAT_ROLES)[number];

export interface ChatMessage {
  readonly role: ChatRole;
  readonly content: string;
}

/**
 * The template of tokenizers that have none: each message as `<|role|>`, a newline and its
 * content; the assistant's content ends with EOS (which ends its turn, and so the reply `mdlm
 * chat` samples), the others' with a newline. The generation prompt is `<|assistant|>` and a
 * newline.
 */
export const BUILTIN_CHAT_TEMPLATE = [
  '{%- for message in messages -%}',
  "<|{{ message.role }}|>{{ '\\n' }}{{ message.content }}",
  "{%- if message.role == 'assistant' -%}{{ eos_token }}{%- else -%}{{ '\\n' }}{%- endif -%}",
  '{%- endfor -%}',
  "{%- if add_generation_prompt -%}<|assistant|>{{ '\\n' }}{%- endif -%}",
].join('\n');

/**
 * The conversation of a row of chat data, or a BAD_FILE error naming `where` (file:line) and what
 * is wrong: not one of the two shapes, an unknown role, content that is not a string, no
 * assistant message.
 */
export function parseConversation(row: Record<string, unknown>, where: string): ChatMessage[] {
  const shapes = 'expected {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]} or {"prompt": "...", "response": "..."}';
  let messages: ChatMessage[];
  if ('messages' in row) {
    const extra = Object.keys(row).filter((k) => k !== 'messages');
    if (extra.length) fail('BAD_FILE', `${where}: a conversation with "messages" has other keys too (${extra.join(', ')}); ${shapes}`);
    const list = row.messages;
    if (!Array.isArray(list) || list.length === 0) fail('BAD_FILE', `${where}: "messages" must be a non-empty array of {"role", "content"} objects`);
    messages = list.map((m: unknown, i) => message(m, `${where}: messages[${i}]`));
  } else if ('prompt' in row || 'response' in row) {
    const extra = Object.keys(row).filter((k) => k !== 'prompt' && k !== 'response' && k !== 'system');
    if (extra.length) fail('BAD_FILE', `${where}: unknown keys ${extra.join(', ')} beside prompt and response; ${shapes}`);
    for (const key of ['prompt', 'response', ...('system' in row ? ['system'] : [])]) {
      if (typeof row[key] !== 'string') fail('BAD_FILE', `${where}: "${key}" is ${row[key] === undefined ? 'missing' : `a ${typeName(row[key])}, not a string`}; ${shapes}`);
    }
    messages = [
      ...(typeof row.system === 'string' ? [{ role: 'system' as const, content: row.system }] : []),
      { role: 'user', content: row.prompt as string },
      { role: 'assistant', content: row.response as string },
    ];
  } else {
    fail('BAD_FILE', `${where}: keys ${Object.keys(row).join(', ') || '(none)'} are not a conversation; ${shapes}`);
  }
  if (!messages.some((m) => m.role === 'assistant')) fail('BAD_FILE', `${where}: the conversation has no assistant message, so nothing to learn from`);
  return messages;
}

function message(m: unknown, where: string): ChatMessage {
  if (m === null || typeof m !== 'object' || Array.isArray(m)) fail('BAD_FILE', `${where} is a ${typeName(m)}, not a {"role", "content"} object`);
  const { role, content, ...rest } = m as Record<string, unknown>;
  if (!CHAT_ROLES.includes(role as ChatRole)) fail('BAD_FILE', `${where}: unknown role ${JSON.stringify(role)}; the roles are ${CHAT_ROLES.join(', ')}`);
  if (typeof content !== 'string') fail('BAD_FILE', `${where}: "content" is ${content === undefined ? 'missing' : `a ${typeName(content)}, not a string`}`);
  const extra = Object.keys(rest);
  if (extra.length) fail('BAD_FILE', `${where}: unknown keys ${extra.join(', ')} beside role and content`);
  return { role: role as ChatRole, content };
}

function typeName(v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v;
}

/** A conversation as tokens: `mask` is 1 on the assistant's tokens, 0 on the rest. */
export interface EncodedConversation {
  readonly ids: number[];
  readonly mask: number[];
}

/** A chat template bound to a tokenizer: renders conversations and encodes them with the assistant's tokens marked. */
export class ChatTemplate {
  private readonly template: Template;
  /** Text that closes the assistant's turn besides EOS (e.g. <|im_end|>); undefined where EOS does. */
  readonly turnEnd: string | undefined;

  /** `source` names where the template comes from in messages (a tokenizer_config.json, a file, "the built-in template"). */
  constructor(readonly text: string, readonly tokenizer: Tokenizer, readonly source: string) {
    try {
      this.template = new Template(text);
    } catch (e) {
      fail('BAD_FILE', `${source}: the chat template is not valid Jinja (${(e as Error).message})`);
    }
    this.turnEnd = this.findTurnEnd();
  }

  /** The conversation as the template renders it (`generationPrompt`: followed by the start of an assistant turn). */
  render(messages: readonly ChatMessage[], generationPrompt: boolean, where = 'the conversation'): string {
    try {
      return this.template.render({ ...this.tokenizer.specialTokens, messages, add_generation_prompt: generationPrompt });
    } catch (e) {
      return fail('BAD_FILE', `${where}: the chat template of ${this.source} fails to render it (${(e as Error).message})`);
    }
  }

  /**
   * The conversation's tokens, the assistant's marked (`generationPrompt`: followed by the start of
   * an assistant turn, which is what `mdlm chat` samples after). `where` names the row in errors.
   */
  encode(messages: readonly ChatMessage[], generationPrompt: boolean, where = 'the conversation'): EncodedConversation {
    const whole = this.render(messages, generationPrompt, where);
    const cuts: number[] = [0];
    messages.forEach((m, i) => {
      if (m.role !== 'assistant') return;
      const before = this.render(messages.slice(0, i), true, where);
      const through = this.render(messages.slice(0, i + 1), false, where);
      if (!through.startsWith(before) || !whole.startsWith(through) || before.length < cuts.at(-1)!) {
        fail('BAD_FILE', `${where}: the chat template of ${this.source} renders the conversation up to message ${i + 1} as something other than the beginning of the whole, so the assistant's tokens cannot be told from the rest; use a template that renders earlier turns the same whatever follows them`);
      }
      cuts.push(before.length, through.length);
    });
    cuts.push(whole.length);
    const ids: number[] = [];
    const mask: number[] = [];
    for (let k = 0; k + 1 < cuts.length; k++) {
      const piece = encodeChatText(this.tokenizer, whole.slice(cuts[k], cuts[k + 1]));
      for (const id of piece) {
        ids.push(id);
        mask.push(k % 2);
      }
    }
    return { ids, mask };
  }

  /** What closes an assistant turn before EOS: the text the template puts after the content, if it is not EOS. */
  private findTurnEnd(): string | undefined {
    const marker = '\u0001reply\u0001';
    const user: ChatMessage = { role: 'user', content: 'hi' };
    const before = this.render([user], true, `${this.source} (a probe conversation)`);
    const through = this.render([user, { role: 'assistant', content: marker }], false, `${this.source} (a probe conversation)`);
    const at = through.indexOf(marker, before.length);
    if (!through.startsWith(before) || at < 0) return undefined;
    const end = through.slice(at + marker.length).trim();
    const eos = this.tokenizer.specialTokens.eos_token;
    const closing = eos !== undefined && end.startsWith(eos) ? '' : end;
    return closing === '' ? undefined : closing;
  }
}

/** Text tokenised with the text of the EOS token encoded as the EOS id. */
export function encodeChatText(tok: Tokenizer, text: string): number[] {
  const eos = tok.specialTokens.eos_token;
  if (!eos) return tok.encode(text);
  const out: number[] = [];
  text.split(eos).forEach((part, i) => {
    if (i > 0) out.push(tok.eosId);
    if (part !== '') out.push(...tok.encode(part));
  });
  return out;
}

/** The chat template a tokenizer brings, or the built-in one, with where it comes from (for messages). */
export function chatTemplateFor(tokenizer: Tokenizer, origin: string): ChatTemplate {
  return tokenizer.chatTemplate !== undefined
    ? new ChatTemplate(tokenizer.chatTemplate, tokenizer, origin)
    : new ChatTemplate(BUILTIN_CHAT_TEMPLATE, tokenizer, 'the built-in chat template');
}
