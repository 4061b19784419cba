/** Logits for a batch of token rows: returns [rows·seqLen·vocab] floats (row-major). */
export type LogitsFn = (tokens: Int32Array, rows: number, seqLen: number) => Promise<Float32Array>;
