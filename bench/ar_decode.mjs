// AR sampling with the KV-cached decoder against full recomputation per token, side by side in one
// process on the CPU backend, same model (random init) and seed; the tokens must agree.
// Needs dist/ (npm run build). Usage: node bench/ar_decode.mjs [preset] [newTokens]   (default nano 48)
const { CpuBackend } = await import('../dist/backend/cpu/cpu.js');
const { resolveConfig } = await import('../dist/config/load.js');
const { Decoder } = await import('../dist/model/decode.js');
const { LlamaModel } = await import('../dist/model/llama.js');
const { modelLogits } = await import('../dist/model/logits.js');
const { sampleAr } = await import('../dist/sampling/ar.js');

const preset = process.argv[2] ?? 'nano';
const newTokens = Number(process.argv[3] ?? 48);
const cfg = resolveConfig({ preset });
const model = new LlamaModel(new CpuBackend(), cfg.model, 1, 1);
const opts = { logits: modelLogits(model, true), prompt: [256], maxNewTokens: newTokens, seqLen: cfg.model.seqLen, vocab: cfg.model.vocabSize, temperature: 1, topK: 0, topP: 1, seed: 3 };
let t0 = performance.now();
const plain = await sampleAr(opts);
const plainS = (performance.now() - t0) / 1000;
const decoder = new Decoder(model);
t0 = performance.now();
const cached = await sampleAr({ ...opts, decoder });
const cachedS = (performance.now() - t0) / 1000;
const same = JSON.stringify(plain) === JSON.stringify(cached);
console.log(`${preset} (seq ${cfg.model.seqLen}), ${newTokens} new tokens on the CPU: full recompute ${plainS.toFixed(2)} s, KV cache ${cachedS.toFixed(2)} s (${(plainS / cachedS).toFixed(1)}x); same tokens: ${same}`);
