// f32 <-> f16 / bf16 on raw bits, round to nearest even, bit for bit as src/convert.ts. Pure
// integer arithmetic: no float op touches the values, so no flush-to-zero or NaN canonicalising.

fn f32_to_f16_bits(b: u32) -> u32 {
  let sign = (b >> 16u) & 0x8000u;
  let a = b & 0x7fffffffu;
  if (a > 0x7f800000u) { return 0x7e00u; } // NaN: convert.ts gives the positive quiet NaN
  if (a >= 0x477ff000u) { return sign | 0x7c00u; } // >= 65520 (incl. inf) rounds to inf
  if (a >= 0x38800000u) { // normal f16: round at mantissa bit 13, the carry may bump the exponent
    let r = a + 0xfffu + ((a >> 13u) & 1u);
    return sign | ((r - (112u << 23u)) >> 13u);
  }
  let e = a >> 23u;
  if (e <= 101u) { return sign; } // below 2^-25 (ties at 2^-25 go to even, i.e. 0)
  // Subnormal f16: the significand in units of 2^-24, shifted right by s in [14, 24].
  let sig = (a & 0x7fffffu) | 0x800000u;
  let s = 126u - e;
  let q = sig >> s;
  let rest = sig & ((1u << s) - 1u);
  let half = 1u << (s - 1u);
  let up = rest > half || (rest == half && (q & 1u) == 1u);
  return sign | (q + select(0u, 1u, up));
}

fn f16_bits_to_f32(h: u32) -> u32 {
  let sign = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let mant = h & 0x3ffu;
  if (e == 31u) { return select(0x7fc00000u, sign | 0x7f800000u, mant == 0u); } // NaN as JS gives it
  if (e != 0u) { return sign | ((e + 112u) << 23u) | (mant << 13u); }
  if (mant == 0u) { return sign; }
  let p = firstLeadingBit(mant); // subnormal: mant * 2^-24 = 1.f * 2^(p - 24)
  return sign | ((p + 103u) << 23u) | ((mant << (23u - p)) & 0x7fffffu);
}

fn f32_to_bf16_bits(b: u32) -> u32 {
  if ((b & 0x7fffffffu) > 0x7f800000u) { return ((b >> 16u) | 0x40u) & 0xffffu; } // quiet NaN
  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

fn bf16_bits_to_f32(h: u32) -> u32 {
  return (h & 0xffffu) << 16u;
}
