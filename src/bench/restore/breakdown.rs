//! Where the DiT's time goes, without touching the model: each class of its work run on its own with
//! the model's shapes, dtype and call pattern, summed over the blocks. Linears and attention kernels
//! are the FLOP-counted work; the rest mirrors the tensor operations between them (fused RMS norms,
//! `addcmul` modulation and gated residuals, in-place activations; RoPE in fp32; the window gather/concat and
//! the scatter back) as `src/models/seedvr2_dit/` does them at 7dba0f4: a change there needs the same
//! change here. Whatever the whole forward takes beyond the sum is reported as unaccounted (dispatch,
//! overlap, or this mirror drifting from the model).
use std::time::Instant;

use serde_json::{json, Value};
use crate::models::seedvr2_dit::rope::Rotation;
use tch::{Device, Kind, Tensor};

use super::flops::DitWork;
use crate::models::seedvr2_dit::config::PATCH;
use crate::models::seedvr2_dit::window::windows;
use crate::models::seedvr2_dit::{DitConfig, DitInput, DitVariant, MlpKind, SeedVr2Dit};

pub struct Breakdown {
    /// Seconds of the whole DiT forward, timed the same way as the parts.
    pub forward: f64,
    /// Seconds of every linear map of one forward, each run alone on random inputs of its shape.
    pub linears: f64,
    pub linear_flops: f64,
    /// Seconds of the attention kernels (one SDPA call per window shape per block).
    pub attention: f64,
    pub attention_flops: f64,
    /// RMS norms (block norms and q/k norms, fp32), modulation, gates, residuals and MLP activations.
    pub pointwise: f64,
    /// RoPE angles and rotation (fp32) of the video q/k per window shape, and the 3B's text q/k.
    pub rope: f64,
    /// Window gather (`index_select`), text concat and transposes, the scatter back (`index_copy_`)
    /// and the text mean.
    pub windowing: f64,
    /// Per class: the best of `PASSES` timed passes after a warm-up.
    pub passes: usize,
    /// Minor page faults of one whole forward (each is a fresh page of a new host allocation).
    pub forward_page_faults: i64,
    /// Under the bounded allocator: the whole forward (best of `PASSES`) and its page faults inside a
    /// [`crate::device::HeapReuse`] as a job runs it (the threshold back and the heap trimmed after,
    /// timed too); the plain `forward` above is the call without it.
    pub large_threshold: Option<(f64, i64)>,
}

impl Breakdown {
    fn parts(&self) -> [(&'static str, f64); 5] {
        [
            ("linears", self.linears),
            ("attention kernels", self.attention),
            ("norms, modulation, activations", self.pointwise),
            ("RoPE", self.rope),
            ("window gather / concat / scatter", self.windowing),
        ]
    }

    pub fn print(&self, dtype: &str) {
        let dit_seconds = self.forward;
        println!("DiT breakdown at {dtype} (each class alone with the model's shapes; best of {} passes each, the forward too):", self.passes);
        println!("| part | s | % of forward | GFLOP/s |\n|---|---:|---:|---:|");
        let rate = |flops: f64, s: f64| if flops > 0.0 { format!("{:.0}", flops / 1e9 / s) } else { "".into() };
        for (name, s) in self.parts() {
            let flops = match name {
                "linears" => self.linear_flops,
                "attention kernels" => self.attention_flops,
                _ => 0.0,
            };
            println!("| {name} | {s:.3} | {:.0}% | {} |", 100.0 * s / dit_seconds, rate(flops, s));
        }
        let accounted: f64 = self.parts().iter().map(|(_, s)| s).sum();
        println!("| whole forward | {dit_seconds:.3} | 100% | {:.0} |", (self.linear_flops + self.attention_flops) / 1e9 / dit_seconds);
        let rest = dit_seconds - accounted;
        println!("| unaccounted (forward − sum) | {rest:.3} | {:.0}% | |", 100.0 * rest / dit_seconds);
        let fresh_mib = self.forward_page_faults as f64 * page_size() / (1024.0 * 1024.0);
        println!("minor page faults in one forward: {} ({fresh_mib:.0} MiB of fresh pages)", self.forward_page_faults);
        if let Some((seconds, faults)) = self.large_threshold {
            let rate = (self.linear_flops + self.attention_flops) / 1e9 / seconds;
            println!(
                "with the mmap threshold at {} MiB during the forward: {seconds:.3} s ({rate:.0} GFLOP/s), {faults} minor page faults",
                crate::device::CALL_MMAP_THRESHOLD >> 20
            );
        }
    }

    pub fn to_json(&self) -> Value {
        let accounted: f64 = self.parts().iter().map(|(_, s)| s).sum();
        json!({
            "forward_s": self.forward,
            "forward_minor_page_faults": self.forward_page_faults,
            "large_mmap_threshold_forward": self.large_threshold.map(|(s, faults)| json!({"seconds": s, "minor_page_faults": faults})),
            "linears_s": self.linears,
            "linears_gflops_per_s": self.linear_flops / 1e9 / self.linears,
            "attention_s": self.attention,
            "attention_gflops_per_s": self.attention_flops / 1e9 / self.attention,
            "pointwise_s": self.pointwise,
            "rope_s": self.rope,
            "windowing_s": self.windowing,
            "unaccounted_s": self.forward - accounted,
        })
    }
}

const PASSES: usize = 3;

/// Best of `PASSES` timed runs of `work` after one untimed run.
fn best_of(mut work: impl FnMut()) -> f64 {
    work();
    (0..PASSES)
        .map(|_| {
            let started = Instant::now();
            work();
            started.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// `text`: the `[L, 5120]` text the restore runs used; `bounded`: the bounded host allocator is active.
pub fn measure(dit: &SeedVr2Dit, work: &DitWork, latent_grid: [i64; 3], text: &Tensor, seed: i64, bounded: bool) -> Breakdown {
    let _guard = tch::no_grad_guard();
    let (cfg, kind) = (dit.config(), dit.kind());
    tch::manual_seed(seed + 7);
    let vid = Tensor::randn([latent_grid.iter().product::<i64>(), cfg.vid_in_channels], (Kind::Float, Device::Cpu));
    let input = DitInput { vid: &vid, grid: latent_grid, txt: text, timestep: 1000.0 };
    let run_forward = || {
        let _ = dit.forward(&input).expect("the restore runs took the same input");
    };
    let forward = best_of(run_forward);
    let faults_before = minor_page_faults();
    run_forward();
    let forward_page_faults = minor_page_faults() - faults_before;
    // As a job does it: every call starts from a trimmed heap and pays for growing it.
    let with_large_threshold = || {
        let _heap = crate::device::HeapReuse::for_call();
        run_forward();
    };
    let large_threshold = bounded.then(|| {
        let seconds = best_of(with_large_threshold);
        let faults_before = minor_page_faults();
        with_large_threshold();
        (seconds, minor_page_faults() - faults_before)
    });
    let options = (kind, Device::Cpu);
    let linear_inputs: Vec<(Tensor, Tensor, Option<Tensor>)> = work
        .linears
        .iter()
        .map(|op| {
            let bias = op.bias.then(|| Tensor::randn([op.out_dim], options));
            (Tensor::randn([op.tokens, op.in_dim], options), Tensor::randn([op.out_dim, op.in_dim], options) * 0.02, bias)
        })
        .collect();
    let linears = best_of(|| {
        for (x, w, b) in &linear_inputs {
            let _ = x.linear(w, b.as_ref());
        }
    });
    drop(linear_inputs);
    let attention_inputs: Vec<[Tensor; 3]> = work
        .attention
        .iter()
        .map(|op| {
            let qkv = || Tensor::randn([op.windows, op.window_tokens + op.text_len, op.heads, op.head_dim], options).transpose(1, 2);
            [qkv(), qkv(), qkv()]
        })
        .collect();
    let attention = best_of(|| {
        for [q, k, v] in &attention_inputs {
            let _ = Tensor::scaled_dot_product_attention::<Tensor>(q, k, v, None, 0.0, false, None, false);
        }
    });
    drop(attention_inputs);
    let patched = [latent_grid[0] / PATCH[0], latent_grid[1] / PATCH[1], latent_grid[2] / PATCH[2]];
    let text_len = work.attention.first().map_or(1, |op| op.text_len);
    let between = Between::new(cfg, patched, text_len, kind);
    Breakdown {
        forward,
        linears,
        linear_flops: work.linear_flops(),
        attention,
        attention_flops: work.attention_flops(),
        pointwise: best_of(|| between.pointwise()),
        rope: best_of(|| between.rope()),
        windowing: best_of(|| between.windowing()),
        passes: PASSES,
        forward_page_faults,
        large_threshold,
    }
}

fn page_size() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as f64 }
}

/// This process's minor page faults so far.
fn minor_page_faults() -> i64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage for the call to fill.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_minflt
}

/// Inputs of the operations between the matmuls, at the model's shapes.
struct Between<'a> {
    cfg: &'a DitConfig,
    grid: [i64; 3],
    text_len: i64,
    kind: Kind,
    /// `[tokens, dim]` streams.
    vid: Tensor,
    txt: Tensor,
    /// `[tokens, heads, head_dim]` q (k and v have the same shape).
    q_vid: Tensor,
    q_txt: Tensor,
    /// `[tokens, 3, heads, head_dim]`: the q/k norms run on selections of the qkv projection.
    qkv_vid: Tensor,
    qkv_txt: Tensor,
    /// `[dim]` modulation vectors and the q/k norm weight.
    vector: Tensor,
    head_weight: Tensor,
    /// `[tokens, mlp_hidden]` MLP activations, one pair (video, text) per block since the model
    /// changes them in place (a few passes keep them far from denormals), and the SwiGLU's up half.
    hidden: Vec<[Tensor; 2]>,
    up: [Tensor; 2],
    /// Per block, per window shape: what the model gathers, rotates and scatters.
    blocks: Vec<Vec<WindowGroup>>,
}

/// `n` windows of one shape in one block.
struct WindowGroup {
    shape: [i64; 3],
    n: i64,
    tokens: i64,
    /// Token indices of the windows, in window order.
    indices: Tensor,
    /// Gathered video q `[n, tokens, heads, head_dim]` (the RoPE input).
    windowed: Tensor,
    /// An attention output `[n, tokens + text, heads, head_dim]` (the scatter's input).
    out: Tensor,
}

impl<'a> Between<'a> {
    fn new(cfg: &'a DitConfig, grid: [i64; 3], text_len: i64, kind: Kind) -> Self {
        let options = (kind, Device::Cpu);
        let n: i64 = grid.iter().product();
        let (heads, head_dim) = (cfg.heads, cfg.head_dim);
        let blocks = cfg
            .windows
            .iter()
            .map(|&(count, shifted)| {
                let plan = windows(grid, count, shifted);
                groups(grid, count, shifted)
                    .into_iter()
                    .map(|(shape, n)| {
                        let tokens: i64 = shape.iter().product();
                        let indices: Vec<i64> = plan.iter().filter(|w| w.shape() == shape).flat_map(|w| w.token_indices(grid)).collect();
                        WindowGroup {
                            shape,
                            n,
                            tokens,
                            indices: Tensor::from_slice(&indices),
                            windowed: Tensor::randn([n, tokens, heads, head_dim], options),
                            out: Tensor::randn([n, heads, tokens + text_len, head_dim], options).transpose(1, 2),
                        }
                    })
                    .collect()
            })
            .collect();
        Self {
            cfg,
            grid,
            text_len,
            kind,
            vid: Tensor::randn([n, cfg.dim], options),
            txt: Tensor::randn([text_len, cfg.dim], options),
            q_vid: Tensor::randn([n, cfg.heads, cfg.head_dim], options),
            q_txt: Tensor::randn([text_len, cfg.heads, cfg.head_dim], options),
            qkv_vid: Tensor::randn([n, 3, cfg.heads, cfg.head_dim], options),
            qkv_txt: Tensor::randn([text_len, 3, cfg.heads, cfg.head_dim], options),
            vector: Tensor::randn([cfg.dim], options),
            head_weight: Tensor::randn([cfg.head_dim], options),
            hidden: (0..cfg.num_blocks)
                .map(|_| [Tensor::randn([n, cfg.mlp_hidden], options), Tensor::randn([text_len, cfg.mlp_hidden], options)])
                .collect(),
            up: [Tensor::randn([n, cfg.mlp_hidden], options), Tensor::randn([text_len, cfg.mlp_hidden], options)],
            blocks,
        }
    }

    /// The model's `RmsNorm`: libtorch's fused `rms_norm` (fp32 statistics for bf16 inputs).
    fn rms(x: &Tensor, weight: Option<&Tensor>) -> Tensor {
        let dim = *x.size().last().expect("a last dimension");
        x.rms_norm([dim], weight, 1e-5)
    }

    /// Per block and stream: attention-in norm + modulation, q/k norms, gated residual, MLP-in norm +
    /// modulation, activation, gated residual (the text's last-block update is skipped, as in the model).
    fn pointwise(&self) {
        let v = &self.vector;
        for block in 0..self.cfg.num_blocks {
            let last = block + 1 == self.cfg.num_blocks;
            let streams = [(&self.vid, &self.qkv_vid), (&self.txt, &self.qkv_txt)];
            for (stream, (x, qkv)) in streams.into_iter().enumerate() {
                // Modulation is `shift.addcmul(x, scale)`, a gated residual `residual.addcmul(x, gate)`.
                let _attn_in = v.addcmul(&Self::rms(x, None), v);
                let _q = Self::rms(&qkv.select(1, 0), Some(&self.head_weight));
                let _k = Self::rms(&qkv.select(1, 1), Some(&self.head_weight));
                if stream == 1 && last {
                    continue;
                }
                let x1 = x.addcmul(x, v);
                let _mlp_in = v.addcmul(&Self::rms(&x1, None), v);
                // In place, as the model does.
                let mut hidden = self.hidden[block as usize][stream].shallow_clone();
                match self.cfg.mlp {
                    MlpKind::SwiGlu => {
                        let _ = hidden.silu_();
                        hidden *= &self.up[stream];
                    }
                    MlpKind::GeluTanh => {
                        let _ = hidden.gelu_("tanh");
                    }
                }
                let _out = x1.addcmul(&x1, v);
            }
        }
    }

    /// The rotation of `tokens` positions, built by the model's own `Rotation`.
    fn rotation(&self, tokens: i64) -> Rotation {
        let rotated = self.cfg.rope_channels();
        let positions = Tensor::arange(tokens, (Kind::Float, Device::Cpu));
        let freqs = Tensor::ones([rotated / 2], (Kind::Float, Device::Cpu));
        Rotation::of(&(positions.unsqueeze(-1) * freqs.unsqueeze(0)).repeat_interleave_self_int(2, -1, None))
    }

    /// The model's own `Rotation::apply`.
    fn rotate(x: &Tensor, rotation: &Rotation) -> Tensor {
        rotation.apply(x)
    }

    fn rope(&self) {
        for block in &self.blocks {
            if self.cfg.variant == DitVariant::ThreeB {
                let rotation = self.rotation(self.text_len);
                let _ = (Self::rotate(&self.q_txt, &rotation), Self::rotate(&self.q_txt, &rotation));
            }
            for group in block {
                let rotation = self.rotation(group.tokens);
                let _ = (Self::rotate(&group.windowed, &rotation), Self::rotate(&group.windowed, &rotation));
            }
        }
    }

    fn windowing(&self) {
        let (heads, head_dim, inner) = (self.cfg.heads, self.cfg.head_dim, self.cfg.heads * self.cfg.head_dim);
        let options = (self.kind, Device::Cpu);
        for (block, &(count, shifted)) in self.blocks.iter().zip(&self.cfg.windows) {
            // The model plans the windows and builds the index tensors in every block.
            let plan = windows(self.grid, count, shifted);
            let mut vid_out = Tensor::zeros([self.q_vid.size()[0], inner], options);
            let mut txt_sum = Tensor::zeros([self.text_len, heads, head_dim], options);
            for WindowGroup { shape, n, tokens, indices, out, .. } in block {
                let (n, tokens) = (*n, *tokens);
                let rebuilt: Vec<i64> = plan.iter().filter(|w| w.shape() == *shape).flat_map(|w| w.token_indices(self.grid)).collect();
                let _rebuilt = Tensor::from_slice(&rebuilt);
                let with_text = || {
                    let windowed = self.q_vid.index_select(0, indices).view([n, tokens, heads, head_dim]);
                    let text = self.q_txt.unsqueeze(0).expand([n, self.text_len, heads, head_dim], false);
                    Tensor::cat(&[windowed, text], 1).transpose(1, 2)
                };
                let _qkv = [with_text(), with_text(), with_text()];
                let _ = vid_out.index_copy_(0, indices, &out.narrow(1, 0, tokens).reshape([n * tokens, inner]));
                txt_sum += out.narrow(1, tokens, self.text_len).sum_dim_intlist(0, false, self.kind);
            }
            let _mean = (txt_sum / plan.len() as f64).reshape([self.text_len, inner]);
        }
    }
}

/// Window shapes of one block's plan with their counts.
fn groups(grid: [i64; 3], count: [i64; 3], shifted: bool) -> Vec<([i64; 3], i64)> {
    let mut out: Vec<([i64; 3], i64)> = Vec::new();
    for window in windows(grid, count, shifted) {
        match out.iter_mut().find(|(shape, _)| *shape == window.shape()) {
            Some((_, n)) => *n += 1,
            None => out.push((window.shape(), 1)),
        }
    }
    out
}
