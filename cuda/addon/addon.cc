// The Node addon's entry point and its memory, launch and configuration bindings, for
// src/backend/cuda/cuda.ts. The state they share is cuda/addon/device.h's; the CUDA graph
// bindings are in graph.cc and the capability probe in probe.cc.
#include "device.h"

#include <string>

#include "../knobs.h"

namespace mdlm::addon {

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + cublasLtGetStatusString(s));
}

Device::Device() {
  check_cuda(cudaGetDevice(&index), "cudaGetDevice");
  check_cuda(cudaSetDevice(index), "cudaSetDevice");
  check_cuda(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaStreamCreateWithFlags(&body_stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check_lt(cublasLtCreate(&lt), "cublasLtCreate");
  workspace = device_alloc(kCublasLtWorkspace, "the cuBLASLt workspace");
  scratch = std::make_unique<Arena>(stream);
}

Device::~Device() {
  // At process exit the driver may be gone already: best effort, errors ignored.
  cudaStreamSynchronize(stream);
  for (auto& [id, exec] : graphs) cudaGraphExecDestroy(exec);
  scratch.reset();
  cudaFree(workspace);
  cublasLtDestroy(lt);
  cudaStreamDestroy(body_stream);
  cudaStreamDestroy(stream);
}

Device& device(const Napi::Env& env) {
  Device* d = env.GetInstanceData<Device>();
  if (!d) {
    d = new Device();
    env.SetInstanceData(d);
  }
  return *d;
}

[[noreturn]] void throw_js(const Napi::Env& env, const std::exception& e) {
  Napi::Error err = Napi::Error::New(env, e.what());
  if (const auto* op = dynamic_cast<const OpError*>(&e)) err.Set("mdlmCode", op->code);
  throw err;
}

void* pointer_arg(const Napi::Value& v, const char* what) {
  if (!v.IsBigInt()) throw Napi::TypeError::New(v.Env(), std::string(what) + ": expected a BigInt device pointer");
  bool lossless = false;
  const uint64_t p = v.As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) throw Napi::TypeError::New(v.Env(), std::string(what) + ": pointer out of range");
  return reinterpret_cast<void*>(static_cast<uintptr_t>(p));
}

size_t size_arg(const Napi::Value& v, const char* what) {
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 0 && d <= 9007199254740992.0 && static_cast<double>(static_cast<size_t>(d)) == d)) {
    throw Napi::TypeError::New(v.Env(), std::string(what) + ": expected a non-negative integer byte count");
  }
  return static_cast<size_t>(d);
}

// configure({hopperKernels: boolean, gemmAutotune: number}): the kernel settings of every call
// from here on (cuda/op.h's KernelSettings). Calls already enqueued keep theirs.
Napi::Value Configure(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Device& d = device(info.Env());
    if (!info[0].IsObject()) throw Napi::TypeError::New(info.Env(), "configure: expected {hopperKernels, gemmAutotune}");
    Napi::Object o = info[0].As<Napi::Object>();
    const Napi::Value hopper = o.Get("hopperKernels"), autotune = o.Get("gemmAutotune");
    if (!hopper.IsBoolean() || !autotune.IsNumber()) throw Napi::TypeError::New(info.Env(), "configure: hopperKernels must be a boolean and gemmAutotune a number");
    const double n = autotune.As<Napi::Number>().DoubleValue();
    if (!(n >= 0 && n <= kMostGemmCandidates && n == static_cast<int>(n))) {
      throw OpError("BAD_ARGUMENT", "configure: gemmAutotune is " + std::to_string(n) + "; expected an integer from 0 to " + std::to_string(kMostGemmCandidates));
    }
    d.settings.hopper_kernels = hopper.As<Napi::Boolean>().Value();
    d.settings.gemm_autotune = static_cast<int>(n);
    return info.Env().Undefined();
  });
}

Napi::Value Malloc(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    device(info.Env());
    const size_t bytes = size_arg(info[0], "malloc");
    void* p = device_alloc(bytes == 0 ? kAlign : bytes, "a tensor");
    return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)));
  });
}

Napi::Value Free(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    device(info.Env());
    check_cuda(cudaFree(pointer_arg(info[0], "free")), "cudaFree");
    return info.Env().Undefined();
  });
}

// upload(ptr, bytes: ArrayBufferView): the copy is enqueued on the stream after earlier work;
// the host bytes are staged before this returns, so the caller may reuse them at once.
Napi::Value Upload(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Device& d = device(info.Env());
    void* dst = pointer_arg(info[0], "upload");
    if (!info[1].IsTypedArray()) throw Napi::TypeError::New(info.Env(), "upload: expected a typed array");
    Napi::TypedArray view = info[1].As<Napi::TypedArray>();
    const auto* src = static_cast<const char*>(view.ArrayBuffer().Data()) + view.ByteOffset();
    if (view.ByteLength() > 0) check_cuda(cudaMemcpyAsync(dst, src, view.ByteLength(), cudaMemcpyHostToDevice, d.stream), "upload: cudaMemcpyAsync");
    return info.Env().Undefined();
  });
}

// memset(ptr, bytes): zero the bytes on the stream, after earlier work (gradient buffers each step).
Napi::Value Memset(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Device& d = device(info.Env());
    void* dst = pointer_arg(info[0], "memset");
    const size_t bytes = size_arg(info[1], "memset");
    if (bytes > 0) check_cuda(cudaMemsetAsync(dst, 0, bytes, d.work()), "memset: cudaMemsetAsync");
    return info.Env().Undefined();
  });
}

// download(ptr, bytes) -> ArrayBuffer, after all work enqueued before it.
Napi::Value Download(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Device& d = device(info.Env());
    const void* src = pointer_arg(info[0], "download");
    const size_t bytes = size_arg(info[1], "download");
    Napi::ArrayBuffer out = Napi::ArrayBuffer::New(info.Env(), bytes);
    if (bytes > 0) check_cuda(cudaMemcpyAsync(out.Data(), src, bytes, cudaMemcpyDeviceToHost, d.stream), "download: cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(d.stream), "download: a kernel enqueued before this download failed");
    return out;
  });
}

// run(op, args: [name, ptr, dtype, numel][], nums: {name: number}, strs: {name: string})
Napi::Value Run(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Napi::Env env = info.Env();
    Device& d = device(env);
    mdlm::OpCall call;
    call.op = info[0].As<Napi::String>().Utf8Value();
    const mdlm::Launcher launch = mdlm::find_launcher(call.op);
    if (!launch) throw OpError("UNSUPPORTED_OP", "cuda: no kernel for op '" + call.op + "' (kernels: " + mdlm::registered_ops() + ")");
    Napi::Array args = info[1].As<Napi::Array>();
    for (uint32_t i = 0; i < args.Length(); i++) {
      Napi::Array a = args.Get(i).As<Napi::Array>();
      mdlm::Arg arg;
      arg.ptr = pointer_arg(a.Get(1u), "run");
      const int code = a.Get(2u).As<Napi::Number>().Int32Value();
      if (code < 0 || code > static_cast<int>(mdlm::DType::u32)) throw std::runtime_error(call.op + ": unknown dtype code " + std::to_string(code));
      arg.dtype = static_cast<mdlm::DType>(code);
      arg.numel = a.Get(3u).As<Napi::Number>().Int64Value();
      call.args[a.Get(0u).As<Napi::String>().Utf8Value()] = arg;
    }
    Napi::Object nums = info[2].As<Napi::Object>();
    Napi::Array keys = nums.GetPropertyNames();
    for (uint32_t i = 0; i < keys.Length(); i++) {
      const std::string key = keys.Get(i).As<Napi::String>().Utf8Value();
      call.nums[key] = nums.Get(key).As<Napi::Number>().DoubleValue();
    }
    Napi::Object strs = info[3].As<Napi::Object>();
    keys = strs.GetPropertyNames();
    for (uint32_t i = 0; i < keys.Length(); i++) {
      const std::string key = keys.Get(i).As<Napi::String>().Utf8Value();
      call.strs[key] = strs.Get(key).As<Napi::String>().Utf8Value();
    }
    d.scratch->begin_call();
    call.stream = d.work();
    call.scratch = d.scratch.get();
    call.device = &d.prop;
    call.cublaslt = d.lt;
    call.cublaslt_workspace = d.workspace;
    call.cublaslt_workspace_bytes = kCublasLtWorkspace;
    call.settings = d.settings;
    try {
      launch(call);
      if (knobs::sync_each_op() && !d.capturing) check_cuda(cudaStreamSynchronize(d.stream), "kernel execution (MDLM_CUDA_SYNC=1)");
    } catch (const OpError&) {
      throw;
    } catch (const std::exception& e) {
      throw std::runtime_error("cuda: op '" + call.op + "': " + e.what());
    }
    return env.Undefined();
  });
}

// Waits for all enqueued work; faults inside kernels surface here (or at the next download); set
// MDLM_CUDA_SYNC=1 to learn which op faulted.
Napi::Value Sync(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Device& d = device(info.Env());
    check_cuda(cudaStreamSynchronize(d.stream), "sync: a kernel enqueued earlier failed");
    return info.Env().Undefined();
  });
}

// useDevice(index): the GPU this process runs on from now on, index modulo the visible count (a
// rank's LOCAL_RANK; several ranks share a GPU when there are fewer). Before the first use only:
// the device state (streams, cuBLASLt, memory) lives on the GPU current when it is made.
Napi::Value UseDevice(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    if (info.Env().GetInstanceData<Device>()) throw std::runtime_error("useDevice: the device is in use already; choose it before the first allocation");
    if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "useDevice(index): expected a number");
    const int index = info[0].As<Napi::Number>().Int32Value();
    int count = 0;
    check_cuda(cudaGetDeviceCount(&count), "useDevice: cudaGetDeviceCount");
    if (index < 0 || count <= 0) throw std::runtime_error("useDevice: no device " + std::to_string(index) + " among " + std::to_string(count));
    check_cuda(cudaSetDevice(index % count), "useDevice: cudaSetDevice");
    return Napi::Number::New(info.Env(), index % count);
  });
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("probe", Napi::Function::New(env, Probe, "probe"));
  exports.Set("useDevice", Napi::Function::New(env, UseDevice, "useDevice"));
  exports.Set("configure", Napi::Function::New(env, Configure, "configure"));
  exports.Set("malloc", Napi::Function::New(env, Malloc, "malloc"));
  exports.Set("free", Napi::Function::New(env, Free, "free"));
  exports.Set("upload", Napi::Function::New(env, Upload, "upload"));
  exports.Set("memset", Napi::Function::New(env, Memset, "memset"));
  exports.Set("captureBegin", Napi::Function::New(env, CaptureBegin, "captureBegin"));
  exports.Set("captureEnd", Napi::Function::New(env, CaptureEnd, "captureEnd"));
  exports.Set("captureAbort", Napi::Function::New(env, CaptureAbort, "captureAbort"));
  exports.Set("conditionalBegin", Napi::Function::New(env, ConditionalBegin, "conditionalBegin"));
  exports.Set("conditionalEnd", Napi::Function::New(env, ConditionalEnd, "conditionalEnd"));
  exports.Set("graphLaunch", Napi::Function::New(env, GraphLaunch, "graphLaunch"));
  exports.Set("graphDestroy", Napi::Function::New(env, GraphDestroy, "graphDestroy"));
  exports.Set("download", Napi::Function::New(env, Download, "download"));
  exports.Set("run", Napi::Function::New(env, Run, "run"));
  exports.Set("sync", Napi::Function::New(env, Sync, "sync"));
  return exports;
}

}  // namespace mdlm::addon

using mdlm::addon::Init;
NODE_API_MODULE(mdlm_cuda, Init)
