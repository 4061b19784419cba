// Types of cuda/build.mjs (plain Node, run without a build step) for the TypeScript that imports it.
export declare const CUDA_DIR: string;
export declare const ADDON_PATH: string;
export declare const DEFAULT_ARCHS: string[];
export declare const NVCC_FLAGS: string[];
/** nvcc: $NVCC, $CUDA_HOME/bin, PATH, /usr/local/cuda/bin; null when there is none. */
export declare function findNvcc(): string | null;
/** Whether the source includes <cublasLt.h> (it then needs the cuBLAS headers). */
export declare function usesCublasLt(file: string): boolean;
/** Every kernel source: the .cu files under cuda/. */
export declare function cudaSources(): string[];
/** A source's object file name: its path under cuda/ with '/' as '+'. */
export declare function objectName(src: string): string;
export declare function gencodeFlags(archs: readonly string[]): string[];
export declare function build(): Promise<void>;
/** nvcc and the CUDA runtime's headers and library; throws saying what is missing. */
export declare function locateToolkit(): { nvcc: string; cudaHome: string; cudaInclude: string; cudaLib: string };
