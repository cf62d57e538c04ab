//! Rotary position embeddings as each variant does them, with the angles computed directly per window
//! shape (the original 3B builds a 1024×128×128 angle table first: 8.5 GB at the real head size).
//! Positions are window-local; an angle per axis and frequency is repeated for its channel pair, the
//! axes are concatenated in `(t, h, w)` order, and only the first `6 × freqs` channels of a head rotate.
use tch::{Kind, Tensor};

use super::config::DitVariant;

pub struct Rope {
    variant: DitVariant,
    /// The checkpoint's `rope.rope.freqs` buffer (3B: `10000^(-2k/d)`, 7B: `π·linspace(1, 128, n)`).
    freqs: Tensor,
}

/// `cos` and `sin` of the angles, `[tokens, 1, rotated channels]`, broadcast over heads; the sines carry
/// the rotation's signs (`−sin` on even channels, `+sin` on odd), so a pair-swapped copy times them is
/// the rotated half.
pub struct Rotation {
    cos: Tensor,
    signed_sin: Tensor,
}

impl Rope {
    pub fn new(variant: DitVariant, freqs: Tensor) -> Self {
        Self { variant, freqs: freqs.to_kind(Kind::Float) }
    }

    /// Video tokens of a window of `shape`, in `(t, h, w)` order. The 3B counts time after the text
    /// (`text_len + t`); the 7B spreads each axis over `[-1, 1]`.
    pub fn video(&self, shape: [i64; 3], text_len: i64) -> Rotation {
        let device = self.freqs.device();
        let positions: Vec<Tensor> = (0..3)
            .map(|axis| match self.variant {
                DitVariant::ThreeB => Tensor::arange(shape[axis], (Kind::Float, device)) + if axis == 0 { text_len as f64 } else { 0.0 },
                DitVariant::SevenB => Tensor::linspace(-1.0, 1.0, shape[axis], (Kind::Float, device)),
            })
            .collect();
        let per_axis: Vec<Tensor> = positions.iter().map(|p| self.angles(p)).collect();
        let [t, h, w] = shape;
        let grid = |axis: usize, view: [i64; 3]| per_axis[axis].view([view[0], view[1], view[2], -1]).expand([t, h, w, -1], false);
        let angles = Tensor::cat(&[grid(0, [t, 1, 1]), grid(1, [1, h, 1]), grid(2, [1, 1, w])], -1);
        Rotation::of(&angles.reshape([t * h * w, -1]))
    }

    /// Text tokens (3B only): token `j` sits at `(j, j, j)`.
    pub fn text(&self, len: i64) -> Rotation {
        let angles = self.angles(&Tensor::arange(len, (Kind::Float, self.freqs.device())));
        Rotation::of(&Tensor::cat(&[&angles, &angles, &angles], -1))
    }

    pub fn rotates_text(&self) -> bool {
        self.variant == DitVariant::ThreeB
    }

    /// `[n]` positions → `[n, 2·freqs]` angles, each repeated for its channel pair.
    fn angles(&self, positions: &Tensor) -> Tensor {
        let angles = positions.unsqueeze(-1) * self.freqs.unsqueeze(0);
        angles.repeat_interleave_self_int(2, -1, None)
    }
}

impl Rotation {
    /// From angles `[tokens, rotated channels]` (each repeated for its pair).
    pub fn of(angles: &Tensor) -> Self {
        let channels = *angles.size().last().expect("angles per channel");
        let signs = Tensor::from_slice(&[-1f32, 1.0]).to_device(angles.device()).repeat([channels / 2]);
        Self { cos: angles.cos().unsqueeze(1), signed_sin: (angles.sin() * signs).unsqueeze(1) }
    }

    /// `x`: `[..., tokens, heads, head_dim]`; rotates pairs `(2i, 2i+1)` of the leading channels in fp32.
    pub fn apply(&self, x: &Tensor) -> Tensor {
        let rotated = *self.cos.size().last().unwrap();
        let head_dim = *x.size().last().unwrap();
        let x32 = x.to_kind(Kind::Float);
        let (head, tail) = (x32.narrow(-1, 0, rotated), x32.narrow(-1, rotated, head_dim - rotated));
        let mut pairs = head.size();
        pairs.pop();
        pairs.extend([rotated / 2, 2]);
        // (x[2i+1], x[2i]) for each pair; with the signed sines: (−x[2i+1]·sin, x[2i]·sin).
        let swapped = head.view(pairs.as_slice()).flip([-1]).view(head.size().as_slice());
        let mut out = &head * &self.cos;
        let _ = out.addcmul_(&swapped, &self.signed_sin);
        Tensor::cat(&[out, tail], -1).to_kind(x.kind())
    }
}
