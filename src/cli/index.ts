/** Entry point of the compiled CLI. */
import { main } from './main.js';

const exitCode = await main(process.argv.slice(2));
// Dawn keeps the event loop alive; exit explicitly once the command is done.
process.exit(exitCode);
