/**
 * How mdlm times device work: warm-up calls first (a GPU idles at low clocks while the CPU prepares
 * inputs, and a few calls of a 0.1 ms kernel would be timed before the clocks ramp up), then
 * windows of back-to-back calls each ended by one wait for the device, of which the median counts.
 * PyTorch's peers time the same way (bench/peers/attention_sdpa.py: 5 warm-up calls, the median of
 * 5 windows).
 */

/** Calls `call` (`callsPerWait` at a time, then waits on `idle`) until `seconds` and at least two calls have passed. */
export async function warmUp(call: () => void, idle: () => Promise<void>, seconds: number, callsPerWait = 1, now: () => number = () => performance.now()): Promise<void> {
  const t0 = now();
  let calls = 0;
  do {
    for (let i = 0; i < callsPerWait; i++) call();
    calls += callsPerWait;
    await idle();
  } while (now() - t0 < seconds * 1e3 || calls < 2);
}

/** Milliseconds a call: the median over `windows` windows of `reps` calls, each window ended by one wait on `idle`. */
export async function medianCallMs(call: () => void, idle: () => Promise<void>, reps: number, windows = 3, now: () => number = () => performance.now()): Promise<number> {
  if (!(reps >= 1 && windows >= 1)) throw new RangeError(`medianCallMs: reps (${reps}) and windows (${windows}) must be at least 1`);
  const perCall: number[] = [];
  for (let w = 0; w < windows; w++) {
    const t0 = now();
    for (let i = 0; i < reps; i++) call();
    await idle();
    perCall.push((now() - t0) / reps);
  }
  perCall.sort((x, y) => x - y);
  return perCall[Math.floor(windows / 2)]!;
}
