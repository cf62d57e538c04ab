//! ggml block quantisations decoded to f32: Q8_0 and the K-quants Q4_K, Q5_K and Q6_K (256-value
//! super-blocks). The results are bit for bit those of ggml's reference `dequantize_row_*` and of
//! gguf-py: every product is rounded in the same order (block scale × sub-block scale, then × quant,
//! then − min), and Rust never fuses a multiply and an add on its own.

/// Values per K-quant super-block.
const QK_K: usize = 256;
/// Values per Q8_0 block.
const QK8_0: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockFormat {
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
}

impl BlockFormat {
    /// ggml's name, as llama.cpp and gguf-py print it.
    pub fn name(self) -> &'static str {
        match self {
            BlockFormat::Q8_0 => "Q8_0",
            BlockFormat::Q4K => "Q4_K",
            BlockFormat::Q5K => "Q5_K",
            BlockFormat::Q6K => "Q6_K",
        }
    }

    pub fn block_values(self) -> usize {
        match self {
            BlockFormat::Q8_0 => QK8_0,
            _ => QK_K,
        }
    }

    pub fn block_bytes(self) -> usize {
        match self {
            BlockFormat::Q8_0 => 2 + QK8_0,
            // d, dmin, 12 bytes of packed 6-bit scales and mins, 4-bit quants.
            BlockFormat::Q4K => 2 + 2 + 12 + QK_K / 2,
            // As Q4_K, plus one high bit per value.
            BlockFormat::Q5K => 2 + 2 + 12 + QK_K / 8 + QK_K / 2,
            // Low 4 bits, high 2 bits, 16 signed 8-bit scales, d.
            BlockFormat::Q6K => QK_K / 2 + QK_K / 4 + QK_K / 16 + 2,
        }
    }
}

/// Decodes whole blocks; `data.len()` must be a multiple of the block size (the caller checks).
pub fn dequantize(format: BlockFormat, data: &[u8]) -> Vec<f32> {
    let blocks = data.len() / format.block_bytes();
    let mut out = vec![0f32; blocks * format.block_values()];
    let decode_block: fn(&[u8], &mut [f32]) = match format {
        BlockFormat::Q8_0 => q8_0,
        BlockFormat::Q4K => q4_k,
        BlockFormat::Q5K => q5_k,
        BlockFormat::Q6K => q6_k,
    };
    for (block, values) in data.chunks_exact(format.block_bytes()).zip(out.chunks_exact_mut(format.block_values())) {
        decode_block(block, values);
    }
    out
}

/// IEEE half to single precision; exact, subnormals included.
fn f16(bytes: &[u8]) -> f32 {
    let bits = u16::from_le_bytes([bytes[0], bytes[1]]) as u32;
    let sign = (bits >> 15) << 31;
    let exponent = (bits >> 10) & 0x1f;
    let mantissa = bits & 0x3ff;
    let magnitude = match exponent {
        0 => mantissa as f32 * (1.0 / (1u32 << 24) as f32),
        0x1f => f32::from_bits(0x7f80_0000 | mantissa << 13),
        _ => f32::from_bits((exponent + 127 - 15) << 23 | mantissa << 13),
    };
    f32::from_bits(magnitude.to_bits() | sign)
}

fn q8_0(block: &[u8], y: &mut [f32]) {
    let d = f16(&block[..2]);
    for (value, &q) in y.iter_mut().zip(&block[2..]) {
        *value = q as i8 as f32 * d;
    }
}

/// Scale and min of sub-block `j` (0..8), 6 bits each: sub-blocks 0-3 sit in the low 6 bits of bytes
/// 0-3 (scales) and 4-7 (mins); 4-7 take their low 4 bits from bytes 8-11 and their top 2 bits from the
/// spare top bits of bytes 0-7.
fn scale_min_k4(j: usize, packed: &[u8]) -> (u8, u8) {
    if j < 4 {
        (packed[j] & 63, packed[j + 4] & 63)
    } else {
        ((packed[j + 4] & 0x0f) | (packed[j - 4] >> 6) << 4, (packed[j + 4] >> 4) | (packed[j] >> 6) << 4)
    }
}

/// The per-sub-block (scale, min) pairs of a Q4_K or Q5_K block, already multiplied by d and dmin.
fn k4_scales(block: &[u8]) -> [(f32, f32); 8] {
    let (d, dmin, packed) = (f16(&block[0..2]), f16(&block[2..4]), &block[4..16]);
    std::array::from_fn(|j| {
        let (scale, min) = scale_min_k4(j, packed);
        (d * scale as f32, dmin * min as f32)
    })
}

/// Four groups of 64 values; each reads 32 quant bytes, low nibbles first, then high nibbles.
fn q4_k(block: &[u8], y: &mut [f32]) {
    let scales = k4_scales(block);
    for (group, (qs, out)) in block[16..].chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let ((d_low, m_low), (d_high, m_high)) = (scales[2 * group], scales[2 * group + 1]);
        for (l, &q) in qs.iter().enumerate() {
            out[l] = d_low * (q & 0x0f) as f32 - m_low;
            out[l + 32] = d_high * (q >> 4) as f32 - m_high;
        }
    }
}

/// Q4_K's layout, plus a fifth bit per value: bit `i` of `qh[l]` belongs to value `l` of sub-block `i`.
fn q5_k(block: &[u8], y: &mut [f32]) {
    let scales = k4_scales(block);
    let qh = &block[16..48];
    for (group, (qs, out)) in block[48..].chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let ((d_low, m_low), (d_high, m_high)) = (scales[2 * group], scales[2 * group + 1]);
        let (bit_low, bit_high) = (1u8 << (2 * group), 1u8 << (2 * group + 1));
        for (l, &q) in qs.iter().enumerate() {
            let high = |bit: u8| if qh[l] & bit != 0 { 16 } else { 0 };
            out[l] = d_low * ((q & 0x0f) + high(bit_low)) as f32 - m_low;
            out[l + 32] = d_high * ((q >> 4) + high(bit_high)) as f32 - m_high;
        }
    }
}

/// Two halves of 128 values, each from 64 low-nibble bytes, 32 high-bit bytes (2 bits for each of 4
/// values) and 8 signed scales, one per 16 values; quants are 6-bit with an offset of 32.
fn q6_k(block: &[u8], y: &mut [f32]) {
    let (ql, qh, scales, d) = (&block[..128], &block[128..192], &block[192..208], f16(&block[208..210]));
    for half in 0..2 {
        let (ql, qh, out) = (&ql[64 * half..64 * half + 64], &qh[32 * half..32 * half + 32], &mut y[128 * half..128 * half + 128]);
        let scale = |i: usize| d * scales[8 * half + i] as i8 as f32;
        for l in 0..32 {
            let quant = |low: u8, shift: u32| (low | ((qh[l] >> shift) & 3) << 4) as i32 - 32;
            let is = l / 16;
            out[l] = scale(is) * quant(ql[l] & 0x0f, 0) as f32;
            out[l + 32] = scale(is + 2) * quant(ql[l + 32] & 0x0f, 2) as f32;
            out[l + 64] = scale(is + 4) * quant(ql[l] >> 4, 4) as f32;
            out[l + 96] = scale(is + 6) * quant(ql[l + 32] >> 4, 6) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_convert_exactly() {
        let subnormals = [(0x0001, 2f32.powi(-24)), (0x03ff, 1023.0 * 2f32.powi(-24))];
        let normals = [(0x3c00, 1.0), (0xc000, -2.0), (0x7bff, 65504.0), (0x8000, -0.0), (0x3555, 0.333_251_95)];
        let cases: Vec<(u16, f32)> = subnormals.into_iter().chain(normals).collect();
        for (bits, expected) in cases {
            assert_eq!(f16(&bits.to_le_bytes()).to_bits(), expected.to_bits(), "{bits:#06x}");
        }
        assert_eq!(f16(&0xfc00u16.to_le_bytes()), f32::NEG_INFINITY);
        assert!(f16(&0x7e00u16.to_le_bytes()).is_nan());
    }

    #[test]
    fn block_sizes_are_ggmls() {
        let formats = [BlockFormat::Q8_0, BlockFormat::Q4K, BlockFormat::Q5K, BlockFormat::Q6K];
        let sizes: Vec<usize> = formats.map(BlockFormat::block_bytes).into();
        assert_eq!(sizes, [34, 144, 176, 210]);
    }
}
