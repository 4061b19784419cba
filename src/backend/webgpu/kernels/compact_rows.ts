import { compactRows } from '../../../ops/compact_rows.js';
import { defineKernel } from '../kernel.js';

export const compactRowsKernel = defineKernel({
  op: compactRows,
  shaders: ['compact_rows'],
  run(k, args, { rows }) {
    const { targets, weights, order, slot, count, packedTargets, packedWeights } = args;
    k.dispatch({
      shader: 'compact_rows',
      entry: 'main',
      bindings: { params: { rows }, targets: targets!, weights: weights!, order: order!, slot: slot!, count: count!, packedTargets: packedTargets!, packedWeights: packedWeights! },
      // One workgroup: the scan is over the whole batch's rows (tens of thousands: microseconds).
      workgroups: [1, 1, 1],
    });
  },
});
