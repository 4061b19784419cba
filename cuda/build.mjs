#!/usr/bin/env node
// Builds the CUDA addon, cuda/build/Release/mdlm_cuda.node: every .cu under cuda/ (the kernels,
// by family: cuda/attention/, cuda/gemm/, the others at the top) with nvcc and the .cc files (the
// op registry, cuda/op.cc, and the Node-API addon, cuda/addon/) with g++, in parallel, then one
// link against libcudart and libcublasLt. Objects whose sources, headers and flags did not change
// are not rebuilt.
//
//   npm run build:cuda                      # sm_80, sm_89, sm_90a, and sm_100 with CUDA 12.8 and newer
//   MDLM_CUDA_ARCHS=90a npm run build:cuda  # one architecture: a quick build for the GPU at hand
//
// Environment: CUDA_HOME (the toolkit; default from nvcc's location or /usr/local/cuda), NVCC,
// CXX (default g++), MDLM_CUBLAS_HOME (a cuBLAS outside the toolkit, e.g. the nvidia-cublas wheel:
// include/ and lib/), MDLM_NODE_INCLUDE (Node's headers; default <node prefix>/include/node, then
// /usr/include/node), MDLM_CUDA_JOBS (parallel compiles; default the number of CPUs).
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, realpathSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { delimiter, dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const CUDA_DIR = dirname(fileURLToPath(import.meta.url));
const BUILD_DIR = join(CUDA_DIR, 'build');
const OBJ_DIR = join(BUILD_DIR, 'obj');
export const ADDON_PATH = join(BUILD_DIR, 'Release', 'mdlm_cuda.node');

export const DEFAULT_ARCHS = ['80', '89', '90a'];
/** Blackwell's datacenter GPUs, built by default where the toolkit knows them (CUDA 12.8 and newer). */
const BLACKWELL_ARCH = '100';
/** nvcc flags every kernel builds with (the compile-check test uses them too). */
export const NVCC_FLAGS = ['-std=c++17', '-O3', '-Xcompiler', '-fPIC'];

class BuildError extends Error {}

function fail(message) {
  throw new BuildError(message);
}

function which(cmd) {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    const p = join(dir, cmd);
    if (dir && existsSync(p)) return p;
  }
  return null;
}

/** nvcc: $NVCC, $CUDA_HOME/bin, PATH, /usr/local/cuda/bin; null when there is none. */
export function findNvcc() {
  const candidates = [
    process.env.NVCC,
    process.env.CUDA_HOME && join(process.env.CUDA_HOME, 'bin', 'nvcc'),
    process.env.CUDA_PATH && join(process.env.CUDA_PATH, 'bin', 'nvcc'),
    which('nvcc'),
    '/usr/local/cuda/bin/nvcc',
  ];
  return candidates.find((p) => p && existsSync(p)) ?? null;
}

/** The sources that include <cublasLt.h> need the cuBLAS headers; the others only the toolkit. */
export function usesCublasLt(file) {
  return /#include\s*<cublasLt\.h>/.test(readFileSync(file, 'utf8'));
}

/** The files under cuda/ (not cuda/build/) whose names end with `ext`, sorted. */
function sourcesEndingWith(ext) {
  const found = [];
  const walk = (dir) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) {
        if (p !== BUILD_DIR) walk(p);
      } else if (e.name.endsWith(ext)) found.push(p);
    }
  };
  walk(CUDA_DIR);
  return found.sort();
}

/** Every kernel source: the .cu files under cuda/. */
export function cudaSources() {
  return sourcesEndingWith('.cu');
}

/** A source's object name: its path under cuda/ with '/' as '+' (attention/attention.cu -> attention+attention.cu.o). */
export function objectName(src) {
  return `${relative(CUDA_DIR, src).split(/[\\/]/).join('+')}.o`;
}

/** SASS for each architecture (no PTX: every target is named, and a PTX pass would cost a compile). */
export function gencodeFlags(archs) {
  return archs.flatMap((a) => ['-gencode', `arch=compute_${a},code=sm_${a}`]);
}

function firstDir(dirs, file) {
  return dirs.find((d) => d && existsSync(join(d, file))) ?? null;
}

/** DEFAULT_ARCHS, and sm_100 where `nvcc --list-gpu-arch` lists it. */
function defaultArchs(nvcc) {
  const listed = spawnSync(nvcc, ['--list-gpu-arch'], { encoding: 'utf8' });
  const known = listed.status === 0 && listed.stdout.split(/\s+/).includes(`compute_${BLACKWELL_ARCH}`);
  return known ? [...DEFAULT_ARCHS, BLACKWELL_ARCH] : DEFAULT_ARCHS;
}

function parseArchs(nvcc) {
  const raw = process.env.MDLM_CUDA_ARCHS?.trim();
  const archs = raw ? raw.split(/[\s,;]+/).filter(Boolean) : defaultArchs(nvcc);
  for (const a of archs) if (!/^\d{2,3}[af]?$/.test(a)) fail(`MDLM_CUDA_ARCHS: '${a}' is not an SM architecture such as 80, 89, 90a or 100a`);
  return archs;
}

/** nvcc and the CUDA runtime's headers and library, or an error saying what is missing. */
export function locateToolkit() {
  const nvcc = findNvcc();
  if (!nvcc) {
    fail('nvcc not found (looked at $NVCC, $CUDA_HOME/bin, PATH and /usr/local/cuda/bin). Install the CUDA toolkit 12.4 or newer ' +
      '(NVIDIA\'s cuda-toolkit-13-0 package) or set CUDA_HOME to it.');
  }
  const cudaHome = [process.env.CUDA_HOME, process.env.CUDA_PATH, dirname(dirname(realpathSync(nvcc))), '/usr/local/cuda']
    .find((d) => d && (existsSync(join(d, 'include', 'cuda_runtime.h')) || existsSync(join(d, 'targets', 'x86_64-linux', 'include', 'cuda_runtime.h'))));
  if (!cudaHome) fail(`the CUDA runtime headers (cuda_runtime.h) were not found next to ${nvcc} or in /usr/local/cuda: install cuda-cudart-dev-13-0 or set CUDA_HOME`);
  const cudaInclude = firstDir([join(cudaHome, 'include'), join(cudaHome, 'targets', 'x86_64-linux', 'include')], 'cuda_runtime.h');
  const cudaLib = firstDir([join(cudaHome, 'lib64'), join(cudaHome, 'lib'), join(cudaHome, 'targets', 'x86_64-linux', 'lib')], 'libcudart.so');
  if (!cudaLib) fail(`libcudart.so was not found under ${cudaHome}/lib64: install cuda-cudart-dev-13-0`);
  return { nvcc, cudaHome, cudaInclude, cudaLib };
}

/** Where everything the build needs lives, or an error saying what is missing and how to get it. */
function locate() {
  const { nvcc, cudaHome, cudaInclude, cudaLib } = locateToolkit();
  const cublasHome = process.env.MDLM_CUBLAS_HOME;
  const cublasInclude = firstDir([cublasHome && join(cublasHome, 'include'), cudaInclude, '/usr/include'], 'cublasLt.h');
  if (!cublasInclude) {
    fail(`cuBLASLt's header cublasLt.h was not found in ${cudaInclude}${cublasHome ? ` or ${cublasHome}/include` : ''} or /usr/include: ` +
      'install libcublas-dev-13-0 (NVIDIA\'s CUDA repository), or point MDLM_CUBLAS_HOME at a cuBLAS with include/ and lib/ (e.g. the nvidia-cublas wheel\'s nvidia/cublas)');
  }
  const cublasLib = firstDir([cublasHome && join(cublasHome, 'lib'), cublasHome && join(cublasHome, 'lib64'), cudaLib, '/usr/lib/x86_64-linux-gnu'], 'libcublasLt.so');
  if (!cublasLib) {
    fail(`libcublasLt.so was not found in ${cudaLib}${cublasHome ? ` or ${cublasHome}/lib` : ''} or /usr/lib/x86_64-linux-gnu: ` +
      'install libcublas-dev-13-0, or set MDLM_CUBLAS_HOME');
  }
  const nodeInclude = firstDir([process.env.MDLM_NODE_INCLUDE, join(dirname(dirname(process.execPath)), 'include', 'node'), '/usr/include/node'], 'node_api.h');
  if (!nodeInclude) {
    fail(`Node's headers (node_api.h) were not found in ${join(dirname(dirname(process.execPath)), 'include', 'node')} or /usr/include/node: ` +
      'install them with your Node.js (Debian: libnode-dev; the official tarballs ship include/node) or set MDLM_NODE_INCLUDE');
  }
  let addonApi;
  try {
    addonApi = dirname(realpathSync(createRequire(import.meta.url).resolve('node-addon-api/package.json')));
  } catch {
    fail('node-addon-api is not installed: run npm ci');
  }
  const cxx = process.env.CXX || 'g++';
  if (!which(cxx) && !existsSync(cxx)) fail(`${cxx} not found: install g++ (apt-get install g++) or set CXX`);
  return { nvcc, cudaHome, cudaInclude, cudaLib, cublasInclude, cublasLib, nodeInclude, addonApi, cxx };
}

/** Make's dependency file: the target's prerequisites. */
function readDeps(file) {
  if (!existsSync(file)) return null;
  const text = readFileSync(file, 'utf8').replace(/\\\r?\n/g, ' ');
  const colon = text.indexOf(': ');
  return text.slice(colon + 2).split(/\s+/).filter(Boolean).map((p) => p.replace(/\\ /g, ' '));
}

function mtime(p) {
  try {
    return statSync(p).mtimeMs;
  } catch {
    return Infinity;
  }
}

/** Up to date: the object exists, was built with the same command, and is newer than every input. */
function upToDate(obj, command) {
  const deps = readDeps(`${obj}.d`);
  if (!deps || !existsSync(obj) || !existsSync(`${obj}.cmd`) || readFileSync(`${obj}.cmd`, 'utf8') !== command) return false;
  const t = mtime(obj);
  return deps.every((d) => mtime(d) <= t);
}

function run(argv) {
  return new Promise((resolve) => {
    const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    child.on('error', (e) => resolve({ code: -1, output: `${output}${e.message}\n` }));
    child.on('close', (code) => resolve({ code: code ?? -1, output }));
  });
}

async function pool(tasks, jobs) {
  const results = new Array(tasks.length);
  let next = 0;
  async function worker() {
    while (next < tasks.length) {
      const i = next++;
      results[i] = await tasks[i]();
    }
  }
  await Promise.all(Array.from({ length: Math.min(jobs, tasks.length) }, worker));
  return results;
}

export async function build() {
  const t0 = performance.now();
  const tools = locate();
  const archs = parseArchs(tools.nvcc);
  mkdirSync(OBJ_DIR, { recursive: true });
  mkdirSync(dirname(ADDON_PATH), { recursive: true });
  const gencode = gencodeFlags(archs);
  const units = [
    ...cudaSources().map((src) => ({
      src,
      argv: (obj) => [tools.nvcc, ...NVCC_FLAGS, ...gencode, '-I', tools.cublasInclude, '-MD', '-MF', `${obj}.d`, '-c', src, '-o', obj],
    })),
    ...sourcesEndingWith('.cc').map((src) => {
      return {
        src,
        argv: (obj) => [
          tools.cxx, '-std=c++17', '-O2', '-fPIC', '-Wall', '-DNAPI_VERSION=8', '-DNAPI_CPP_EXCEPTIONS', '-DNODE_ADDON_API_DISABLE_DEPRECATED',
          '-I', tools.nodeInclude, '-I', tools.addonApi, '-I', tools.cudaInclude, '-I', tools.cublasInclude, '-MMD', '-MF', `${obj}.d`, '-c', src, '-o', obj,
        ],
      };
    }),
  ];
  const jobs = Number(process.env.MDLM_CUDA_JOBS) || availableParallelism();
  console.log(`[build:cuda] ${units.length} sources, archs ${archs.join(' ')}, ${jobs} jobs (CUDA ${tools.cudaHome}, cuBLASLt ${tools.cublasLib})`);
  const objects = [];
  const tasks = units.map(({ src, argv }) => {
    const obj = join(OBJ_DIR, objectName(src));
    objects.push(obj);
    const command = argv(obj);
    const key = command.join('\u0000');
    return async () => {
      if (upToDate(obj, key)) return { src, rebuilt: false, ok: true };
      const t = performance.now();
      const r = await run(command);
      if (r.code !== 0) {
        console.error(`[build:cuda] FAILED ${relative(CUDA_DIR, src)}\n$ ${command.join(' ')}\n${r.output}`);
        return { src, rebuilt: true, ok: false };
      }
      writeFileSync(`${obj}.cmd`, key);
      console.log(`[build:cuda] ${relative(CUDA_DIR, src)} ${((performance.now() - t) / 1000).toFixed(1)} s`);
      return { src, rebuilt: true, ok: true };
    };
  });
  const results = await pool(tasks, jobs);
  const failed = results.filter((r) => !r.ok);
  if (failed.length) fail(`${failed.length} source(s) failed to compile: ${failed.map((r) => relative(CUDA_DIR, r.src)).join(', ')} (compiler output above)`);
  const link = [
    tools.cxx, '-shared', '-o', ADDON_PATH, ...objects, '-L', tools.cudaLib, '-L', tools.cublasLib, '-lcublasLt', '-lcudart', '-ldl',
    `-Wl,-rpath,${tools.cudaLib}`, ...(tools.cublasLib !== tools.cudaLib ? [`-Wl,-rpath,${tools.cublasLib}`] : []),
  ];
  const linkKey = link.join('\u0000');
  const stale = results.some((r) => r.rebuilt) || !existsSync(ADDON_PATH) || !existsSync(`${ADDON_PATH}.cmd`) ||
    readFileSync(`${ADDON_PATH}.cmd`, 'utf8') !== linkKey || objects.some((o) => mtime(o) > mtime(ADDON_PATH));
  if (stale) {
    const r = await run(link);
    if (r.code !== 0) fail(`linking failed\n$ ${link.join(' ')}\n${r.output}`);
    writeFileSync(`${ADDON_PATH}.cmd`, linkKey);
  }
  const rebuilt = results.filter((r) => r.rebuilt).length;
  console.log(`[build:cuda] ${stale ? 'linked' : 'up to date:'} ${ADDON_PATH} (${rebuilt} of ${units.length} compiled, ${((performance.now() - t0) / 1000).toFixed(1)} s)`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  build().catch((e) => {
    console.error(e instanceof BuildError ? `[build:cuda] error: ${e.message}` : e);
    process.exitCode = 1;
  });
}

