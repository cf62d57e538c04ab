//! MM window attention: each 3-D window of video tokens attends over itself followed by ALL text tokens
//! of the sample; video outputs return to their positions, each text token's output is the mean over
//! the windows. Windows of equal shape run as one batched SDPA call (they share their RoPE angles too),
//! so no padded tensor over all windows is ever built.
use std::collections::BTreeMap;

use tch::{Kind, Tensor};

use super::config::DitConfig;
use super::layers::{Linear, RmsNorm, Streams};
use super::rope::Rope;
use super::window::{windows, windows_of_part, GridPart, Window};
use crate::models::nn::weights::WeightPath;
use crate::models::ModelError;

/// One stream's projections (`proj_qkv.S`, `proj_out.S`, `norm_q.S`, `norm_k.S`).
pub struct StreamAttention {
    qkv: Linear,
    out: Linear,
    norm_q: RmsNorm,
    norm_k: RmsNorm,
}

impl StreamAttention {
    fn new(vp: &WeightPath, stream: &str, cfg: &DitConfig) -> Result<Self, ModelError> {
        let inner = cfg.heads * cfg.head_dim;
        Ok(Self {
            qkv: Linear::new(&vp.pp("proj_qkv").pp(stream), cfg.dim, 3 * inner, false)?,
            out: Linear::new(&vp.pp("proj_out").pp(stream), inner, cfg.dim, true)?,
            norm_q: RmsNorm::new(&vp.pp("norm_q").pp(stream), cfg.head_dim)?,
            norm_k: RmsNorm::new(&vp.pp("norm_k").pp(stream), cfg.head_dim)?,
        })
    }

    /// `[n, dim]` → normed q, k and v, each `[n, heads, head_dim]`.
    fn qkv(&self, x: &Tensor, cfg: &DitConfig) -> [Tensor; 3] {
        let qkv = self.qkv.forward(x).view([-1, 3, cfg.heads, cfg.head_dim]);
        [self.norm_q.forward(&qkv.select(1, 0)), self.norm_k.forward(&qkv.select(1, 1)), qkv.select(1, 2)]
    }
}

pub struct WindowAttention {
    streams: Streams<StreamAttention>,
    rope: Rope,
    count: [i64; 3],
    shifted: bool,
    heads: i64,
    head_dim: i64,
    /// The original casts q, k and v to bf16 right before its flash-attention kernel; `Some(BFloat16)`
    /// reproduces that in fp32 runs (the reference's `out_bf16qkv`), `None` keeps full precision.
    qkv_cast: Option<Kind>,
}

/// The attention outputs after `proj_out`, before the gates.
pub struct AttentionOutput {
    pub vid: Tensor,
    pub txt: Tensor,
}

/// What the windows of one sample share: the patched grid and the text length.
pub struct SampleLayout {
    pub grid: [i64; 3],
    pub text_len: i64,
    /// The sample is a spatial tile of this larger grid: windows are the larger grid's, cut to the tile.
    pub part_of: Option<GridPart>,
}

impl WindowAttention {
    pub fn new(vp: &WeightPath, cfg: &DitConfig, index: i64, qkv_cast: Option<Kind>) -> Result<Self, ModelError> {
        let streams = Streams::build(cfg.separate_streams(index), |stream| StreamAttention::new(vp, stream, cfg))?;
        let freqs = vp.pp("rope").pp("rope").get("freqs", &[cfg.rope_freqs])?;
        let (count, shifted) = cfg.windows[index as usize];
        Ok(Self { streams, rope: Rope::new(cfg.variant, freqs), count, shifted, heads: cfg.heads, head_dim: cfg.head_dim, qkv_cast })
    }

    pub fn window_plan(&self, layout: &SampleLayout) -> Vec<Window> {
        match &layout.part_of {
            Some(part) => windows_of_part(part, layout.grid, self.count, self.shifted),
            None => windows(layout.grid, self.count, self.shifted),
        }
    }

    pub fn forward(&self, vid: &Tensor, txt: &Tensor, layout: &SampleLayout, cfg: &DitConfig) -> AttentionOutput {
        let [q_vid, k_vid, v_vid] = self.streams.vid().qkv(vid, cfg);
        let [mut q_txt, mut k_txt, v_txt] = self.streams.txt().qkv(txt, cfg);
        if self.rope.rotates_text() {
            let rotation = self.rope.text(layout.text_len);
            (q_txt, k_txt) = (rotation.apply(&q_txt), rotation.apply(&k_txt));
        }
        let (q_txt, k_txt, v_txt) = (self.cast(&q_txt), self.cast(&k_txt), self.cast(&v_txt));
        let inner = self.heads * self.head_dim;
        let mut vid_out = Tensor::zeros([vid.size()[0], inner], (vid.kind(), vid.device()));
        let mut txt_sum = Tensor::zeros([layout.text_len, self.heads, self.head_dim], (vid.kind(), vid.device()));
        let plan = self.window_plan(layout);
        for (shape, group) in group_by_shape(&plan) {
            let (count, tokens) = (group.len() as i64, shape.iter().product::<i64>());
            let indices: Vec<i64> = group.iter().flat_map(|w| w.token_indices(layout.grid)).collect();
            let indices = Tensor::from_slice(&indices).to_device(vid.device());
            let rotation = self.rope.video(shape, layout.text_len);
            let windowed = |x: &Tensor| x.index_select(0, &indices).view([count, tokens, self.heads, self.head_dim]);
            let with_text = |x: Tensor, text: &Tensor| {
                let text = text.unsqueeze(0).expand([count, layout.text_len, self.heads, self.head_dim], false);
                Tensor::cat(&[self.cast(&x), text], 1).transpose(1, 2)
            };
            let q = with_text(rotation.apply(&windowed(&q_vid)), &q_txt);
            let k = with_text(rotation.apply(&windowed(&k_vid)), &k_txt);
            let v = with_text(windowed(&v_vid), &v_txt);
            let out = Tensor::scaled_dot_product_attention::<Tensor>(&q, &k, &v, None, 0.0, false, None, false);
            let out = self.cast(&out).transpose(1, 2).to_kind(vid.kind());
            let _ = vid_out.index_copy_(0, &indices, &out.narrow(1, 0, tokens).reshape([count * tokens, inner]));
            txt_sum += out.narrow(1, tokens, layout.text_len).sum_dim_intlist(0, false, vid.kind());
        }
        let txt_mean = (txt_sum / plan.len() as f64).reshape([layout.text_len, inner]);
        AttentionOutput { vid: self.streams.vid().out.forward(&vid_out), txt: self.streams.txt().out.forward(&txt_mean) }
    }

    fn cast(&self, x: &Tensor) -> Tensor {
        match self.qkv_cast {
            Some(kind) if kind != x.kind() => x.to_kind(kind).to_kind(x.kind()),
            _ => x.shallow_clone(),
        }
    }
}

/// Windows grouped by shape, each group in window order.
fn group_by_shape(plan: &[Window]) -> BTreeMap<[i64; 3], Vec<&Window>> {
    let mut groups: BTreeMap<[i64; 3], Vec<&Window>> = BTreeMap::new();
    for window in plan {
        groups.entry(window.shape()).or_default().push(window);
    }
    groups
}
