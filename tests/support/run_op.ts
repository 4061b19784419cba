/** Run one op on a backend with host inputs; returns every non-'in' argument as downloaded. */
import type { Backend } from '../../src/backend/backend.js';
import { type OpDef, resolveArgDtype } from '../../src/ops/op.js';
import { type HostArray, type Tensor, hostArrayFor, numel } from '../../src/tensor.js';

export async function runOp<A>(backend: Backend, op: OpDef<A>, attrs: A, inputs: Readonly<Record<string, HostArray>>): Promise<Record<string, HostArray>> {
  const shapes = op.shapes(attrs);
  const tensors: Record<string, Tensor> = {};
  try {
    for (const a of op.args) {
      const dtype = resolveArgDtype(op, a, attrs, 'f32');
      const shape = shapes[a.name]!;
      const t = backend.alloc(shape, dtype);
      tensors[a.name] = t;
      backend.upload(t, inputs[a.name] ?? hostArrayFor(dtype, numel(shape)));
    }
    backend.run(op, tensors, attrs);
    const outputs: Record<string, HostArray> = {};
    for (const a of op.args) if (a.role !== 'in') outputs[a.name] = await backend.download(tensors[a.name]!);
    return outputs;
  } finally {
    for (const t of Object.values(tensors)) backend.free(t);
  }
}
