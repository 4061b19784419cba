#!/usr/bin/env node
// Entry point: the compiled CLI (npm ci runs `prepare`, which builds dist/).
import('../dist/cli/index.js').catch((e) => {
  if (e && e.code === 'ERR_MODULE_NOT_FOUND' && String(e.message).includes('dist/cli')) {
    console.error('mdlm: dist/ is missing; run `npm run build` (npm ci does this through `prepare`)');
    process.exit(1);
  }
  throw e;
});
