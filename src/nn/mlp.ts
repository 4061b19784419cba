/**
 * SwiGLU MLP: down(silu(gate(x)) · up(x)). Saves the gate and up projections and, unless
 * `recompute` is set, their product; with it the product lives in the shared scratch and backward
 * recomputes it (the same kernel on the same inputs: the same bits).
 */
import type { Backend } from '../backend/backend.js';
import { swiglu, swigluBackward } from '../ops/swiglu.js';
import type { Tensor } from '../tensor.js';
import type { Arena } from './arena.js';
import { Linear } from './linear.js';
import type { ParamStore } from './params.js';

/** Temporaries shared by every MLP (only one runs at a time). */
export class MlpScratch {
  readonly dHidden: Tensor;
  readonly dGate: Tensor;
  readonly dUp: Tensor;
  constructor(arena: Arena, rows: number, hidden: number) {
    this.dHidden = arena.alloc([rows, hidden]);
    this.dGate = arena.alloc([rows, hidden]);
    this.dUp = arena.alloc([rows, hidden]);
  }
}

export class SwiGluMlp {
  readonly gate: Linear;
  readonly up: Linear;
  readonly down: Linear;
  private readonly g: Tensor;
  private readonly u: Tensor;
  private readonly h: Tensor; // the product: its own buffer, or scratch.dGate when recomputed

  constructor(
    store: ParamStore, arena: Arena, name: string, dModel: number, readonly hidden: number, readonly rows: number,
    private readonly scratch: MlpScratch, std: number, outStd: number, private readonly recompute = false,
  ) {
    this.gate = new Linear(store, `${name}.w_gate`, dModel, hidden, std);
    this.up = new Linear(store, `${name}.w_up`, dModel, hidden, std);
    this.down = new Linear(store, `${name}.w_down`, hidden, dModel, outStd);
    this.g = arena.alloc([rows, hidden]);
    this.u = arena.alloc([rows, hidden]);
    // dGate is free in the forward pass, and in the backward pass until swiglu_backward writes it.
    this.h = recompute ? scratch.dGate : arena.alloc([rows, hidden]);
  }

  /** out [rows, dModel] from x [rows, dModel]; fewer rows than built for use the first rows of the buffers (decoding). */
  forward(b: Backend, x: Tensor, out: Tensor, rows = this.rows): void {
    const [g, u, h] = [this.g, this.u, this.h].map((t) => (rows === this.rows ? t : b.view(t, 0, [rows, this.hidden]))) as [Tensor, Tensor, Tensor];
    this.gate.forward(b, x, g, rows);
    this.up.forward(b, x, u, rows);
    b.run(swiglu, { gate: g, up: u, out: h }, { rows, hidden: this.hidden });
    this.down.forward(b, h, out, rows);
  }

  backward(b: Backend, x: Tensor, dout: Tensor, dx: Tensor): void {
    const sc = this.scratch;
    if (this.recompute) b.run(swiglu, { gate: this.g, up: this.u, out: this.h }, { rows: this.rows, hidden: this.hidden });
    this.down.backward(b, this.h, dout, sc.dHidden, 'write', this.rows);
    b.run(swigluBackward, { dout: sc.dHidden, gate: this.g, up: this.u, dgate: sc.dGate, dup: sc.dUp }, { rows: this.rows, hidden: this.hidden });
    this.gate.backward(b, x, sc.dGate, dx, 'write', this.rows);
    this.up.backward(b, x, sc.dUp, dx, 'add', this.rows);
  }
}
