// Philox4x32-10, bit-identical to src/rng/philox.ts: counter c, key k -> four u32 words.
// WGSL has no 64-bit integers, so the high word of each product comes from 16-bit halves.

fn philox_mulhi(a: u32, b: u32) -> u32 {
  let al = a & 0xffffu;
  let ah = a >> 16u;
  let bl = b & 0xffffu;
  let bh = b >> 16u;
  let ll = al * bl;
  let lh = al * bh;
  let hl = ah * bl;
  let hh = ah * bh;
  let mid = (ll >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
  return hh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u);
}

fn philox4x32(counter: vec4u, key: vec2u) -> vec4u {
  var c = counter;
  var k = key;
  for (var r = 0u; r < 10u; r++) {
    if (r > 0u) {
      k = k + vec2u(0x9e3779b9u, 0xbb67ae85u);
    }
    let hi0 = philox_mulhi(0xd2511f53u, c.x);
    let lo0 = 0xd2511f53u * c.x;
    let hi1 = philox_mulhi(0xcd9e8d57u, c.z);
    let lo1 = 0xcd9e8d57u * c.z;
    c = vec4u(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
  }
  return c;
}

// A u32 to a float in [0, 1) with 24 random bits; exact in f32 like uniform01 in philox.ts.
fn uniform01(u: u32) -> f32 {
  return f32(u >> 8u) * 5.9604644775390625e-8;
}
