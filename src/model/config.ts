/** The decoder's shape: a Llama/Qwen-style transformer. */
export interface ModelConfig {
  readonly vocabSize: number;
  readonly dModel: number;
  readonly nLayers: number;
  readonly nHeads: number;
  readonly nKvHeads: number;
  readonly ffnHidden: number;
  readonly seqLen: number;
  readonly ropeTheta: number;
  readonly normEps: number;
  readonly tieEmbeddings: boolean;
  readonly initStd: number;
}
