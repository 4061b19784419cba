/**
 * When the main stream must wait for the side stream. Ops run `aside` (weight gradients, the
 * deferred optimizer update) go to a second CUDA stream while a graph is recorded: each starts
 * after everything enqueued on the main stream before it, and the side stream runs its ops in
 * order. What the main stream enqueues later must wait for a side op when it writes bytes that op
 * reads (the op would read the new values) or touches bytes that op writes (it would read stale
 * values, or race the write). SideStreamHazards keeps the side ops not yet waited for, with their
 * byte ranges, and names the newest one a main-stream access conflicts with: waiting for it waits
 * for every side op before it too, so those are forgotten with it.
 */
import type { AsideKind } from '../backend.js';

/**
 * The kinds of aside op a capture's side stream takes (when the addon turned it on), from
 * MDLM_CUDA_SIDE_STREAM: `gradients` or `update` for one kind, anything else (1) for both.
 */
export function sideStreamKinds(knob: string | undefined): ReadonlySet<AsideKind> {
  if (knob === 'gradients') return new Set(['gradient']);
  if (knob === 'update') return new Set(['update']);
  return new Set(['gradient', 'update']);
}

/** A range [start, end) of device bytes. */
export type ByteRange = readonly [start: bigint, end: bigint];

/** The device bytes one op reads and writes. */
export interface Access {
  readonly reads: readonly ByteRange[];
  readonly writes: readonly ByteRange[];
}

interface Pending extends Access {
  /** What the addon returned for the op: the event its wait goes through. */
  readonly event: number;
}

function overlaps(a: readonly ByteRange[], b: readonly ByteRange[]): boolean {
  return a.some(([s, e]) => b.some(([t, f]) => s < f && t < e));
}

/** Whether `later` (on the main stream) must wait for `earlier` (on the side stream). */
export function conflicts(earlier: Access, later: Access): boolean {
  return overlaps(later.writes, earlier.reads) || overlaps(later.writes, earlier.writes) || overlaps(later.reads, earlier.writes);
}

export class SideStreamHazards {
  private pending: Pending[] = [];

  /** A side op was enqueued; `event` is what waiting for it takes. */
  add(access: Access, event: number): void {
    this.pending.push({ ...access, event });
  }

  /** Side ops not yet waited for. */
  get size(): number {
    return this.pending.length;
  }

  /**
   * The event the main stream must wait for before `access`, or null when it conflicts with no
   * pending side op. The side ops up to that one count as waited for from then on.
   */
  waitBefore(access: Access): number | null {
    let last = -1;
    this.pending.forEach((p, i) => {
      if (conflicts(p, access)) last = i;
    });
    if (last < 0) return null;
    const { event } = this.pending[last]!;
    this.pending = this.pending.slice(last + 1);
    return event;
  }

  /** The event that waits for every pending side op (null when none is), which are then forgotten. */
  waitAll(): number | null {
    const last = this.pending.at(-1);
    this.pending = [];
    return last ? last.event : null;
  }
}
