// reduce: out[r] = sum / mean / max |x| / sum of squares of row r of x [rows, cols], in f32 with
// a fixed combination order (cuda/reduce.cuh): one pass, or two when few long rows are split.
#include "reduce.cuh"

MDLM_OP(reduce) {
  using namespace mdlm;
  const int64_t rows = call.i64("rows"_attr), cols = call.i64("cols"_attr);
  const std::string& kind = call.str("kind"_attr);
  const bool use_max = kind == "maxabs";
  const ReduceMap map = kind == "sumsq" ? ReduceMap::square : use_max ? ReduceMap::abs : ReduceMap::identity;
  if (!use_max && map == ReduceMap::identity && kind != "sum" && kind != "mean") call.unsupported("kind '" + kind + "'");
  const float scale = kind == "mean" ? static_cast<float>(1.0 / static_cast<double>(cols)) : 1.0f;
  const auto* x = static_cast<const float*>(call.arg("x"_arg).ptr);
  auto* out = static_cast<float*>(call.arg("out"_arg).ptr);
  const int64_t segments = reduce_segments_for(rows, cols);
  if (segments == 1) {
    reduce_segments(call, x, out, {rows, cols, 1, map, use_max, scale});
    return;
  }
  auto* partials = static_cast<float*>(call.scratch->get(sizeof(float) * rows * segments));
  reduce_segments(call, x, partials, {rows, cols, segments, map, use_max, 1.0f});
  reduce_segments(call, partials, out, {rows, segments, 1, ReduceMap::identity, use_max, scale});
}
