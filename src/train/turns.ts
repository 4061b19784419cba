/**
 * Turns of the event loop inside long loops of device work. A step on the CPU backend (and on
 * CUDA, whose reads complete at once) awaits only settled promises, which never give the event
 * loop a turn: without one, signal handlers (Ctrl-C, SIGTERM) and timers never run. `maybe()`
 * yields one macrotask (setImmediate) once `everyMs` have passed since the last, so the loop
 * hears a signal within a step plus `everyMs`, at a cost of a few microseconds per `everyMs`.
 */
export class EventLoopTurns {
  private last = performance.now();

  constructor(private readonly everyMs = 20) {}

  async maybe(): Promise<void> {
    if (performance.now() - this.last < this.everyMs) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
    this.last = performance.now();
  }
}
