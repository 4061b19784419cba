// The launcher registry and OpCall's accessors (cuda/op.h). Plain C++: no Node-API here, so the
// kernels and this file build the same with or without the addon.
#include "op.h"

#include <cmath>
#include <sstream>

namespace mdlm {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::fp8e4m3: return "fp8e4m3";
    case DType::fp8e5m2: return "fp8e5m2";
    case DType::i32: return "i32";
    case DType::u32: return "u32";
  }
  return "unknown";
}

namespace {

// Function-local so that registrars in other translation units can run before any static of
// this file is initialised.
std::map<std::string, Launcher>& registry() {
  static std::map<std::string, Launcher> r;
  return r;
}

}  // namespace

Registrar::Registrar(const char* op, Launcher fn) {
  // Two kernels registering one op name is a build mistake; fail loudly at load time.
  if (!registry().emplace(op, fn).second) throw std::logic_error(std::string("mdlm: op '") + op + "' registered twice");
}

Launcher find_launcher(const std::string& op) {
  auto it = registry().find(op);
  return it == registry().end() ? nullptr : it->second;
}

std::string registered_ops() {
  std::string out;
  for (const auto& [name, fn] : registry()) {
    if (!out.empty()) out += ',';
    out += name;
  }
  return out;
}

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

const Arg& OpCall::arg(ArgName name) const {
  auto it = args.find(name.str);
  if (it == args.end()) throw std::runtime_error(op + ": the launcher asked for argument '" + name.str + "', which the call does not pass");
  return it->second;
}

double OpCall::num(AttrName name) const {
  auto it = nums.find(name.str);
  if (it == nums.end()) throw std::runtime_error(op + ": the launcher asked for numeric attribute '" + name.str + "', which the call does not pass");
  return it->second;
}

int64_t OpCall::i64(AttrName name) const {
  const double v = num(name);
  // Integers beyond 2^53 are not exact in the double they arrive in.
  if (!(std::floor(v) == v && std::fabs(v) <= 9007199254740992.0)) {
    std::ostringstream m;
    m << op << ": attribute '" << name.str << "' is " << v << "; expected an integer";
    throw OpError("BAD_ARGUMENT", m.str());
  }
  return static_cast<int64_t>(v);
}

int OpCall::i32(AttrName name) const {
  const int64_t v = i64(name);
  if (v < INT32_MIN || v > INT32_MAX) {
    throw OpError("BAD_ARGUMENT", op + ": attribute '" + name.str + "' is " + std::to_string(v) + "; the CUDA kernel takes at most 2^31 - 1");
  }
  return static_cast<int>(v);
}

bool OpCall::flag(AttrName name) const { return num(name) != 0.0; }

const std::string& OpCall::str(AttrName name) const {
  auto it = strs.find(name.str);
  if (it == strs.end()) throw std::runtime_error(op + ": the launcher asked for string attribute '" + name.str + "', which the call does not pass");
  return it->second;
}

DType OpCall::float_dtype(ArgName name, std::initializer_list<DType> allowed) const {
  const DType d = arg(name).dtype;
  std::string list;
  for (DType a : allowed) {
    if (a == d) return d;
    list += (list.empty() ? "" : " or ") + std::string(dtype_name(a));
  }
  throw OpError("UNSUPPORTED_DTYPE", op + ": the CUDA kernel takes " + list + " for '" + name.str + "', got " + dtype_name(d));
}

void OpCall::unsupported(const std::string& what) const {
  throw OpError("UNSUPPORTED_OP", op + ": the CUDA kernel does not support " + what);
}

}  // namespace mdlm
