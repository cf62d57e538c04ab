//! The SeedVR2 DiT's state-dict layout (key → shape) for any width, following the released models'
//! key scheme (reference README §2), and random weights in that layout: the bench needs a DiT at a
//! chosen size without a checkpoint, loaded through the same `from_tensors` as a real one.
use tch::{Device, Kind, Tensor};

use crate::models::seedvr2_dit::config::PATCH;
use crate::models::seedvr2_dit::DitVariant;

/// Channels of the DiT's video input (noise, condition latent, mask) and output (velocity).
const VID_IN_CHANNELS: i64 = 33;
const VID_OUT_CHANNELS: i64 = 16;
/// Width of the shipped text embeddings (`pos_emb.pt`).
pub const TXT_IN_DIM: i64 = 5120;
const TIME_SINUSOID_DIM: i64 = 256;
/// Standard deviation of the random linear weights and of the small learned vectors.
const WEIGHT_STD: f64 = 0.02;

/// The shape parameters a DiT checkpoint is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DitShape {
    pub variant: DitVariant,
    pub dim: i64,
    pub heads: i64,
    pub head_dim: i64,
    pub blocks: i64,
    /// 3B: blocks `0..mm_layers` keep separate `.vid.`/`.txt.` weights, the rest share `.all.`.
    /// The 7B has separate weights everywhere (this is then `blocks`).
    pub mm_layers: i64,
}

impl DitShape {
    /// `configs_3b/main.yaml` and `configs_7b/main.yaml` (README §2).
    pub fn released(variant: DitVariant) -> Self {
        match variant {
            DitVariant::ThreeB => Self { variant, dim: 2560, heads: 20, head_dim: 128, blocks: 32, mm_layers: 10 },
            DitVariant::SevenB => Self { variant, dim: 3072, heads: 24, head_dim: 128, blocks: 36, mm_layers: 36 },
        }
    }

    /// 3B SwiGLU: `int(2/3 · 4 · dim)` rounded up to a multiple of 256 (6912 at 2560); 7B: `4 · dim`.
    pub fn mlp_hidden(&self) -> i64 {
        match self.variant {
            DitVariant::ThreeB => 256 * ((8 * self.dim / 3 + 255) / 256),
            DitVariant::SevenB => 4 * self.dim,
        }
    }

    /// The RoPE base frequencies of one block (`rope.rope.freqs`): 3B a 'lang' rotary of
    /// `head_dim / 3` channels per axis, 7B a 'pixel' rotary of `(head_dim / 2) / 3` channels.
    pub fn rope_freqs(&self) -> Vec<f32> {
        match self.variant {
            DitVariant::ThreeB => {
                let per_axis = self.head_dim / 3;
                (0..per_axis / 2).map(|k| 10000f64.powf(-(2 * k) as f64 / per_axis as f64) as f32).collect()
            }
            DitVariant::SevenB => {
                let n = (self.head_dim / 2) / 3 / 2;
                // π · linspace(1, max_freq / 2, n) with max_freq 256.
                (0..n).map(|i| (std::f64::consts::PI * (1.0 + 127.0 * i as f64 / (n - 1).max(1) as f64)) as f32).collect()
            }
        }
    }

    fn separate(&self, block: i64) -> bool {
        self.variant == DitVariant::SevenB || block < self.mm_layers
    }

    /// Every tensor of the state dict with its shape, in the original's `state_dict()` order.
    pub fn tensor_layout(&self) -> Vec<(String, Vec<i64>)> {
        let (dim, inner, hidden) = (self.dim, self.heads * self.head_dim, self.mlp_hidden());
        let patch: i64 = PATCH.iter().product();
        let mut out: Vec<(String, Vec<i64>)> = Vec::new();
        let mut add = |name: String, shape: &[i64]| out.push((name, shape.to_vec()));
        add("vid_in.proj.weight".into(), &[dim, patch * VID_IN_CHANNELS]);
        add("vid_in.proj.bias".into(), &[dim]);
        add("txt_in.weight".into(), &[dim, TXT_IN_DIM]);
        add("txt_in.bias".into(), &[dim]);
        for (name, rows, cols) in [("proj_in", dim, TIME_SINUSOID_DIM), ("proj_hid", dim, dim), ("proj_out", 6 * dim, dim)] {
            add(format!("emb_in.{name}.weight"), &[rows, cols]);
            add(format!("emb_in.{name}.bias"), &[rows]);
        }
        for block in 0..self.blocks {
            let streams: &[&str] = if self.separate(block) { &["vid", "txt"] } else { &["all"] };
            let b = format!("blocks.{block}");
            for s in streams {
                add(format!("{b}.attn.proj_qkv.{s}.weight"), &[3 * inner, dim]);
            }
            for s in streams {
                add(format!("{b}.attn.proj_out.{s}.weight"), &[dim, inner]);
                add(format!("{b}.attn.proj_out.{s}.bias"), &[dim]);
            }
            for norm in ["norm_q", "norm_k"] {
                for s in streams {
                    add(format!("{b}.attn.{norm}.{s}.weight"), &[self.head_dim]);
                }
            }
            add(format!("{b}.attn.rope.rope.freqs"), &[self.rope_freqs().len() as i64]);
            for s in streams {
                match self.variant {
                    DitVariant::ThreeB => {
                        add(format!("{b}.mlp.{s}.proj_in_gate.weight"), &[hidden, dim]);
                        add(format!("{b}.mlp.{s}.proj_out.weight"), &[dim, hidden]);
                        add(format!("{b}.mlp.{s}.proj_in.weight"), &[hidden, dim]);
                    }
                    DitVariant::SevenB => {
                        add(format!("{b}.mlp.{s}.proj_in.weight"), &[hidden, dim]);
                        add(format!("{b}.mlp.{s}.proj_in.bias"), &[hidden]);
                        add(format!("{b}.mlp.{s}.proj_out.weight"), &[dim, hidden]);
                        add(format!("{b}.mlp.{s}.proj_out.bias"), &[dim]);
                    }
                }
            }
            for s in streams {
                for vector in ["attn_shift", "attn_scale", "attn_gate", "mlp_shift", "mlp_scale", "mlp_gate"] {
                    add(format!("{b}.ada.{s}.{vector}"), &[dim]);
                }
            }
        }
        if self.variant == DitVariant::ThreeB {
            add("vid_out_norm.weight".into(), &[dim]);
            add("vid_out_ada.out_shift".into(), &[dim]);
            add("vid_out_ada.out_scale".into(), &[dim]);
        }
        add("vid_out.proj.weight".into(), &[patch * VID_OUT_CHANNELS, dim]);
        add("vid_out.proj.bias".into(), &[patch * VID_OUT_CHANNELS]);
        out
    }

    /// Random fp32 weights in [`Self::tensor_layout`]: matrices and biases `N(0, 0.02²)`, norm weights
    /// and modulation scales `1 + N(0, 0.02²)`, RoPE buffers the real frequencies.
    pub fn random_tensors(&self, seed: i64) -> Vec<(String, Tensor)> {
        tch::manual_seed(seed);
        let options = (Kind::Float, Device::Cpu);
        let freqs = self.rope_freqs();
        self.tensor_layout()
            .into_iter()
            .map(|(name, shape)| {
                let noise = || Tensor::randn(shape.as_slice(), options) * WEIGHT_STD;
                let near_one = name.ends_with("_scale") || (shape.len() == 1 && name.ends_with("norm.weight"))
                    || name.contains(".norm_q.") || name.contains(".norm_k.");
                let tensor = if name.ends_with(".freqs") {
                    Tensor::from_slice(&freqs)
                } else if near_one {
                    noise() + 1.0
                } else {
                    noise()
                };
                (name, tensor)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `name<TAB>[shape]<TAB>dtype<TAB>numel` lines of the reference key lists (`#` lines are comments).
    fn reference_layout(file: &str) -> Vec<(String, Vec<i64>)> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/seedvr2_dit").join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|line| {
                let mut fields = line.split('\t');
                let name = fields.next().unwrap().to_string();
                let shape = fields.next().unwrap().trim_matches(['[', ']']).split(',').map(|d| d.trim().parse().unwrap()).collect();
                (name, shape)
            })
            .collect()
    }

    fn assert_same_layout(ours: &[(String, Vec<i64>)], reference: &[(String, Vec<i64>)]) {
        for (i, (a, b)) in ours.iter().zip(reference).enumerate() {
            assert_eq!(a, b, "entry {i}");
        }
        assert_eq!(ours.len(), reference.len());
    }

    /// Same keys, shapes and order as the real models' state dicts, listed from the original code.
    #[test]
    fn released_layouts_match_the_reference_key_lists() {
        assert_same_layout(&DitShape::released(DitVariant::ThreeB).tensor_layout(), &reference_layout("full_keys_3b.txt"));
        assert_same_layout(&DitShape::released(DitVariant::SevenB).tensor_layout(), &reference_layout("full_keys_7b.txt"));
        assert_eq!(DitShape::released(DitVariant::ThreeB).mlp_hidden(), 6912);
    }

    /// The small reference models (README §4, widths 64, head_dim 32) have the same layout as their files.
    #[test]
    fn small_layouts_match_the_small_reference_weights() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/seedvr2_dit");
        let small = |variant, blocks, mm_layers| DitShape { variant, dim: 64, heads: 2, head_dim: 32, blocks, mm_layers };
        let cases = [("small_3b_weights.safetensors", small(DitVariant::ThreeB, 4, 2)), ("small_7b_weights.safetensors", small(DitVariant::SevenB, 3, 3))];
        for (file, shape) in cases {
            let tensors = Tensor::read_safetensors(dir.join(file)).unwrap();
            let mut stored: Vec<(String, Vec<i64>)> = tensors.iter().map(|(n, t)| (n.clone(), t.size())).collect();
            let mut ours = shape.tensor_layout();
            stored.sort();
            ours.sort();
            assert_eq!(ours, stored, "{file}");
            let freqs = &tensors.iter().find(|(n, _)| n == "blocks.0.attn.rope.rope.freqs").unwrap().1;
            let ours = Tensor::from_slice(&shape.rope_freqs());
            assert!((freqs - ours).abs().max().double_value(&[]) < 1e-5, "{file}: rope frequencies");
        }
    }

    /// The random weights load as a DiT whose detected configuration is the requested one, and run.
    #[test]
    fn random_weights_load_and_run() {
        use crate::models::seedvr2_dit::{DitInput, DitLoadOptions, SeedVr2Dit};
        for shape in [
            DitShape { variant: DitVariant::ThreeB, dim: 64, heads: 2, head_dim: 32, blocks: 3, mm_layers: 1 },
            DitShape { variant: DitVariant::SevenB, dim: 64, heads: 2, head_dim: 32, blocks: 2, mm_layers: 2 },
        ] {
            let source = std::path::Path::new("random");
            let dit = SeedVr2Dit::from_tensors(source, shape.random_tensors(0), None, &DitLoadOptions::default()).unwrap();
            let cfg = dit.config();
            assert_eq!((cfg.variant, cfg.dim, cfg.heads, cfg.head_dim, cfg.num_blocks), (shape.variant, 64, 2, 32, shape.blocks));
            assert_eq!((cfg.mlp_hidden, cfg.rope_freqs), (shape.mlp_hidden(), shape.rope_freqs().len() as i64));
            assert_eq!(cfg.mm_layers, if shape.variant == DitVariant::ThreeB { 1 } else { 2 });
            let vid = Tensor::randn([2 * 4 * 6, 33], (Kind::Float, Device::Cpu));
            let txt = Tensor::randn([5, TXT_IN_DIM], (Kind::Float, Device::Cpu));
            let out = dit.forward(&DitInput { vid: &vid, grid: [2, 4, 6], txt: &txt, timestep: 1000.0 }).unwrap();
            assert_eq!(out.size(), [48, 16]);
            assert!(out.isfinite().all().int64_value(&[]) == 1);
        }
    }
}
