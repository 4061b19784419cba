/**
 * Run one op on a backend with given host inputs: tensors shaped by the op's declaration, outputs
 * poisoned with NaN (or a sentinel int) first, outputs downloaded and the tensors freed.
 */
import type { Backend } from '../../src/backend/backend.js';
import { type OpDef, resolveArgDtype } from '../../src/ops/op.js';
import { type HostArray, type Tensor, hostArrayFor, numel } from '../../src/tensor.js';

export async function runOp<A>(
  backend: Backend,
  op: OpDef<A>,
  attrs: A,
  inputs: Readonly<Record<string, ArrayLike<number> | undefined>>,
): Promise<Record<string, HostArray>> {
  const shapes = op.shapes(attrs);
  const tensors: Record<string, Tensor> = {};
  try {
    for (const a of op.args) {
      const dtype = resolveArgDtype(op, a, attrs, 'f32');
      const t = backend.alloc(shapes[a.name]!, dtype);
      tensors[a.name] = t;
      const host = hostArrayFor(dtype, numel(t.shape));
      if (a.role === 'out') host.fill(dtype === 'f32' ? NaN : 0x7eadbeef);
      else host.set(inputs[a.name] ?? []);
      backend.upload(t, host);
    }
    backend.run(op, tensors, attrs);
    const out: Record<string, HostArray> = {};
    for (const a of op.args) if (a.role !== 'in') out[a.name] = await backend.download(tensors[a.name]!);
    return out;
  } finally {
    for (const t of Object.values(tensors)) backend.free(t);
  }
}
