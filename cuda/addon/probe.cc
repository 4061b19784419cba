// The addon's capability probe (mdlm probe, backend selection): the CUDA runtime and driver,
// cuBLASLt, cuDNN and NCCL versions, the registered ops, and the device, or why there is none.
// It works without a usable device: it never creates the addon's Device.
#include <dlfcn.h>

#include "device.h"

namespace mdlm::addon {
namespace {

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

}  // namespace

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

}  // namespace mdlm::addon
