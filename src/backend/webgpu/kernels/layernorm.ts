import { layernorm, layernormBackward } from '../../../ops/layernorm.js';
import { defineKernel, grid1d } from '../kernel.js';
import { backwardRowsPerGroup, reducePartials, rowNormConstants, rowNormLayout, rowNormParams } from './rmsnorm.js';

export const layernormKernel = defineKernel({
  op: layernorm,
  shaders: ['layernorm'],
  run(k, { x, weight, bias, y, mean, rstd }, attrs) {
    const layout = rowNormLayout(attrs.dim);
    k.dispatch({
      shader: 'layernorm',
      entry: 'layernorm',
      bindings: { params: rowNormParams(attrs, layout.slots), x: x!, weight: weight!, bias: bias!, y: y!, mean: mean!, rstd: rstd! },
      workgroups: grid1d(attrs.rows, layout.slots),
      constants: rowNormConstants(layout),
    });
  },
});

export const layernormBackwardKernel = defineKernel({
  op: layernormBackward,
  shaders: ['layernorm'],
  run(k, { dy, x, weight, mean, rstd, dresidual, dx, dweight, dbias }, attrs) {
    const layout = rowNormLayout(attrs.dim);
    const rowsPerGroup = backwardRowsPerGroup(attrs.rows, layout);
    const groups = Math.ceil(attrs.rows / rowsPerGroup);
    const weightPartials = k.scratch([groups, attrs.dim], 'f32');
    const biasPartials = k.scratch([groups, attrs.dim], 'f32');
    k.dispatch({
      shader: 'layernorm',
      entry: 'layernorm_backward',
      bindings: {
        params: rowNormParams(attrs, rowsPerGroup),
        dy: dy!, x: x!, weight: weight!, saved_mean: mean!, saved_rstd: rstd!, dresidual: dresidual!, dx: dx!,
        dweight_partials: weightPartials, dbias_partials: biasPartials,
      },
      workgroups: grid1d(groups, 1),
      constants: rowNormConstants(layout),
    });
    reducePartials(k, 'layernorm', attrs, rowsPerGroup, weightPartials, dweight!);
    reducePartials(k, 'layernorm', attrs, rowsPerGroup, biasPartials, dbias!);
  },
});
