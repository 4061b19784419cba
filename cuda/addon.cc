// The Node addon: device memory, copies, the op launcher call and the capability probe, for
// src/backend/cuda/cuda.ts. One device (CUDA_VISIBLE_DEVICES picks it), one stream, one scratch
// arena, one cuBLASLt handle with its workspace. Pointers travel to JavaScript as BigInt.
//
// Errors: an OpError (a user mistake the kernel detected) becomes a JS Error with `mdlmCode` set,
// which the TypeScript side rethrows as an MdlmError; CUDA and cuBLASLt failures become plain
// Errors naming the op and the kernel or call.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <napi.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "op.h"

namespace {

using mdlm::check_cuda;
using mdlm::OpError;
using mdlm::launch_set_above;

constexpr size_t kAlign = 256;
// cuBLASLt's recommended workspace on Hopper; enough for every algorithm it picks on Ampere too.
constexpr size_t kCublasLtWorkspace = 32u << 20;

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// cudaMalloc, with out-of-memory as a user-facing error that says how much was free.
void* device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it so later calls do not report it again
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw OpError("OUT_OF_MEMORY", std::string("cuda: cannot allocate ") + mib(bytes) + " for " + what + " (" + mib(free_b) +
                                       " free of " + mib(total_b) + "); use a smaller batch or model");
  }
  check_cuda(e, what);
  return p;
}

// The per-call scratch: a bump allocator over one block, reset at every call. A call that wants
// more gets extra blocks for that call; the next call then drains the stream (in-flight work may
// still use the old blocks) and replaces them by one block of the largest total seen, so a
// steady-state loop allocates nothing. While a CUDA graph is captured the block is fixed (the
// graph keeps its addresses; draining a capturing stream is illegal): a call that would need more
// fails and asks for the work to run once uncaptured first.
class Arena final : public mdlm::Scratch {
 public:
  explicit Arena(cudaStream_t stream) : stream_(stream) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() override { release(); }

  // Replace the blocks by one of the high-water size if the last call needed extra ones.
  void settle() {
    if (extra_.empty()) return;
    check_cuda(cudaStreamSynchronize(stream_), "scratch: cudaStreamSynchronize before growing");
    release();
    base_ = static_cast<char*>(device_alloc(high_water_, "the scratch arena"));
    size_ = high_water_;
  }

  void begin_call() {
    if (!capturing_) settle();
    used_ = 0;
  }

  void set_capturing(bool on) { capturing_ = on; }

  void* get(size_t bytes) override {
    bytes = round_up(bytes == 0 ? 1 : bytes, kAlign);
    used_ += bytes;
    if (used_ > high_water_) high_water_ = used_;
    if (used_ <= size_) return base_ + (used_ - bytes);
    if (capturing_) {
      throw OpError("BAD_ARGUMENT", "cuda: an op needs " + mib(used_) + " of scratch while a CUDA graph is recorded, more than the arena's " +
                                        mib(size_) + "; run the same work once unrecorded before recording it");
    }
    extra_.push_back(device_alloc(bytes, "scratch"));
    return extra_.back();
  }

 private:
  void release() {
    if (base_) cudaFree(base_);
    for (void* p : extra_) cudaFree(p);
    base_ = nullptr;
    size_ = 0;
    extra_.clear();
  }

  cudaStream_t stream_;
  bool capturing_ = false;
  char* base_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
  size_t high_water_ = 0;
  std::vector<void*> extra_;
};

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + cublasLtGetStatusString(s));
}

struct Device {
  int index = 0;
  cudaDeviceProp prop{};
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  std::unique_ptr<Arena> scratch;
  // Instantiated CUDA graphs by id (record/replay from JavaScript); `capturing` while one is recorded.
  std::map<int, cudaGraphExec_t> graphs;
  int next_graph = 1;
  bool capturing = false;
  // While a capture records the body of a conditional node (conditionalBegin), work goes to
  // body_stream, which captures into that body.
  cudaStream_t body_stream = nullptr;
  bool in_body = false;
  // The stream an op or a memset enqueues on.
  cudaStream_t work() const { return in_body ? body_stream : stream; }
  // MDLM_CUDA_SYNC=1: wait after every op, so a fault inside a kernel names its op (debugging).
  bool sync_each_op = false;

  Device() {
    sync_each_op = mdlm::env_knob("MDLM_CUDA_SYNC") == "1";
    check_cuda(cudaGetDevice(&index), "cudaGetDevice");
    check_cuda(cudaSetDevice(index), "cudaSetDevice");
    check_cuda(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaStreamCreateWithFlags(&body_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check_lt(cublasLtCreate(&lt), "cublasLtCreate");
    workspace = device_alloc(kCublasLtWorkspace, "the cuBLASLt workspace");
    scratch = std::make_unique<Arena>(stream);
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() {
    // At process exit the driver may be gone already: best effort, errors ignored.
    cudaStreamSynchronize(stream);
    for (auto& [id, exec] : graphs) cudaGraphExecDestroy(exec);
    scratch.reset();
    cudaFree(workspace);
    cublasLtDestroy(lt);
    cudaStreamDestroy(body_stream);
    cudaStreamDestroy(stream);
  }
};

// Created on first use, so that probe() works (and says why not) without a usable device.
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

// Runs f, turning C++ exceptions into JS errors.
template <typename F>
auto guarded(const Napi::CallbackInfo& info, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw_js(info.Env(), e);
  }
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

std::string version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// The version a library reports through `symbol`, or why there is none. mdlm links neither cuDNN
// nor NCCL (attention is its own kernel; one GPU needs no collectives), so the probe dlopens them
// to say what the machine has for the paths that will use them.
template <typename Fn, typename Format>
std::string library_version(const char* soname, const char* symbol, Format format) {
  void* lib = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
  if (!lib) return std::string("none (") + soname + " not found)";
  const auto fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
  std::string v = fn ? format(fn) : std::string("unknown (") + soname + " has no " + symbol + ")";
  dlclose(lib);
  return v;
}

Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  Napi::Array ops = Napi::Array::New(env);
  const std::string names = mdlm::registered_ops();
  for (size_t start = 0, i = 0; start < names.size(); i++) {
    size_t end = names.find(',', start);
    if (end == std::string::npos) end = names.size();
    ops.Set(static_cast<uint32_t>(i), names.substr(start, end - start));
    start = end + 1;
  }
  out.Set("ops", ops);
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  out.Set("runtime", version(runtime));
  out.Set("driver", driver ? version(driver) : std::string("none"));
  const size_t lt = cublasLtGetVersion();
  out.Set("cublasLt", std::to_string(lt / 10000) + "." + std::to_string(lt / 100 % 100) + "." + std::to_string(lt % 100));
  // cudnnGetVersion: major·10000 + minor·100 + patch (cuDNN 9); ncclGetVersion: the same code.
  const auto dotted = [](long v) { return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100); };
  out.Set("cudnn", library_version<size_t (*)()>("libcudnn.so.9", "cudnnGetVersion", [&](auto fn) { return dotted(static_cast<long>(fn())); }));
  out.Set("nccl", library_version<int (*)(int*)>("libnccl.so.2", "ncclGetVersion", [&](auto fn) {
    int v = 0;
    return fn(&v) == 0 ? dotted(v) : std::string("unknown (ncclGetVersion failed)");
  }));
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    std::string reason;
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) reason = "no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)";
    else if (e == cudaErrorInsufficientDriver) reason = driver ? "the NVIDIA driver (CUDA " + version(driver) + ") is older than the CUDA runtime " + version(runtime) + " the addon was built with; update the driver" : "no NVIDIA driver is installed (libcuda.so not found), so there is no GPU to use";
    else reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
    out.Set("available", false);
    out.Set("reason", reason);
    return out;
  }
  int index = 0;
  cudaGetDevice(&index);
  cudaDeviceProp p{};
  const cudaError_t pe = cudaGetDeviceProperties(&p, index);
  if (pe != cudaSuccess) {
    out.Set("available", false);
    out.Set("reason", std::string("cudaGetDeviceProperties failed: ") + cudaGetErrorString(pe));
    return out;
  }
  out.Set("available", true);
  out.Set("device", std::string(p.name));
  out.Set("deviceIndex", index);
  out.Set("devices", count);
  out.Set("sm", std::to_string(p.major) + "." + std::to_string(p.minor));
  out.Set("memoryBytes", static_cast<double>(p.totalGlobalMem));
  out.Set("multiprocessors", p.multiProcessorCount);
  out.Set("bf16", p.major >= 8);
  out.Set("fp8", p.major * 10 + p.minor >= 89);
  return out;
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
    check_cuda(cudaMemcpyAsync(dst, src, view.ByteLength(), cudaMemcpyHostToDevice, d.stream), "upload: cudaMemcpyAsync");
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
    try {
      launch(call);
      if (d.sync_each_op && !d.capturing) check_cuda(cudaStreamSynchronize(d.stream), "kernel execution (MDLM_CUDA_SYNC=1)");
    } catch (const OpError&) {
      throw;
    } catch (const std::exception& e) {
      throw std::runtime_error("cuda: op '" + call.op + "': " + e.what());
    }
    return env.Undefined();
  });
}

// captureBegin(): record the stream's work from here on into a graph (nothing runs meanwhile).
// Thread-local mode: an unsafe call from this thread (a cudaMalloc, a synchronisation) fails the
// capture instead of running; the TypeScript side refuses those before they reach here.
Napi::Value CaptureBegin(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Device& d = device(info.Env());
    if (d.capturing) throw std::runtime_error("captureBegin: a capture is already under way");
    d.scratch->settle();
    check_cuda(cudaStreamBeginCapture(d.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    d.capturing = true;
    d.scratch->set_capturing(true);
    return info.Env().Undefined();
  });
}

// Ends a conditional body's capture, if one is under way (its graph belongs to the node).
void end_body(Device& d) {
  if (!d.in_body) return;
  d.in_body = false;
  cudaGraph_t body = nullptr;
  check_cuda(cudaStreamEndCapture(d.body_stream, &body), "conditionalEnd: cudaStreamEndCapture");
}

// conditionalBegin(count, threshold): the work enqueued until conditionalEnd() runs only when the
// i32 at device pointer `count` exceeds `threshold` when the stream gets there. While a graph is
// captured that is a conditional node (decided by a one-thread kernel, set_above); outside a
// capture the work simply runs, so it must be harmless when not needed.
Napi::Value ConditionalBegin(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Device& d = device(info.Env());
    const auto* count = static_cast<const int32_t*>(pointer_arg(info[0], "conditionalBegin"));
    const int32_t threshold = info[1].As<Napi::Number>().Int32Value();
    if (d.in_body) throw std::runtime_error("conditionalBegin: conditional regions do not nest");
    if (!d.capturing) return info.Env().Undefined();
    cudaStreamCaptureStatus status;
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamGetCaptureInfo(d.stream, &status, nullptr, &graph), "conditionalBegin: cudaStreamGetCaptureInfo");
    cudaGraphConditionalHandle handle;
    check_cuda(cudaGraphConditionalHandleCreate(&handle, graph, 0, cudaGraphCondAssignDefault), "cudaGraphConditionalHandleCreate");
    launch_set_above(handle, count, threshold, d.stream);
    const cudaGraphNode_t* deps = nullptr;
    size_t ndeps = 0;
    check_cuda(cudaStreamGetCaptureInfo(d.stream, &status, nullptr, &graph, &deps, nullptr, &ndeps), "conditionalBegin: cudaStreamGetCaptureInfo");
    cudaGraphNodeParams params{};
    params.type = cudaGraphNodeTypeConditional;
    params.conditional.handle = handle;
    params.conditional.type = cudaGraphCondTypeIf;
    params.conditional.size = 1;
    cudaGraphNode_t node = nullptr;
    check_cuda(cudaGraphAddNode(&node, graph, deps, nullptr, ndeps, &params), "conditionalBegin: cudaGraphAddNode");
    check_cuda(cudaStreamUpdateCaptureDependencies(d.stream, &node, nullptr, 1, cudaStreamSetCaptureDependencies),
               "conditionalBegin: cudaStreamUpdateCaptureDependencies");
    check_cuda(cudaStreamBeginCaptureToGraph(d.body_stream, params.conditional.phGraph_out[0], nullptr, nullptr, 0, cudaStreamCaptureModeThreadLocal),
               "conditionalBegin: cudaStreamBeginCaptureToGraph");
    d.in_body = true;
    return info.Env().Undefined();
  });
}

Napi::Value ConditionalEnd(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    end_body(device(info.Env()));
    return info.Env().Undefined();
  });
}

// Ends the capture; returns the graph (nullptr when the capture was invalidated).
cudaGraph_t end_capture(Device& d) {
  if (d.in_body) throw std::runtime_error("captureEnd: a conditional region is still open (conditionalEnd missing)");
  d.capturing = false;
  d.scratch->set_capturing(false);
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(d.stream, &graph);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    check_cuda(e, "cudaStreamEndCapture");
  }
  return graph;
}

// captureEnd() -> graph id: instantiate what was captured.
Napi::Value CaptureEnd(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Device& d = device(info.Env());
    if (!d.capturing) throw std::runtime_error("captureEnd: no capture is under way");
    cudaGraph_t graph = end_capture(d);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check_cuda(e, "cudaGraphInstantiate");
    const int id = d.next_graph++;
    d.graphs[id] = exec;
    return Napi::Number::New(info.Env(), id);
  });
}

// captureAbort(): end a capture that failed part way and drop what it holds.
Napi::Value CaptureAbort(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Device& d = device(info.Env());
    if (d.in_body) {
      cudaGraph_t body = nullptr;
      d.in_body = false;
      cudaStreamEndCapture(d.body_stream, &body);
      cudaGetLastError();
    }
    if (d.capturing) {
      cudaGraph_t graph = nullptr;
      d.capturing = false;
      d.scratch->set_capturing(false);
      cudaStreamEndCapture(d.stream, &graph);
      cudaGetLastError();  // an invalidated capture's error is the one already reported
      if (graph) cudaGraphDestroy(graph);
    }
    return info.Env().Undefined();
  });
}

cudaGraphExec_t graph_arg(Device& d, const Napi::Value& v, const char* what) {
  const int id = v.As<Napi::Number>().Int32Value();
  auto it = d.graphs.find(id);
  if (it == d.graphs.end()) throw std::runtime_error(std::string(what) + ": no graph " + std::to_string(id));
  return it->second;
}

// graphLaunch(id): enqueue the graph's work on the stream, after earlier work.
Napi::Value GraphLaunch(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Device& d = device(info.Env());
    check_cuda(cudaGraphLaunch(graph_arg(d, info[0], "graphLaunch"), d.stream), "cudaGraphLaunch");
    if (d.sync_each_op) check_cuda(cudaStreamSynchronize(d.stream), "graph execution (MDLM_CUDA_SYNC=1)");
    return info.Env().Undefined();
  });
}

Napi::Value GraphDestroy(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Device& d = device(info.Env());
    cudaGraphExec_t exec = graph_arg(d, info[0], "graphDestroy");
    // Launches already enqueued keep using it: wait for them first.
    check_cuda(cudaStreamSynchronize(d.stream), "graphDestroy: cudaStreamSynchronize");
    cudaGraphExecDestroy(exec);
    d.graphs.erase(info[0].As<Napi::Number>().Int32Value());
    return info.Env().Undefined();
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

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("probe", Napi::Function::New(env, Probe, "probe"));
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

}  // namespace

NODE_API_MODULE(mdlm_cuda, Init)
