// The workgroup counts of a dispatch the WebGPU backend makes conditional (Backend.whenAbove):
// the given counts when the i32 count exceeds the threshold, else none, read by the next
// dispatchWorkgroupsIndirect.

struct Params { threshold: i32, x: u32, y: u32, z: u32 }

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> count: array<i32>;
@group(0) @binding(2) var<storage, read_write> args: array<u32>;

@compute @workgroup_size(1)
fn main() {
  let run = count[0] > params.threshold;
  args[0] = select(0u, params.x, run);
  args[1] = select(0u, params.y, run);
  args[2] = select(0u, params.z, run);
}
