/**
 * WGSL sources: loaded by name from shaders/, with `//!import lib/<name>` lines replaced by that
 * library file, compiled once, reflected with wgsl_reflect. Compile errors name the shader file
 * and the line in it (or in the imported library).
 */
import { WgslReflect } from 'wgsl_reflect/wgsl_reflect.module.js';
import { fail } from '../../errors.js';

export type ShaderLoader = (name: string) => string;

export interface ReflectedBinding {
  readonly name: string;
  readonly binding: number;
  readonly kind: 'uniform' | 'read-only-storage' | 'storage';
  /** Scalar element type of a storage array ('f32', 'i32', 'u32', 'f16'), or undefined. */
  readonly element?: string;
  /** Uniform struct layout: member name -> [byte offset, scalar type, component count]. */
  readonly members?: ReadonlyMap<string, { offset: number; scalar: string; count: number }>;
  readonly size: number;
}

export interface ReflectedEntry {
  readonly name: string;
  readonly bindings: readonly ReflectedBinding[];
  readonly workgroupSize: readonly number[];
}

export interface CompiledShader {
  readonly name: string;
  readonly module: GPUShaderModule;
  readonly entries: ReadonlyMap<string, ReflectedEntry>;
}

interface Segment {
  readonly file: string;
  readonly startLine: number; // first line in the combined source (1-based)
  readonly lines: number;
}

const IMPORT = /^\s*\/\/!import\s+(\S+)\s*$/;

/** Resolve imports; returns the combined source and where each part came from. */
export function assembleShader(name: string, load: ShaderLoader): { code: string; segments: Segment[] } {
  const main = load(name);
  const parts: string[] = [];
  const segments: Segment[] = [];
  let line = 1;
  const seen = new Set<string>();
  const mainLines: string[] = [];
  for (const l of main.split('\n')) {
    const m = IMPORT.exec(l);
    if (m) {
      const lib = m[1]!;
      if (!seen.has(lib)) {
        seen.add(lib);
        const src = load(lib).replace(/\n$/, '');
        const n = src.split('\n').length;
        parts.push(src);
        segments.push({ file: lib, startLine: line, lines: n });
        line += n;
      }
      mainLines.push('// (import resolved above)');
    } else {
      mainLines.push(l);
    }
  }
  segments.push({ file: name, startLine: line, lines: mainLines.length });
  parts.push(mainLines.join('\n'));
  return { code: parts.join('\n'), segments };
}

function locate(segments: readonly Segment[], line: number): string {
  for (const s of segments) {
    if (line >= s.startLine && line < s.startLine + s.lines) return `shaders/${s.file}.wgsl:${line - s.startLine + 1}`;
  }
  return `line ${line}`;
}

function scalarOf(typeName: string): string | undefined {
  const m = /(f32|i32|u32|f16)/.exec(typeName);
  if (m) return m[1];
  if (/^vec\d[fiuh]$/.test(typeName)) return { f: 'f32', i: 'i32', u: 'u32', h: 'f16' }[typeName.at(-1)!];
  return undefined;
}

interface ReflectType {
  name: string;
  size: number;
  format?: ReflectType | null;
  members?: { name: string; offset: number; size: number; type: ReflectType }[] | null;
}

function describeType(t: ReflectType): string {
  return t.format ? `${t.name}<${describeType(t.format)}>` : t.name;
}

export function reflectShader(name: string, code: string): Map<string, ReflectedEntry> {
  const reflect = new WgslReflect(code);
  const entries = new Map<string, ReflectedEntry>();
  for (const e of reflect.entry.compute) {
    const bindings: ReflectedBinding[] = [];
    for (const r of e.resources) {
      if (r.group !== 0) fail('SHADER_BINDING', `shaders/${name}.wgsl: '${r.name}' is in @group(${r.group}); mdlm shaders use group 0 only`);
      const type = r.type as unknown as ReflectType;
      if (r.resourceType === 0) {
        const members = new Map<string, { offset: number; scalar: string; count: number }>();
        for (const m of type.members ?? []) {
          const scalar = scalarOf(m.type.format ? describeType(m.type) : m.type.name);
          if (!scalar) fail('SHADER_BINDING', `shaders/${name}.wgsl: uniform member '${m.name}' has type ${m.type.name}; use scalars or vectors`);
          members.set(m.name, { offset: m.offset, scalar, count: Math.max(1, m.size / 4) });
        }
        bindings.push({ name: r.name, binding: r.binding, kind: 'uniform', members, size: type.size });
      } else if (r.resourceType === 1) {
        const element = type.format ? scalarOf(describeType(type.format)) : undefined;
        bindings.push({
          name: r.name,
          binding: r.binding,
          kind: r.access === 'read' ? 'read-only-storage' : 'storage',
          ...(element ? { element } : {}),
          size: type.size,
        });
      } else {
        fail('SHADER_BINDING', `shaders/${name}.wgsl: binding '${r.name}' is not a buffer; mdlm kernels bind buffers only`);
      }
    }
    bindings.sort((a, b) => a.binding - b.binding);
    const ws = (e.workgroupSize as unknown as number[] | null) ?? [1, 1, 1];
    entries.set(e.name, { name: e.name, bindings, workgroupSize: ws });
  }
  return entries;
}

export async function compileShader(device: GPUDevice, name: string, load: ShaderLoader): Promise<CompiledShader> {
  let assembled: { code: string; segments: Segment[] };
  try {
    assembled = assembleShader(name, load);
  } catch (e) {
    return fail('NOT_FOUND', `shader '${name}' could not be read: ${(e as Error).message}`);
  }
  const { code, segments } = assembled;
  // Scoped so a compile error is reported here, with its location, not as a stray device error.
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ label: name, code });
  const info = await module.getCompilationInfo();
  const scoped = await device.popErrorScope();
  const errors = info.messages.filter((m) => m.type === 'error');
  if (errors.length > 0) {
    const lines = errors.map((m) => `${locate(segments, m.lineNum)}:${m.linePos}: ${m.message}`);
    fail('WGSL_COMPILE', `WGSL compile error in shader '${name}':\n  ${lines.join('\n  ')}`);
  }
  if (scoped) fail('WGSL_COMPILE', `shader '${name}' was rejected: ${scoped.message}`);
  let entries: Map<string, ReflectedEntry>;
  try {
    entries = reflectShader(name, code);
  } catch (e) {
    if (e instanceof Error && e.name === 'MdlmError') throw e;
    return fail('WGSL_COMPILE', `shader '${name}' could not be reflected: ${(e as Error).message}`);
  }
  return { name, module, entries };
}
