/**
 * One error type for user mistakes (bad config, bad shapes, unavailable backend, corrupt files,
 * paths that cannot be written).
 * The CLI prints `code: message` without a stack and exits non-zero; internal faults stay plain
 * `Error`s and keep their stack.
 */
export type ErrorCode =
  | 'BAD_ARGUMENT'
  | 'BAD_SHAPE'
  | 'BAD_DTYPE'
  | 'UNSUPPORTED_DTYPE'
  | 'UNSUPPORTED_OP'
  | 'BACKEND_UNAVAILABLE'
  | 'WGSL_COMPILE'
  | 'SHADER_BINDING'
  | 'WEBGPU_DEVICE_LOST'
  | 'WEBGPU_VALIDATION'
  | 'OUT_OF_MEMORY'
  | 'BAD_CONFIG'
  | 'BAD_FILE'
  | 'NOT_FOUND'
  | 'IO_ERROR';

export class MdlmError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string) {
    super(message);
    this.name = 'MdlmError';
    this.code = code;
  }
}

export function fail(code: ErrorCode, message: string): never {
  throw new MdlmError(code, message);
}
