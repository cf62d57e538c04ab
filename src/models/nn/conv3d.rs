//! The video VAEs' convolutions (Wan's, and SeedVR2's through its own wrapper). Everything runs as 3-D
//! convolution on `[B, C, T, H, W]`; a checkpoint's per-frame 2-D convs get a time kernel of 1 so frames
//! never need to be folded into the batch.
use tch::{Device, Kind, Tensor};

use super::causal_cache::{FeatureCache, SlotAllocator};
use super::layout;
use super::weights::WeightPath;
use super::winograd;
use crate::models::ModelError;

/// Shape of one convolution, as `[time, height, width]` triples.
#[derive(Debug, Clone, Copy)]
pub struct ConvSpec {
    pub in_channels: i64,
    pub out_channels: i64,
    pub kernel: [i64; 3],
    pub stride: [i64; 3],
    pub padding: [i64; 3],
    /// The checkpoint stores a per-frame `nn.Conv2d` weight `[out, in, kh, kw]`.
    pub stored_as_2d: bool,
}

impl ConvSpec {
    /// `k×k×k`, stride 1, "same" padding.
    pub fn cube(in_channels: i64, out_channels: i64, k: i64) -> Self {
        Self { in_channels, out_channels, kernel: [k; 3], stride: [1; 3], padding: [k / 2; 3], stored_as_2d: false }
    }

    pub fn pointwise(in_channels: i64, out_channels: i64) -> Self {
        Self::cube(in_channels, out_channels, 1)
    }

    /// A per-frame `k×k` conv (checkpoint weight is 4-D).
    pub fn per_frame(in_channels: i64, out_channels: i64, k: i64) -> Self {
        Self { in_channels, out_channels, kernel: [1, k, k], stride: [1; 3], padding: [0, k / 2, k / 2], stored_as_2d: true }
    }

    pub fn with_stride(self, stride: [i64; 3]) -> Self {
        Self { stride, ..self }
    }

    pub fn with_padding(self, padding: [i64; 3]) -> Self {
        Self { padding, ..self }
    }

    pub fn with_kernel(self, kernel: [i64; 3]) -> Self {
        Self { kernel, ..self }
    }
}

/// libtorch's `conv3d`, except that on CPU float32 and bf16 go straight to oneDNN. `conv3d`'s own
/// heuristic sends inputs with N·C·D·H ≤ 20480 (few channels, frames or rows: a stream's first frame,
/// row bands, small models) to an im2col kernel that measured ~10× slower here and allocates a column
/// buffer of 27× its input.
pub(crate) fn conv3d(x: &Tensor, weight: &Tensor, bias: &Tensor, stride: [i64; 3], padding: [i64; 3]) -> Result<Tensor, ModelError> {
    if x.device() == Device::Cpu && onednn_takes(x.kind()) {
        return Ok(x.f_mkldnn_convolution(weight, Some(bias), padding, stride, [1, 1, 1], 1)?);
    }
    Ok(x.f_conv3d(weight, Some(bias), stride, padding, [1, 1, 1], 1)?)
}

/// Whether oneDNN runs `kind` convolutions on this CPU: float32 on x86-64 builds with oneDNN, bf16
/// only where the CPU has bf16 dot products (elsewhere oneDNN refuses bf16 and `conv3d` copes).
fn onednn_takes(kind: Kind) -> bool {
    static HAS_ONEDNN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let available = cfg!(target_arch = "x86_64") && *HAS_ONEDNN.get_or_init(tch::utils::has_mkldnn);
    match kind {
        Kind::Float => available,
        Kind::BFloat16 => available && crate::device::cpu_has_native_bf16(),
        _ => false,
    }
}

/// A plain convolution with its padding applied inside the conv call.
#[derive(Debug)]
pub struct Conv3d {
    weight: Tensor,
    bias: Tensor,
    stride: [i64; 3],
    padding: [i64; 3],
    /// The weight in the Winograd domain (`winograd`): made at load where every call will use it, else
    /// at the first call that does.
    winograd_kernel: std::cell::OnceCell<Tensor>,
}

impl Conv3d {
    /// Loads `{vp}.weight` and `{vp}.bias`.
    pub fn new(vp: &WeightPath, spec: &ConvSpec) -> Result<Self, ModelError> {
        let [kt, kh, kw] = spec.kernel;
        let weight = if spec.stored_as_2d {
            vp.get("weight", &[spec.out_channels, spec.in_channels, kh, kw])?.f_unsqueeze(2)?
        } else {
            vp.get("weight", &[spec.out_channels, spec.in_channels, kt, kh, kw])?
        };
        let weight = if vp.weights().conv_channels_last() { layout::to_channels_last(&weight)? } else { weight };
        let bias = vp.get("bias", &[spec.out_channels])?;
        let winograd_kernel = std::cell::OnceCell::new();
        if winograd::takes_weight(&weight, spec.stride, spec.padding[0], vp.weights().conv_channels_last()) {
            let kernel = winograd::transformed_kernel(&weight, &winograd::F2X2)?;
            vp.weights().note_derived(&kernel);
            let _ = winograd_kernel.set(kernel);
        }
        Ok(Self { weight, bias, stride: spec.stride, padding: spec.padding, winograd_kernel })
    }

    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    pub fn bias(&self) -> &Tensor {
        &self.bias
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        self.forward_with_padding(x, self.padding)
    }

    pub fn forward_with_padding(&self, x: &Tensor, padding: [i64; 3]) -> Result<Tensor, ModelError> {
        self.convolve_taps(x, 0, self.weight.size()[2], padding)
    }

    /// The convolution with the kernel's temporal taps `first..first + taps` only.
    fn convolve_taps(&self, x: &Tensor, first: i64, taps: i64, padding: [i64; 3]) -> Result<Tensor, ModelError> {
        let weight = if taps == self.weight.size()[2] { self.weight.shallow_clone() } else { self.weight.f_narrow(2, first, taps)? };
        if winograd::applies(x, &weight, self.stride, padding) {
            let kernel = match self.winograd_kernel.get() {
                Some(kernel) => kernel,
                None => {
                    let kernel = winograd::transformed_kernel(&self.weight, &winograd::F2X2)?;
                    winograd::note_made_on_first_use(&kernel);
                    self.winograd_kernel.get_or_init(|| kernel)
                }
            };
            let channels = self.weight.size()[1];
            return winograd::conv3d(x, &kernel.f_narrow(1, first * channels, taps * channels)?, &self.bias, &winograd::F2X2);
        }
        conv3d(x, &weight, &self.bias, self.stride, padding)
    }

    /// The conv of `x` preceded in time by `zero_frames` zero frames (stride 1 in time), without
    /// multiplying by them: output frames whose window starts in the zeros use only the kernel's
    /// later taps over the first real frames. Exact; the first frame of a stream costs 1/k_t of the
    /// padded conv.
    pub fn forward_after_zero_frames(&self, x: &Tensor, zero_frames: i64, padding: [i64; 3]) -> Result<Tensor, ModelError> {
        let kernel_frames = self.weight.size()[2];
        let frames = x.size()[2];
        let mut outputs = Vec::new();
        for skipped in (1..=zero_frames).rev() {
            let taps = kernel_frames - skipped;
            if taps > frames {
                continue;
            }
            outputs.push(self.convolve_taps(&x.f_narrow(2, 0, taps)?, skipped, taps, padding)?);
        }
        if frames >= kernel_frames {
            outputs.push(self.forward_with_padding(x, padding)?);
        }
        Ok(match outputs.len() {
            1 => outputs.pop().expect("one output"),
            _ => Tensor::f_cat(&outputs, 2)?,
        })
    }
}

/// Causal in time: `2·p_t` frames of history in front, none behind; symmetric in space. The history is
/// zeros at the start of a stream and the last input frames of the previous chunk afterwards, so a
/// chunked stream computes exactly the full-sequence convolution.
#[derive(Debug)]
pub struct CausalConv3d {
    conv: Conv3d,
    spatial_padding: [i64; 2],
    history_frames: i64,
    cache_slot: Option<usize>,
}

impl CausalConv3d {
    pub fn new(vp: &WeightPath, spec: &ConvSpec, slots: &mut SlotAllocator) -> Result<Self, ModelError> {
        let history_frames = 2 * spec.padding[0];
        Ok(Self {
            conv: Conv3d::new(vp, &ConvSpec { padding: [0; 3], ..*spec })?,
            spatial_padding: [spec.padding[1], spec.padding[2]],
            history_frames,
            cache_slot: (history_frames > 0).then(|| slots.allocate()),
        })
    }

    pub fn forward(&self, x: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        // Before the cache is touched: a stopped stream's layers after this one never run.
        cache.check_stop()?;
        let history = match self.cache_slot {
            Some(slot) => {
                let history = cache.take(slot);
                cache.store(slot, self.next_history(history.as_ref(), x)?);
                history
            }
            None => None,
        };
        // The cache holds only real frames; the history it lacks at the start of a stream is zeros,
        // whose products the original computes and we skip.
        let zero_frames = self.history_frames - history.as_ref().map_or(0, |h| h.size()[2]);
        let (_, in_channels, frames, height, width) = x.size5()?;
        let out_channels = self.conv.weight.size()[0];
        let band_rows = cache.row_split().map(|split| {
            let element = x.kind().elt_size_in_bytes() as i64;
            split.band_rows((in_channels * (frames + self.history_frames) + out_channels * frames) * width * element)
        });
        match band_rows {
            Some(rows) if rows < height => self.forward_in_bands(x, history.as_ref(), zero_frames, rows),
            _ => {
                let input = match &history {
                    Some(history) => Tensor::f_cat(&[history, x], 2)?,
                    None => x.shallow_clone(),
                };
                let padding = [0, self.spatial_padding[0], self.spatial_padding[1]];
                self.conv.forward_after_zero_frames(&input, zero_frames, padding)
            }
        }
    }

    /// The last `history_frames` real input frames (fewer at the start), copied so the cache does not
    /// keep the whole input alive.
    fn next_history(&self, history: Option<&Tensor>, x: &Tensor) -> Result<Tensor, ModelError> {
        let frames = x.size()[2];
        if frames >= self.history_frames || history.is_none() {
            let kept = frames.min(self.history_frames);
            return layout::dense_copy(&x.f_narrow(2, frames - kept, kept)?);
        }
        let history = history.expect("checked above");
        let from_history = (self.history_frames - frames).min(history.size()[2]);
        let older = history.f_narrow(2, history.size()[2] - from_history, from_history)?;
        Ok(Tensor::f_cat(&[&older, x], 2)?)
    }

    /// Output rows in bands of `rows`: each band convolves its rows plus the halo rows the kernel
    /// reaches (zero padded where the band ends), and keeps the rows whose windows lie in the real
    /// input: its own. They land in their place in one output tensor.
    fn forward_in_bands(&self, x: &Tensor, history: Option<&Tensor>, zero_frames: i64, rows: i64) -> Result<Tensor, ModelError> {
        let (batch, in_channels, frames, height, width) = x.size5()?;
        let out_channels = self.conv.weight.size()[0];
        let out = layout::empty_5d([batch, out_channels, frames, height, width], x)?;
        let history_frames = history.map_or(0, |h| h.size()[2]);
        let padding = [0, self.spatial_padding[0], self.spatial_padding[1]];
        let halo = self.spatial_padding[0];
        let mut top = 0;
        while top < height {
            let bottom = (top + rows).min(height);
            let first = (top - halo).max(0);
            let last = (bottom + halo).min(height);
            // History and frames of the band in one buffer: the band's input is copied once. The
            // conv keeps libtorch's own symmetric padding, which is what selects its fast kernels
            // (a band padded by hand instead runs on a slower path with a default-layout output).
            let input = layout::empty_5d([batch, in_channels, history_frames + frames, last - first, width], x)?;
            let rows_of = |t: &Tensor| t.f_narrow(3, first, last - first);
            if let Some(history) = history {
                input.f_narrow(2, 0, history_frames)?.f_copy_(&rows_of(history)?)?;
            }
            input.f_narrow(2, history_frames, frames)?.f_copy_(&rows_of(x)?)?;
            let y = self.conv.forward_after_zero_frames(&input, zero_frames, padding)?;
            out.f_narrow(3, top, bottom - top)?.f_copy_(&y.f_narrow(3, top - first, bottom - top)?)?;
            top = bottom;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn skipping_zero_frames_equals_convolving_them() {
        tch::manual_seed(5);
        let opts = (Kind::Float, Device::Cpu);
        let conv = Conv3d { weight: Tensor::randn([3, 2, 3, 3, 3], opts), bias: Tensor::randn([3], opts), stride: [1; 3], padding: [0; 3], winograd_kernel: Default::default() };
        for (frames, zeros) in [(1, 2), (2, 2), (4, 2), (2, 1), (5, 1), (3, 0)] {
            let x = Tensor::randn([1, 2, frames, 5, 4], opts);
            let padded = x.constant_pad_nd([0, 0, 0, 0, zeros, 0]);
            let expected = conv.forward_with_padding(&padded, [0, 1, 1]).unwrap();
            let got = conv.forward_after_zero_frames(&x, zeros, [0, 1, 1]).unwrap();
            assert_eq!(got.size(), expected.size(), "{frames} frames after {zeros} zeros");
            let diff = (got - expected).abs().max().double_value(&[]);
            assert!(diff < 1e-5, "{frames} frames after {zeros} zeros: {diff}");
        }
    }
}
