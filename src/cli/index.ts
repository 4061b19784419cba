/** Entry point of the compiled CLI. */
import { main } from './main.js';

/**
 * Resolves once what was written to `stream` so far has reached the OS. Writes to a pipe are
 * asynchronous in Node, and process.exit drops the ones still queued: without this a `--json | jq`
 * that reads slower than mdlm writes would lose everything past the pipe's 64 KiB.
 */
function flushed(stream: NodeJS.WriteStream): Promise<void> {
  return new Promise((resolve) => stream.write('', () => resolve()));
}

const exitCode = await main(process.argv.slice(2));
await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
// Dawn keeps the event loop alive; exit explicitly once the command is done.
process.exit(exitCode);
