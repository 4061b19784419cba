// The addon's state and the helpers its bindings share. One device (CUDA_VISIBLE_DEVICES picks
// it), one stream, one scratch arena, one cuBLASLt handle with its workspace, the CUDA graphs
// recorded from JavaScript, and the kernel settings (cuda/op.h) every call gets. Pointers travel
// to JavaScript as BigInt.
//
// Errors: an OpError (a user mistake the kernel detected) becomes a JS Error with `mdlmCode` set,
// which the TypeScript side rethrows as an MdlmError; CUDA and cuBLASLt failures become plain
// Errors naming the op and the kernel or call.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <napi.h>

#include <map>
#include <memory>
#include <string>

#include "../op.h"
#include "arena.h"

namespace mdlm::addon {

// cuBLASLt's recommended workspace on Hopper; enough for every algorithm it picks on Ampere too.
constexpr size_t kCublasLtWorkspace = 32u << 20;

void check_lt(cublasStatus_t s, const char* what);

struct Device {
  int index = 0;
  cudaDeviceProp prop{};
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  std::unique_ptr<Arena> scratch;
  KernelSettings settings;
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

  Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device();
};

// Created on first use, so that probe() works (and says why not) without a usable device.
Device& device(const Napi::Env& env);

[[noreturn]] void throw_js(const Napi::Env& env, const std::exception& e);

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

void* pointer_arg(const Napi::Value& v, const char* what);
size_t size_arg(const Napi::Value& v, const char* what);

// The bindings defined outside cuda/addon/addon.cc.
Napi::Value Probe(const Napi::CallbackInfo& info);           // probe.cc
Napi::Value CaptureBegin(const Napi::CallbackInfo& info);    // graph.cc
Napi::Value CaptureEnd(const Napi::CallbackInfo& info);
Napi::Value CaptureAbort(const Napi::CallbackInfo& info);
Napi::Value ConditionalBegin(const Napi::CallbackInfo& info);
Napi::Value ConditionalEnd(const Napi::CallbackInfo& info);
Napi::Value GraphLaunch(const Napi::CallbackInfo& info);
Napi::Value GraphDestroy(const Napi::CallbackInfo& info);

}  // namespace mdlm::addon
