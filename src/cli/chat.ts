/**
 * `mdlm chat`: talk to a checkpoint. The conversation so far is rendered with the checkpoint's
 * chat template (its tokenizer_config.json's chat_template, which `mdlm data prepare --format
 * chat` saves and fine-tuning carries into checkpoints; the built-in one where it has none),
 * followed by the start of an assistant turn, and the reply is sampled: token by token with the
 * KV cache (ar), or by LLaDA-style unmasking of a span (mdlm). A reply ends at EOS or at the text
 * that closes the template's assistant turn (e.g. <|im_end|>).
 *
 * `--prompt TEXT` asks once and prints the reply; otherwise each line read is a user turn (an
 * interactive prompt on a terminal; piped lines otherwise), `/reset` forgets the conversation and
 * `/exit` or end of input ends it. The oldest turns are dropped when the conversation outgrows the
 * context.
 */
import { createInterface } from 'node:readline';
import { Command } from 'commander';
import type { Backend } from '../backend/backend.js';
import { type ChatMessage, type ChatTemplate, chatTemplateFor } from '../data/chat.js';
import type { Tokenizer } from '../data/tokenizer.js';
import { fail } from '../errors.js';
import { Decoder } from '../model/decode.js';
import type { LlamaModel } from '../model/llama.js';
import { modelLogits } from '../model/logits.js';
import { MAX_DECODE_KEYS } from '../ops/attention_decode.js';
import { createBackend, parseBackendChoice } from '../runtime/backends.js';
import { type Remasking, sampleAr, sampleDiffusion } from '../sampling/index.js';
import { type OpenedModel, buildModel, openModel, requireTokenizer } from './model.js';
import { choiceOption, intOption, numberOption } from './options.js';
import { TextStream, refuseOtherObjectiveFlags, untilEos } from './sample.js';

type ChatFlags = {
  checkpoint: string;
  prompt?: string;
  system?: string;
  backend: string;
  seed: number;
  tokenizer?: string;
  temperature?: number;
  maxNewTokens?: number;
  topK?: number;
  topP?: number;
  length?: number;
  steps?: number;
  blockLength?: number;
  remasking?: Remasking;
};

export function chatCommand(): Command {
  return new Command('chat')
    .description("Chat with a checkpoint through its chat template: one reply to --prompt, or a conversation read line by line")
    .requiredOption('--checkpoint <dir>', "checkpoint directory, or a run's --out directory (its newest complete checkpoint)")
    .option('--prompt <text>', 'ask this once, print the reply and exit (default: read user turns from standard input)')
    .option('--system <text>', 'a system message before the conversation')
    .option('--backend <name>', 'auto | cpu | webgpu | cuda', 'auto')
    .option('--seed <n>', 'seed of the sampling draws (reply i uses seed + i)', intOption('--seed', 0), 0)
    .option('--temperature <t>', 'sampling temperature, 0 = greedy / argmax (default 0)', numberOption('--temperature', 0))
    .option('--tokenizer <spec>', 'tokenizer (byte | gpt2 | path) when the checkpoint has none')
    .option('--max-new-tokens <n>', 'ar: tokens a reply has at most (default 256, at most what the context leaves)', intOption('--max-new-tokens', 1))
    .option('--top-k <k>', 'ar: keep the k most likely tokens (0 = off)', intOption('--top-k', 0))
    .option('--top-p <p>', 'ar: nucleus sampling mass in (0, 1] (1 = off)', numberOption('--top-p', 0, 1, true))
    .option('--length <n>', 'mdlm: tokens generated for a reply, cut at its end (default: 64, or what the context leaves)', intOption('--length', 1))
    .option('--steps <s>', 'mdlm: model calls a reply, spread evenly over the blocks (default: --length)', intOption('--steps', 1))
    .option('--block-length <l>', 'mdlm: semi-autoregressive block size; must divide --length (default: --length)', intOption('--block-length', 1))
    .option('--remasking <how>', 'mdlm: low_confidence | random', choiceOption('--remasking', ['low_confidence', 'random'] as const))
    .action(async (o: ChatFlags) => {
      const m = await openModel(o.checkpoint, o.tokenizer);
      const tokenizer = requireTokenizer(m, 'chat');
      refuseOtherObjectiveFlags(m, o);
      if (tokenizer.chatTemplate === undefined) console.error(`note: ${m.loaded.dir} has no chat template (it was not fine-tuned on chat data); using the built-in one`);
      const template = chatTemplateFor(tokenizer, `${m.loaded.dir}/tokenizer_config.json`);
      const backend = await createBackend(parseBackendChoice(o.backend));
      const conversation = new Conversation(backend, m, tokenizer, template, o);
      try {
        const system: ChatMessage[] = o.system !== undefined ? [{ role: 'system', content: o.system }] : [];
        if (o.prompt !== undefined) {
          const reply = await conversation.reply([...system, { role: 'user', content: o.prompt }], (text) => process.stdout.write(text));
          process.stdout.write(reply.endsWith('\n') ? '' : '\n');
        } else {
          await converse(conversation, system);
        }
      } finally {
        conversation.destroy();
        backend.destroy();
      }
    });
}

/** Read user turns line by line and answer each, keeping the conversation. */
async function converse(conversation: Conversation, system: ChatMessage[]): Promise<void> {
  const tty = process.stdin.isTTY === true;
  const rl = createInterface({ input: process.stdin, ...(tty ? { output: process.stdout, prompt: '> ' } : {}), terminal: tty });
  if (tty) process.stdout.write('mdlm chat: type a message; /reset forgets the conversation, /exit (or Ctrl-D) ends it\n');
  let history: ChatMessage[] = [...system];
  rl.prompt();
  for await (const line of rl) {
    const text = line.trim();
    if (text === '/exit') break;
    if (text === '/reset') {
      history = [...system];
      process.stdout.write('(conversation reset)\n');
    } else if (text !== '') {
      const turn: ChatMessage[] = [...history, { role: 'user', content: line }];
      const reply = await conversation.reply(turn, (t) => process.stdout.write(t));
      process.stdout.write(reply.endsWith('\n') ? '' : '\n');
      history = [...turn, { role: 'assistant', content: reply }];
    }
    rl.prompt();
  }
  rl.close();
}

/** A model loaded once, answering conversations. */
export class Conversation {
  private readonly model: LlamaModel;
  private readonly decoder: Decoder | undefined;
  private replies = 0;

  constructor(
    backend: Backend, private readonly m: OpenedModel, private readonly tokenizer: Tokenizer,
    private readonly template: ChatTemplate, private readonly o: Omit<ChatFlags, 'checkpoint' | 'backend'>,
  ) {
    const context = m.loaded.model.seqLen;
    this.model = buildModel(backend, m, 1, context);
    this.decoder = m.objective === 'ar' && context <= MAX_DECODE_KEYS ? new Decoder(this.model) : undefined;
  }

  /**
   * The assistant's reply to `messages` (whose last turn is the user's), its text passed to
   * `onText` as it is decided (ar: token by token; mdlm: once the span is unmasked).
   */
  async reply(messages: readonly ChatMessage[], onText: (text: string) => void): Promise<string> {
    const context = this.m.loaded.model.seqLen;
    // Room for at least one token of the reply, or for the whole of an mdlm --length.
    const room = this.m.objective === 'mdlm' ? (this.o.length ?? 1) : 1;
    if (room >= context) fail('BAD_ARGUMENT', `--length ${room} leaves no room for the conversation in the model's context of ${context} tokens; lower it`);
    const prompt = this.promptWithin(messages, context - room);
    const seed = this.o.seed + this.replies++;
    const out = new ReplyText(this.tokenizer, this.template.turnEnd, onText);
    const eos = this.tokenizer.eosId;
    if (this.m.objective === 'ar') {
      await sampleAr({
        logits: modelLogits(this.model, true), ...(this.decoder ? { decoder: this.decoder } : {}), prompt, seqLen: context, vocab: this.m.loaded.model.vocabSize,
        maxNewTokens: Math.min(this.o.maxNewTokens ?? 256, context - prompt.length), temperature: this.o.temperature ?? 0, topK: this.o.topK ?? 0, topP: this.o.topP ?? 1,
        eosId: eos, stopAtEos: true, seed, onToken: (id) => id !== eos && out.push(id), stop: () => out.ended,
      });
    } else {
      const length = Math.min(this.o.length ?? 64, context - prompt.length);
      const blockLength = this.o.blockLength ?? length;
      if (length % blockLength !== 0) fail('BAD_ARGUMENT', `--block-length ${blockLength} must divide the reply length ${length} (--length, or what the context leaves after the conversation)`);
      const steps = this.o.steps ?? length;
      const x = await sampleDiffusion({
        logits: modelLogits(this.model, false), prompt, genLength: length, steps, blockLength, maskId: this.m.maskId, vocab: this.m.loaded.model.vocabSize,
        temperature: this.o.temperature ?? 0, remasking: this.o.remasking ?? 'low_confidence', seqLen: prompt.length + length, seed,
      });
      for (const id of untilEos(Array.from(x.subarray(prompt.length)), eos)) {
        if (out.ended) break;
        out.push(id);
      }
    }
    return out.finish();
  }

  /** The prompt's tokens, the oldest turns after any system message dropped until it fits `limit`. */
  private promptWithin(messages: readonly ChatMessage[], limit: number): number[] {
    const system = messages[0]?.role === 'system' ? 1 : 0;
    for (let drop = 0; system + drop < messages.length; drop++) {
      const kept = [...messages.slice(0, system), ...messages.slice(system + drop)];
      const { ids } = this.template.encode(kept, true);
      if (ids.length <= limit) return ids;
    }
    return fail('BAD_ARGUMENT', `the message does not fit the model's context of ${this.m.loaded.model.seqLen} tokens with room for a reply; shorten it`);
  }

  destroy(): void {
    this.decoder?.destroy();
    this.model.destroy();
  }
}

/**
 * A reply's text as its tokens come: it ends at EOS (never pushed) or where the text that closes
 * the turn appears (cut there). Text that may be the start of that closing is held back until it
 * is known not to be.
 */
class ReplyText {
  private readonly stream: TextStream;
  private text = '';
  private shown = 0;
  ended = false;

  constructor(tokenizer: Tokenizer, private readonly turnEnd: string | undefined, private readonly onText: (text: string) => void) {
    this.stream = new TextStream(tokenizer);
  }

  push(id: number): void {
    if (this.ended) return;
    this.text += this.stream.push([id]);
    const end = this.turnEnd === undefined ? -1 : this.text.indexOf(this.turnEnd);
    if (end >= 0) {
      this.text = this.text.slice(0, end);
      this.ended = true;
    }
    const hold = this.ended || this.turnEnd === undefined ? 0 : this.turnEnd.length - 1;
    this.show(Math.max(this.shown, this.text.length - hold));
  }

  finish(): string {
    if (!this.ended) this.text += this.stream.flush();
    this.ended = true;
    this.show(this.text.length);
    return this.text;
  }

  private show(upTo: number): void {
    if (upTo > this.shown) this.onText(this.text.slice(this.shown, upTo));
    this.shown = upTo;
  }
}
