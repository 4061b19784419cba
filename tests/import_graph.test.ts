/**
 * The import graph of src/, parsed from each TypeScript source (static imports, export-from,
 * dynamic import() and require()), relative specifiers followed.
 * - The core runs in a browser: src/ops, src/nn, src/model, src/objectives, src/optim,
 *   src/sampling, src/rng and src/backend/webgpu, and every file they import, use no Node
 *   built-in module and no Node-only global; each offence is reported with the chain of imports
 *   that reaches it.
 * - No import cycles, dynamic imports included.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/** The folders that must stay browser-safe, relative to the repository root. */
const CORE = ['src/ops', 'src/nn', 'src/model', 'src/objectives', 'src/optim', 'src/sampling', 'src/rng', 'src/backend/webgpu'];
/** Files beside them that a browser build takes too (the backend interface, the CPU backend, the CUDA backend's host side). */
const CORE_FILES = ['src/backend/backend.ts', 'src/backend/cpu/cpu.ts', 'src/backend/cuda/cuda.ts', 'src/tensor.ts', 'src/convert.ts', 'src/errors.ts'];

/** Globals that exist in Node only. */
const NODE_GLOBALS = new Set(['process', 'Buffer', 'require', '__dirname', '__filename', 'global', 'setImmediate']);

const BUILTINS = new Set(builtinModules);

function isNodeBuiltin(spec: string): boolean {
  return spec.startsWith('node:') || BUILTINS.has(spec) || BUILTINS.has(spec.split('/')[0]!);
}

/** What the walk reads: repository-relative posix paths to source text (undefined: no such file). */
export type SourceReader = (path: string) => string | undefined;

interface FileFacts {
  /** Module specifiers, static and dynamic. */
  readonly imports: readonly string[];
  /** Node-only globals referenced, with their line. */
  readonly globals: readonly { name: string; line: number }[];
}

/** Whether an identifier is a reference to a variable (not a property name, a key or a declaration of its own). */
function isFreeReference(id: ts.Identifier, declared: ReadonlySet<string>): boolean {
  const p = id.parent;
  if (declared.has(id.text)) return false;
  if (ts.isPropertyAccessExpression(p) && p.name === id) return false;
  if (ts.isQualifiedName(p) && p.right === id) return false;
  if ((ts.isPropertyAssignment(p) || ts.isPropertyDeclaration(p) || ts.isPropertySignature(p) || ts.isMethodDeclaration(p) || ts.isMethodSignature(p)) && p.name === id) return false;
  if ((ts.isVariableDeclaration(p) || ts.isParameter(p) || ts.isFunctionDeclaration(p) || ts.isClassDeclaration(p) || ts.isBindingElement(p)) && p.name === id) return false;
  if (ts.isImportSpecifier(p) || ts.isImportClause(p) || ts.isNamespaceImport(p) || ts.isExportSpecifier(p)) return false;
  if (ts.isLabeledStatement(p) || ts.isBreakOrContinueStatement(p)) return false;
  if (ts.isTypeReferenceNode(p) || ts.isTypeQueryNode(p)) return false;
  return true;
}

export function scanSource(path: string, text: string): FileFacts {
  const sf = ts.createSourceFile(path, text, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
  const imports: string[] = [];
  const globals: { name: string; line: number }[] = [];
  // Names the file declares itself (a local `process` shadows the global).
  const declared = new Set<string>();
  const collect = (n: ts.Node): void => {
    if ((ts.isVariableDeclaration(n) || ts.isParameter(n) || ts.isFunctionDeclaration(n) || ts.isClassDeclaration(n)) && n.name && ts.isIdentifier(n.name)) declared.add(n.name.text);
    if (ts.isImportSpecifier(n) || ts.isNamespaceImport(n)) declared.add(n.name.text);
    if (ts.isImportClause(n) && n.name) declared.add(n.name.text);
    ts.forEachChild(n, collect);
  };
  collect(sf);
  const visit = (n: ts.Node): void => {
    if ((ts.isImportDeclaration(n) || ts.isExportDeclaration(n)) && n.moduleSpecifier && ts.isStringLiteral(n.moduleSpecifier)) {
      imports.push(n.moduleSpecifier.text);
    } else if (ts.isImportEqualsDeclaration(n) && ts.isExternalModuleReference(n.moduleReference) && ts.isStringLiteral(n.moduleReference.expression)) {
      imports.push(n.moduleReference.expression.text);
    } else if (ts.isCallExpression(n) && (n.expression.kind === ts.SyntaxKind.ImportKeyword || (ts.isIdentifier(n.expression) && n.expression.text === 'require'))) {
      const arg = n.arguments[0];
      if (arg && ts.isStringLiteralLike(arg)) imports.push(arg.text);
      else if (arg) imports.push(`<computed: ${arg.getText(sf)}>`);
    } else if (ts.isImportTypeNode(n) && ts.isLiteralTypeNode(n.argument) && ts.isStringLiteral(n.argument.literal)) {
      imports.push(n.argument.literal.text);
    }
    if (ts.isIdentifier(n) && NODE_GLOBALS.has(n.text) && isFreeReference(n, declared)) {
      globals.push({ name: n.text, line: sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1 });
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return { imports, globals };
}

/** The .ts file a relative specifier names ('./x.js' is ./x.ts in the sources), if any. */
function resolve(from: string, spec: string, read: SourceReader): string | undefined {
  const base = posix.normalize(posix.join(posix.dirname(from), spec));
  const candidates = [base.replace(/\.js$/, '.ts'), base, `${base}.ts`, `${base}/index.ts`];
  return candidates.find((c) => c.endsWith('.ts') && read(c) !== undefined);
}

/**
 * Every Node built-in import and Node-only global reachable from `roots`, each as
 * "a.ts -> b.ts -> c.ts: imports 'node:fs'" (the chain from a root to the offending file).
 */
export function nodeOffences(roots: readonly string[], read: SourceReader): string[] {
  const offences: string[] = [];
  const parent = new Map<string, string | null>();
  const queue: string[] = [];
  for (const r of roots) {
    if (!parent.has(r)) {
      parent.set(r, null);
      queue.push(r);
    }
  }
  const chain = (file: string): string => {
    const files: string[] = [];
    for (let f: string | null | undefined = file; f; f = parent.get(f)) files.unshift(f);
    return files.join(' -> ');
  };
  while (queue.length > 0) {
    const file = queue.shift()!;
    const facts = scanSource(file, read(file)!);
    for (const spec of facts.imports) {
      if (isNodeBuiltin(spec)) offences.push(`${chain(file)}: imports '${spec}'`);
      else if (spec.startsWith('<computed')) offences.push(`${chain(file)}: imports ${spec} (cannot be checked)`);
      else if (spec.startsWith('.')) {
        const target = resolve(file, spec, read);
        if (target === undefined) offences.push(`${chain(file)}: imports '${spec}', which is not a TypeScript source here`);
        else if (!parent.has(target)) {
          parent.set(target, file);
          queue.push(target);
        }
      }
    }
    for (const g of facts.globals) offences.push(`${chain(file)}: uses the Node global '${g.name}' (line ${g.line})`);
  }
  return offences;
}

/** The import cycles among `files`, each as "a.ts -> b.ts -> a.ts" (dynamic and type-only imports count). */
export function importCycles(files: readonly string[], read: SourceReader): string[] {
  const deps = new Map<string, string[]>();
  for (const f of files) {
    const targets = scanSource(f, read(f)!).imports.filter((s) => s.startsWith('.')).map((s) => resolve(f, s, read));
    deps.set(f, [...new Set(targets.filter((t): t is string => t !== undefined))]);
  }
  const cycles: string[] = [];
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (f: string): void => {
    state.set(f, 'open');
    path.push(f);
    for (const t of deps.get(f) ?? []) {
      if (state.get(t) === 'open') cycles.push([...path.slice(path.indexOf(t)), t].join(' -> '));
      else if (!state.has(t)) visit(t);
    }
    path.pop();
    state.set(f, 'done');
  };
  for (const f of files) if (!state.has(f)) visit(f);
  return cycles;
}

function sourcesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(ROOT, dir))) {
    const rel = posix.join(dir, name);
    if (statSync(join(ROOT, rel)).isDirectory()) out.push(...sourcesUnder(rel));
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(rel);
  }
  return out.sort();
}

const readRepo: SourceReader = (path) => {
  try {
    return readFileSync(join(ROOT, path), 'utf8');
  } catch {
    return undefined;
  }
};

describe('browser-safe core', () => {
  it('imports no Node built-in and uses no Node-only global, directly or through what it imports', () => {
    const roots = [...CORE.flatMap(sourcesUnder), ...CORE_FILES];
    expect(roots.length).toBeGreaterThan(40);
    expect(nodeOffences(roots, readRepo)).toEqual([]);
  });

  it('walks what the core imports (the tensor, the errors, the rng)', () => {
    const seen: string[] = [];
    nodeOffences(['src/ops/index.ts'], (p) => {
      const text = readRepo(p);
      if (text !== undefined) seen.push(p);
      return text;
    });
    expect(seen).toEqual(expect.arrayContaining(['src/ops/op.ts', 'src/tensor.ts', 'src/errors.ts', 'src/rng/philox.ts']));
  });
});

describe('the import walk', () => {
  const files: Record<string, string> = {
    'src/core/a.ts': "import { b } from './b.js';\nexport const a = b;\n",
    'src/core/b.ts': "export { c as b } from '../edge/c.js';\n",
    'src/edge/c.ts': "import { readFileSync } from 'node:fs';\nexport const c = readFileSync;\n",
    'src/core/d.ts': "export async function d() {\n  return import('worker_threads');\n}\n",
    'src/core/e.ts': 'export const e = () => process.env.MDLM_X;\n',
    'src/core/f.ts': "import os from 'os';\nexport const f = os;\n",
    'src/core/clean.ts': [
      "import { z } from 'zod';",
      "import type { Tensor } from './types.js';",
      '// process.env in a comment, and in a string:',
      "const s = 'process.env';",
      'const o = { process: 1, Buffer: 2 };',
      'export function g(process: number, t?: Tensor): number { return process + o.process + s.length + (t ? 0 : 1); }',
      'export const zz = z;',
      '',
    ].join('\n'),
    'src/core/types.ts': 'export interface Tensor { readonly size: number }\n',
  };
  const read: SourceReader = (p) => files[p];

  it('names the chain of files to a Node built-in, through export-from', () => {
    expect(nodeOffences(['src/core/a.ts'], read)).toEqual(["src/core/a.ts -> src/core/b.ts -> src/edge/c.ts: imports 'node:fs'"]);
  });

  it('catches dynamic imports, bare built-in names and Node globals', () => {
    expect(nodeOffences(['src/core/d.ts', 'src/core/e.ts', 'src/core/f.ts'], read)).toEqual([
      "src/core/d.ts: imports 'worker_threads'",
      "src/core/e.ts: uses the Node global 'process' (line 1)",
      "src/core/f.ts: imports 'os'",
    ]);
  });

  it('passes browser-safe code: npm packages, type imports, and the words in comments, strings, keys and locals', () => {
    expect(nodeOffences(['src/core/clean.ts'], read)).toEqual([]);
  });

  it('fails the real core once a core file imports a Node built-in', () => {
    const patched: SourceReader = (p) => (p === 'src/rng/philox.ts' ? `import { cpus } from 'node:os';\n${readRepo(p)!}` : readRepo(p));
    const offences = nodeOffences(['src/ops/index.ts'], patched);
    expect(offences).toContainEqual(expect.stringMatching(/^src\/ops\/index\.ts -> .*src\/rng\/philox\.ts: imports 'node:os'$/));
  });
});

describe('import cycles', () => {
  it('src has none, dynamic imports included', () => {
    expect(importCycles(sourcesUnder('src'), readRepo)).toEqual([]);
  });

  it('finds one through a dynamic import', () => {
    const files: Record<string, string> = {
      'src/t/core.ts': "export async function pick() {\n  return (await import('./kind.js')).kind;\n}\n",
      'src/t/kind.ts': "import type { pick } from './core.js';\nexport const kind: typeof pick | 1 = 1;\n",
      'src/t/leaf.ts': 'export const leaf = 1;\n',
    };
    expect(importCycles(Object.keys(files), (p) => files[p])).toEqual(['src/t/core.ts -> src/t/kind.ts -> src/t/core.ts']);
  });
});
