// fp8 (OCP E4M3 and E5M2) <-> f32 on raw bits, round to nearest even, bit for bit as
// src/convert.ts, and the power-of-two scale logic of src/ops/fp8.ts. Integer arithmetic only:
// no float op touches a value, so no flush-to-zero, NaN canonicalising or implementation-defined
// accuracy (WGSL leaves division, log2 and max of floats open).

// The fp8 code of (the f32 with bits b) · 2^k, rounded to nearest even on the format's grid.
// Past the largest finite value: ±max when `saturate` (quantisation clamps before rounding; E4M3
// always saturates, having no infinity), else E5M2's ±infinity. NaN gives the format's NaN
// (positive), an infinity ±max or ±infinity as a finite overflow does.
fn fp8_encode(b: u32, k: i32, e5m2: bool, saturate: bool) -> u32 {
  let m = select(3u, 2u, e5m2);
  let bias = select(7, 15, e5m2);
  let max_code = select(0x7eu, 0x7bu, e5m2);
  let overflow = select(max_code, 0x7cu, e5m2 && !saturate);
  let sign = (b >> 24u) & 0x80u;
  let a = b & 0x7fffffffu;
  if (a > 0x7f800000u) { return select(0x7fu, 0x7eu, e5m2); }
  if (a == 0x7f800000u) { return sign | overflow; }
  if (a == 0u) { return sign; }
  // |x| = sig · 2^(e - 23) with sig in [2^23, 2^24), f32 subnormals normalised too.
  var e = i32(a >> 23u) - 127;
  var sig = (a & 0x7fffffu) | 0x800000u;
  if ((a >> 23u) == 0u) {
    let p = firstLeadingBit(a);
    sig = a << (23u - p);
    e = i32(p) - 149;
  }
  let ex = e + k;
  // The grid |x| · 2^k rounds on: its binade's (2^(ex - m)), or the subnormals' below the normals.
  // q = |x| · 2^k / 2^(g - m), rounded: sig shifted right by s (at 25 and beyond q is 0 and the
  // rest under half, so s stops there).
  let g = max(ex, 1 - bias);
  let s = u32(min(23 + g - i32(m) - ex, 25));
  let q = sig >> s;
  let rest = sig & ((1u << s) - 1u);
  let half = 1u << (s - 1u);
  let up = rest > half || (rest == half && (q & 1u) == 1u);
  // Normals have q in [2^m, 2^(m+1)] (the top carries into the next exponent), subnormals q < 2^m:
  // both encode as ((g + bias - 1) << m) + q.
  let code = (u32(g + bias - 1) << m) + q + select(0u, 1u, up);
  return sign | select(code, overflow, code > max_code);
}

// The f32 bits of an fp8 code (every fp8 value is a normal f32, or zero).
fn fp8_decode(c: u32, e5m2: bool) -> u32 {
  let m = select(3u, 2u, e5m2);
  let bias = select(7u, 15u, e5m2);
  let sign = (c & 0x80u) << 24u;
  let ex = (c & 0x7fu) >> m;
  let mant = c & ((1u << m) - 1u);
  if (e5m2 && ex == 31u) { return select(0x7fc00000u, sign | 0x7f800000u, mant == 0u); }
  if (!e5m2 && (c & 0x7fu) == 0x7fu) { return 0x7fc00000u; }
  if (ex == 0u) {
    if (mant == 0u) { return sign; }
    // mant · 2^(1 - bias - m) = 1.f · 2^(p + 1 - bias - m)
    let p = firstLeadingBit(mant);
    return sign | ((p + 128u - bias - m) << 23u) | ((mant << (23u - p)) & 0x7fffffu);
  }
  return sign | ((ex + 127u - bias) << 23u) | (mant << (23u - m));
}

// Scale exponents stay within [-MAX_SCALE_EXP, MAX_SCALE_EXP] (fp8.ts).
const MAX_SCALE_EXP = 126;

// pow2Scale (fp8.ts) on bits: the largest power of two s with amax · s <= the format's max,
// divided by 2^margin; `previous` when amax is zero, negative, infinite or NaN. With
// amax = mant · 2^E and max = 1.75 · 2^maxExp, s = 2^(maxExp - E), halved when mant > 1.75; an
// amax below the f32 normals takes the largest scale.
fn fp8_pow2_scale(amax: u32, e5m2: bool, margin: u32, previous: u32) -> u32 {
  let exp = amax >> 23u; // past 0xff when the sign is set
  if (amax == 0u || exp >= 0xffu) { return previous; }
  var k = MAX_SCALE_EXP;
  if (exp != 0u) {
    k = select(8, 15, e5m2) - (i32(exp) - 127) - select(0, 1, (amax & 0x7fffffu) > 0x600000u) - i32(margin);
  }
  return u32(clamp(k, -MAX_SCALE_EXP, MAX_SCALE_EXP) + 127) << 23u;
}

// inversePow2 (fp8.ts): 1 / scale for a power-of-two scale, from its exponent bits.
fn fp8_inverse_pow2(scale: u32) -> u32 {
  return bitcast<u32>((254 - i32((scale >> 23u) & 0xffu)) << 23u);
}
