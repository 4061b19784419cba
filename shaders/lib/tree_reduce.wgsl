// Deterministic tree reduction in workgroup memory (fixed pairing order), for 256-thread groups
// split into aligned spans of `span` lanes (a power of two <= 256). Every lane gets its span's
// total (a sum, or a max when useMax). Call from uniform control flow: it has barriers.
var<workgroup> tree: array<f32, 256>;

fn tree_reduce(lid: u32, value: f32, span: u32, useMax: bool) -> f32 {
  tree[lid] = value;
  workgroupBarrier();
  for (var s = span / 2u; s > 0u; s = s / 2u) {
    if (lid % span < s) {
      let a = tree[lid];
      let b = tree[lid + s];
      tree[lid] = select(a + b, max(a, b), useMax);
    }
    workgroupBarrier();
  }
  return tree[lid - lid % span];
}
