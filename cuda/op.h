// The contract between the Node addon (cuda/addon/) and the kernels (cuda/<op>.cu, or
// cuda/<family>/<op>.cu: cuda/attention/, cuda/gemm/).
//
// Every op of the registry (src/ops/<op>.ts) that has a CUDA kernel registers one launcher under
// the op's name with MDLM_OP(name). The addon receives a call from the TypeScript backend
// (src/backend/cuda/cuda.ts) after the call has been validated against the op's declaration, and
// hands the launcher an OpCall: device pointers by argument name, numeric and string attributes
// by attribute name (the names of the op's TypeScript declaration), the kernel settings, the
// stream and a scratch allocator. Launchers enqueue work on call.stream and never synchronise.
//
// A launcher names what it reads as "q"_arg (an argument) and "batch"_attr (an attribute): the
// accessors take nothing else, so every name a launcher uses is written in one of these two
// forms, and tests/cuda_build.test.ts checks each against the op's declaration in the registry
// (a renamed argument or attribute fails that test rather than a run).
//
// This header is plain C++17 + the CUDA runtime: kernels never see Node-API types.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

namespace mdlm {

// Storage dtypes, numbered as the TypeScript backend sends them (DTYPES in src/tensor.ts).
enum class DType : int { f32 = 0, f16 = 1, bf16 = 2, fp8e4m3 = 3, fp8e5m2 = 4, i32 = 5, u32 = 6 };

const char* dtype_name(DType d);

inline size_t dtype_bytes(DType d) {
  return d == DType::f16 || d == DType::bf16 ? 2 : d == DType::fp8e4m3 || d == DType::fp8e5m2 ? 1 : 4;
}

// A launcher's user-facing failure (unsupported dtype, bad attribute): the addon turns it into
// an MdlmError with this code. Internal faults use std::runtime_error and keep their message.
struct OpError : std::runtime_error {
  std::string code;
  OpError(std::string c, const std::string& msg) : std::runtime_error(msg), code(std::move(c)) {}
};

// An argument name ("q"_arg) and an attribute name ("batch"_attr) of an op's declaration.
struct ArgName {
  const char* str;
};
struct AttrName {
  const char* str;
};

// What the backend chose for the kernels of this process (src/backend/cuda/cuda.ts's
// CudaBackendOptions, through the addon's configure()): the same for every call until changed.
struct KernelSettings {
  // On an sm_90 GPU: the Hopper kernels (wgmma attention, the GEMM with fused rope and SwiGLU
  // epilogues); false runs the kernels Ampere and Ada run (mma.sync attention, cuBLASLt then the
  // element-wise op), so that a Hopper GPU can test them.
  bool hopper_kernels = true;
  // cuBLASLt algorithms timed on a GEMM shape's first call, the fastest kept (0: the heuristic's
  // first choice, the same in every process). At most kMostGemmCandidates.
  int gemm_autotune = 8;
};
constexpr int kMostGemmCandidates = 64;

struct Arg {
  void* ptr = nullptr;  // already offset to the view's first element
  DType dtype = DType::f32;
  int64_t numel = 0;
};

// Grows once to the largest request and is then reused: no cudaMalloc in a steady-state step.
// Memory handed out by one call stays valid until that call's work has run (stream order).
class Scratch {
 public:
  virtual ~Scratch() = default;
  virtual void* get(size_t bytes) = 0;  // 256-byte aligned
};

struct OpCall {
  std::string op;
  std::map<std::string, Arg> args;
  std::map<std::string, double> nums;  // numbers and booleans (0/1)
  std::map<std::string, std::string> strs;
  KernelSettings settings;
  cudaStream_t stream = nullptr;
  Scratch* scratch = nullptr;
  const cudaDeviceProp* device = nullptr;
  void* cublaslt = nullptr;  // cublasLtHandle_t, for ops that use cuBLASLt
  // cuBLASLt's workspace: one buffer owned by the addon, reused by every call (stream order).
  void* cublaslt_workspace = nullptr;
  size_t cublaslt_workspace_bytes = 0;

  const Arg& arg(ArgName name) const;
  double num(AttrName name) const;
  bool has(AttrName name) const { return nums.count(name.str) != 0; }  // an optional number or flag given
  int64_t i64(AttrName name) const;  // checks the number is an integer
  int i32(AttrName name) const;      // checks it fits in int32
  bool flag(AttrName name) const;
  // An optional flag: false when the call does not pass it.
  bool flag_or_false(AttrName name) const { return has(name) && flag(name); }
  const std::string& str(AttrName name) const;
  // The arg's dtype; OpError if it is not one of `allowed`.
  DType float_dtype(ArgName name, std::initializer_list<DType> allowed) const;
  [[noreturn]] void unsupported(const std::string& what) const;
};

using Launcher = void (*)(const OpCall&);

// Enqueues a one-thread kernel that sets a conditional graph node's value to *count > threshold
// (cuda/compact_rows.cu; the addon's conditionalBegin).
void launch_set_above(cudaGraphConditionalHandle handle, const int32_t* count, int32_t threshold, cudaStream_t stream);

// Registration happens in static initialisers of the .cu files.
struct Registrar {
  Registrar(const char* op, Launcher fn);
};
Launcher find_launcher(const std::string& op);
// Names of every registered op (for supports() and the probe).
std::string registered_ops();

// Throws std::runtime_error naming the call on a CUDA error (launch configuration errors show at
// once; faults inside kernels surface at the next synchronisation).
void check_cuda(cudaError_t e, const char* what);
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

inline unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace mdlm

// The two name forms (global, like the MDLM_OP launchers that use them).
constexpr mdlm::ArgName operator""_arg(const char* s, size_t) { return {s}; }
constexpr mdlm::AttrName operator""_attr(const char* s, size_t) { return {s}; }

#define MDLM_OP(name)                                                     \
  static void mdlm_launch_##name(const ::mdlm::OpCall& call);             \
  static ::mdlm::Registrar mdlm_registrar_##name(#name, mdlm_launch_##name); \
  static void mdlm_launch_##name(const ::mdlm::OpCall& call)
