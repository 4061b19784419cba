// The addon's CUDA graph bindings: record the stream's work (captureBegin, captureEnd), with
// conditional regions (conditionalBegin, conditionalEnd: a conditional node decided on the
// device), and replay it (graphLaunch). src/backend/cuda/cuda.ts's record() and whenAbove().
#include "device.h"

#include "../knobs.h"

namespace mdlm::addon {

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
    if (knobs::sync_each_op()) check_cuda(cudaStreamSynchronize(d.stream), "graph execution (MDLM_CUDA_SYNC=1)");
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

}  // namespace mdlm::addon
