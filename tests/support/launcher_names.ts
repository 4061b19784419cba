/**
 * The names the CUDA launchers ask an OpCall for, checked against the op registry. A launcher
 * writes every argument name as "q"_arg and every attribute name as "batch"_attr (cuda/op.h: the
 * accessors take nothing else), so a scan of the sources finds them all. Each name belongs to the
 * op of the MDLM_OP block it is in, or, inside a run_op(call, "op", ...) call, to that op; a name
 * elsewhere in a file (a helper the file's launchers share) must belong to one of the ops the file
 * registers. Argument names are the ops' ArgSpecs; attribute names are the properties of the
 * attribute type each op is declared with (defineOp<Attrs>), read with the TypeScript compiler.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';
import ts from 'typescript';

export interface OpNames {
  readonly args: ReadonlySet<string>;
  readonly attrs: ReadonlySet<string>;
}

/** Attribute names of every op declared with defineOp<Attrs>({ name: '...', ... }) in the files of the program rooted at `opsIndex`. */
export function declaredAttributes(opsIndex: string): Map<string, Set<string>> {
  const configPath = ts.findConfigFile(dirname(opsIndex), ts.sys.fileExists, 'tsconfig.json');
  const options = configPath ? ts.parseJsonConfigFileContent(ts.readConfigFile(configPath, ts.sys.readFile).config, ts.sys, dirname(configPath)).options : {};
  const program = ts.createProgram([opsIndex], { ...options, noEmit: true });
  const checker = program.getTypeChecker();
  const opsDir = dirname(opsIndex);
  const found = new Map<string, Set<string>>();
  for (const file of program.getSourceFiles()) {
    if (dirname(file.fileName) !== opsDir) continue;
    const visit = (node: ts.Node): void => {
      if (ts.isCallExpression(node) && ts.isIdentifier(node.expression) && node.expression.text === 'defineOp' && node.typeArguments?.length === 1) {
        const def = node.arguments[0];
        const nameProp = def && ts.isObjectLiteralExpression(def)
          ? def.properties.find((p): p is ts.PropertyAssignment => ts.isPropertyAssignment(p) && p.name.getText(file) === 'name')
          : undefined;
        if (nameProp && ts.isStringLiteral(nameProp.initializer)) {
          const type = checker.getTypeFromTypeNode(node.typeArguments[0]!);
          found.set(nameProp.initializer.text, new Set(checker.getPropertiesOfType(type).map((p) => p.getName())));
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(file);
  }
  return found;
}

/** The text with comments blanked (string literals kept), offsets unchanged. */
function withoutComments(text: string): string {
  let out = '';
  for (let i = 0; i < text.length; ) {
    const c = text[i]!;
    if (c === '"' || c === "'") {
      let j = i + 1;
      while (j < text.length && text[j] !== c) j += text[j] === '\\' ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j + 1;
    } else if (text.startsWith('//', i)) {
      const j = text.indexOf('\n', i);
      const end = j < 0 ? text.length : j;
      out += ' '.repeat(end - i);
      i = end;
    } else if (text.startsWith('/*', i)) {
      const j = text.indexOf('*/', i + 2);
      const end = j < 0 ? text.length : j + 2;
      out += text.slice(i, end).replace(/[^\n]/g, ' ');
      i = end;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

/** The offset just past the bracket matching the one at `open` (string literals skipped). */
function matching(text: string, open: number): number {
  const pairs: Record<string, string> = { '{': '}', '(': ')' };
  const stack: string[] = [];
  for (let i = open; i < text.length; i++) {
    const c = text[i]!;
    if (c === '"') {
      i++;
      while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
    } else if (pairs[c]) {
      stack.push(pairs[c]!);
    } else if (c === stack[stack.length - 1]) {
      stack.pop();
      if (stack.length === 0) return i + 1;
    }
  }
  return text.length;
}

interface Span {
  readonly op: string;
  readonly from: number;
  readonly to: number;
}

/**
 * Every problem with the names in `files` (C++ sources: path and text): a name the op it belongs
 * to does not declare, a name outside every launcher of a file that registers none, a launcher of
 * an op the registry does not have. Empty when all is well.
 */
export function checkLauncherNames(files: readonly { path: string; text: string }[], registry: ReadonlyMap<string, OpNames>): string[] {
  const problems: string[] = [];
  for (const { path, text: raw } of files) {
    const text = withoutComments(raw);
    const line = (offset: number): number => text.slice(0, offset).split('\n').length;
    const launchers: Span[] = [];
    for (const m of text.matchAll(/(?<!#define )\bMDLM_OP\((\w+)\)/g)) {
      const open = text.indexOf('{', m.index);
      launchers.push({ op: m[1]!, from: open, to: matching(text, open) });
      if (!registry.has(m[1]!)) problems.push(`${path}:${line(m.index)}: MDLM_OP(${m[1]}): the registry has no op '${m[1]}'`);
    }
    const calls: Span[] = [];
    for (const m of text.matchAll(/\brun_op\(\s*\w+\s*,\s*"(\w+)"/g)) {
      const open = m.index + m[0].indexOf('(');
      calls.push({ op: m[1]!, from: open, to: matching(text, open) });
      if (!registry.has(m[1]!)) problems.push(`${path}:${line(m.index)}: run_op of '${m[1]}', which the registry does not have`);
    }
    const fileOps = launchers.map((l) => l.op);
    for (const m of text.matchAll(/"(\w+)"_(arg|attr)\b/g)) {
      const [name, kind] = [m[1]!, m[2] as 'arg' | 'attr'];
      const at = m.index;
      const within = (s: Span): boolean => s.from <= at && at < s.to;
      const ops = [calls.find(within)?.op ?? launchers.find(within)?.op].filter((o): o is string => o !== undefined);
      const candidates = ops.length ? ops : fileOps;
      const where = `${path}:${line(at)}: "${name}"_${kind}`;
      if (!candidates.length) {
        problems.push(`${where} is outside every launcher, in a file that registers none`);
        continue;
      }
      const declares = (op: string): boolean => {
        const names = registry.get(op);
        return names !== undefined && (kind === 'arg' ? names.args : names.attrs).has(name);
      };
      if (!candidates.some(declares)) {
        problems.push(`${where}: ${candidates.join(' / ')} declares no ${kind === 'arg' ? 'argument' : 'attribute'} '${name}'`);
      }
    }
  }
  return problems;
}

/** The C++ sources under `dir` (recursively; its build/ output left out), with their text. */
export function cppFiles(dir: string): { path: string; text: string }[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((p) => /\.(cu|cuh|cc|h)$/.test(p) && !p.startsWith(`build${sep}`))
    .sort()
    .map((p) => ({ path: join(dir, p), text: readFileSync(join(dir, p), 'utf8') }));
}
