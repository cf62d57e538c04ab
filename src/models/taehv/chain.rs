//! The encoder and decoder as the original's `nn.Sequential`s, run over frames in `[N, T, C, H, W]` with
//! their temporal state carried in [`Memory`]: a chunk of frames goes through each layer at once (the
//! original's parallel mode is one chunk holding the whole clip), or frame by frame, depth first, as the
//! original's work queue walks it (`parallel=False`). Both are the same function up to fp32 rounding.
use std::collections::HashMap;

use tch::Tensor;

use super::blocks::{Conv2d, MemBlock, SuperMemBlock, TGrow, TPool};
use crate::models::nn::causal_cache::{saved_state_error, SavedTensors};
use crate::models::nn::layout;
use crate::models::nn::nearest_up_conv2d::NearestUpConv2d;
use crate::models::stop::StopFlag;
use crate::models::ModelError;

/// One child of the original's Sequential, at its index.
#[derive(Debug)]
pub enum Layer {
    Conv(Conv2d),
    Relu,
    /// `tanh(x / 3) · 3`: the base decoder's soft clamp of its input latents to ±3.
    Clamp,
    /// `nn.Upsample(scale_factor)`, nearest; factor 1 where a stage does not upsample.
    Upsample(i64),
    PixelShuffle(i64),
    Mem(MemBlock),
    SuperMem(SuperMemBlock),
    Pool(TPool),
    Grow(TGrow),
}

impl Layer {
    /// The class name the reference's intermediates carry; `None` for the parameter-free layers it omits.
    fn traced_class(&self) -> Option<&'static str> {
        match self {
            Layer::Conv(_) => Some("Conv2d"),
            Layer::Clamp => Some("Clamp"),
            Layer::Mem(_) => Some("MemBlock"),
            Layer::SuperMem(_) => Some("SuperMemBlock"),
            Layer::Pool(_) => Some("TPool"),
            Layer::Grow(_) => Some("TGrow"),
            Layer::Relu | Layer::Upsample(_) | Layer::PixelShuffle(_) => None,
        }
    }
}

/// How a run walks time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Every frame a layer has in hand goes through it in one call.
    Chunk,
    /// One frame at a time, depth first: the original's `parallel=False`.
    FrameByFrame,
}

/// What a chain carries from one chunk to the next, per layer index: a MemBlock's input at the previous
/// frame (`[N, 1, C, H, W]`), or the frames a TPool holds until its group is whole (`[N, k, C, H, W]`).
/// Slots are replaced, never written in place, so a shallow copy is a faithful snapshot.
#[derive(Debug)]
pub struct Memory {
    slots: Vec<Option<Tensor>>,
}

impl Memory {
    pub fn snapshot(&self) -> Memory {
        Memory { slots: self.slots.iter().map(|slot| slot.as_ref().map(Tensor::shallow_clone)).collect() }
    }

    pub fn save(&self, prefix: &str, into: &mut SavedTensors) {
        for (index, slot) in self.slots.iter().enumerate() {
            if let Some(frames) = slot {
                into.push((format!("{prefix}{index}"), frames.to_device(tch::Device::Cpu).contiguous()));
            }
        }
        into.push((format!("{prefix}slots"), Tensor::from(self.slots.len() as i64)));
    }

    pub fn load(&mut self, prefix: &str, saved: &HashMap<String, Tensor>, device: tch::Device) -> Result<(), ModelError> {
        let key = format!("{prefix}slots");
        let count = saved.get(&key).ok_or_else(|| saved_state_error(format!("no `{key}`")))?.f_int64_value(&[])?;
        if count != self.slots.len() as i64 {
            return Err(saved_state_error(format!("{count} TAEHV memory slots, the model has {}", self.slots.len())));
        }
        for (index, slot) in self.slots.iter_mut().enumerate() {
            *slot = saved.get(&format!("{prefix}{index}")).map(|frames| frames.to_device(device));
        }
        Ok(())
    }
}

/// One run of a chain: its memory, pace, the stop asked before every layer, and optionally a record of
/// every traced layer's inputs and output (`<chain>.<index>.<Class>.{in_x,in_past,out}`, as the reference).
pub struct Run<'a> {
    pub memory: &'a mut Memory,
    pub pace: Pace,
    pub stop: &'a StopFlag,
    pub trace: Option<&'a mut Vec<(String, Tensor)>>,
}

#[derive(Debug)]
pub struct Chain {
    /// `encoder` or `decoder`: the checkpoint prefix, and the trace's.
    name: &'static str,
    layers: Vec<Layer>,
    /// At the index of a nearest ×2 `Upsample` followed by a TGrow and a 3×3 conv: that conv fused with
    /// the up-sampling. TGrow is a 1×1 conv, which commutes with nearest up-sampling, so the three run
    /// as TGrow at the low resolution and the fused conv: the base decoder's three up-sampling stages
    /// without their 4×-size copies, in 16/36 of the conv's multiply-adds.
    fused_up: Vec<Option<NearestUpConv2d>>,
}

impl Chain {
    pub fn new(name: &'static str, layers: Vec<Layer>) -> Result<Self, ModelError> {
        let mut fused_up = Vec::with_capacity(layers.len());
        for (index, layer) in layers.iter().enumerate() {
            fused_up.push(match (layer, layers.get(index + 1), layers.get(index + 2)) {
                (Layer::Upsample(2), Some(Layer::Grow(_)), Some(Layer::Conv(conv))) => conv.after_nearest_up()?,
                _ => None,
            });
        }
        Ok(Self { name, layers, fused_up })
    }

    pub fn new_memory(&self) -> Memory {
        Memory { slots: self.layers.iter().map(|_| None).collect() }
    }

    /// Frames `[N, T, C, H, W]` through every layer; the output frames this input completes, in time
    /// order (none while a TPool waits for the rest of its group).
    pub fn run(&self, x: &Tensor, run: &mut Run) -> Result<Option<Tensor>, ModelError> {
        let mut out = Vec::new();
        match run.pace {
            Pace::Chunk => self.descend(0, x.shallow_clone(), run, &mut out)?,
            Pace::FrameByFrame => {
                for t in 0..x.size()[1] {
                    self.descend(0, x.f_narrow(1, t, 1)?, run, &mut out)?;
                }
            }
        }
        Ok(match out.len() {
            0 => None,
            1 => out.pop(),
            _ => Some(Tensor::f_cat(&out, 1)?),
        })
    }

    fn descend(&self, index: usize, x: Tensor, run: &mut Run, out: &mut Vec<Tensor>) -> Result<(), ModelError> {
        if index == self.layers.len() {
            out.push(x);
            return Ok(());
        }
        run.stop.check()?;
        // A traced run goes layer by layer: the reference records each of the three.
        if let (None, Some(up)) = (&run.trace, &self.fused_up[index]) {
            return self.descend_fused_up(index, x, up, run, out);
        }
        let applied = self.apply(index, &x, run)?;
        // The layer's input is not needed below it: held through the recursion, every layer's input would
        // stay alive at once (at full resolution, most of a frame-by-frame decode's memory).
        drop(x);
        let Some(y) = applied else { return Ok(()) };
        let frames = y.size()[1];
        if run.pace == Pace::FrameByFrame && frames > 1 {
            for t in 0..frames {
                self.descend(index + 1, y.f_narrow(1, t, 1)?, run, out)?;
            }
            return Ok(());
        }
        self.descend(index + 1, y, run, out)
    }

    /// Layers `index` (Upsample ×2), `index + 1` (TGrow) and `index + 2` (a 3×3 conv) at once; see `fused_up`.
    fn descend_fused_up(&self, index: usize, x: Tensor, up: &NearestUpConv2d, run: &mut Run, out: &mut Vec<Tensor>) -> Result<(), ModelError> {
        let Layer::Grow(grow) = &self.layers[index + 1] else { unreachable!("fused only before a TGrow") };
        let [n, t, ..] = dims(&x)?;
        let grown = frames_from_channels(&unflatten(&grow.forward(&flatten(&x)?)?, n, t)?, grow.stride)?;
        drop(x);
        let up_conv = |frames: &Tensor| -> Result<Tensor, ModelError> {
            let [n, t, ..] = dims(frames)?;
            unflatten(&up.forward(&flatten(frames)?)?, n, t)
        };
        let frames = grown.size()[1];
        if run.pace == Pace::FrameByFrame && frames > 1 {
            for t in 0..frames {
                run.stop.check()?;
                let y = up_conv(&grown.f_narrow(1, t, 1)?)?;
                self.descend(index + 3, y, run, out)?;
            }
            return Ok(());
        }
        let y = up_conv(&grown)?;
        drop(grown);
        self.descend(index + 3, y, run, out)
    }

    fn apply(&self, index: usize, x: &Tensor, run: &mut Run) -> Result<Option<Tensor>, ModelError> {
        let layer = &self.layers[index];
        let [n, t, _, h, w] = dims(x)?;
        let flat = flatten(x)?;
        let y = match layer {
            Layer::Conv(conv) => unflatten(&conv.forward(&flat)?, n, t)?,
            Layer::Relu => x.f_relu()?,
            Layer::Clamp => (x / 3.0).f_tanh()? * 3.0,
            Layer::Upsample(1) => x.shallow_clone(),
            Layer::Upsample(factor) => {
                let scale = Some(*factor as f64);
                unflatten(&flat.f_upsample_nearest2d([h * factor, w * factor], scale, scale)?, n, t)?
            }
            Layer::PixelShuffle(factor) => unflatten(&flat.f_pixel_shuffle(*factor)?, n, t)?,
            Layer::Mem(block) => {
                let past = self.past(index, x, run)?;
                unflatten(&block.forward(&flat, &flatten(&past)?)?, n, t)?
            }
            Layer::SuperMem(block) => {
                let past = self.past(index, x, run)?;
                unflatten(&block.forward(&flat, &flatten(&past)?)?, n, t)?
            }
            Layer::Pool(pool) => match self.pool(index, pool, x, run)? {
                Some(pooled) => pooled,
                None => return Ok(None),
            },
            Layer::Grow(grow) => frames_from_channels(&unflatten(&grow.forward(&flat)?, n, t)?, grow.stride)?,
        };
        self.record(index, "out", &y, run);
        Ok(Some(y))
    }

    /// Each frame's previous frame in its own sample: the remembered one (zeros at the clip's start) for
    /// the chunk's first, then the chunk shifted by one. Remembers the chunk's last frame for the next.
    fn past(&self, index: usize, x: &Tensor, run: &mut Run) -> Result<Tensor, ModelError> {
        let [n, t, ..] = dims(x)?;
        let previous = match run.memory.slots[index].take() {
            Some(previous) if previous.size()[0] == n => previous,
            Some(previous) => return Err(bad_chunk(format!("a chunk of {n} samples after chunks of {}", previous.size()[0]))),
            None => x.f_narrow(1, 0, 1)?.f_zeros_like()?,
        };
        // Written into a tensor laid out as `x` (a cat of 5-D frames would fall back to the default
        // layout, and channels-last frames would be reordered twice around the next conv).
        let past = x.f_empty_like()?;
        past.f_narrow(1, 0, 1)?.f_copy_(&previous)?;
        if t > 1 {
            past.f_narrow(1, 1, t - 1)?.f_copy_(&x.f_narrow(1, 0, t - 1)?)?;
        }
        run.memory.slots[index] = Some(layout::dense_copy(&x.f_narrow(1, t - 1, 1)?)?);
        self.record(index, "in_x", x, run);
        self.record(index, "in_past", &past, run);
        Ok(past)
    }

    /// Whole groups of `stride` frames (the held ones first) pooled; the rest held for the next chunk.
    fn pool(&self, index: usize, pool: &TPool, x: &Tensor, run: &mut Run) -> Result<Option<Tensor>, ModelError> {
        let n = dims(x)?[0];
        let frames = match run.memory.slots[index].take() {
            Some(held) if held.size()[0] == n => Tensor::f_cat(&[&held, x], 1)?,
            Some(held) => return Err(bad_chunk(format!("a chunk of {n} samples after chunks of {}", held.size()[0]))),
            None => x.shallow_clone(),
        };
        let count = frames.size()[1];
        let whole = count / pool.stride * pool.stride;
        if whole < count {
            run.memory.slots[index] = Some(layout::dense_copy(&frames.f_narrow(1, whole, count - whole)?)?);
        }
        if whole == 0 {
            return Ok(None);
        }
        let groups = whole / pool.stride;
        let grouped = channels_from_frames(&frames.f_narrow(1, 0, whole)?, pool.stride)?;
        Ok(Some(unflatten(&pool.forward(&grouped)?, n, groups)?))
    }

    fn record(&self, index: usize, what: &str, tensor: &Tensor, run: &mut Run) {
        if let (Some(trace), Some(class)) = (run.trace.as_deref_mut(), self.layers[index].traced_class()) {
            trace.push((format!("{}.{index}.{class}.{what}", self.name), tensor.shallow_clone()));
        }
    }
}

fn dims(x: &Tensor) -> Result<[i64; 5], ModelError> {
    match x.size().as_slice() {
        &[n, t, c, h, w] => Ok([n, t, c, h, w]),
        other => Err(bad_chunk(format!("a tensor of shape {other:?} inside the network (expected [N, T, C, H, W])"))),
    }
}

/// TGrow's unfolding: `[N, T, s·C, H, W]` → `[N, T·s, C, H, W]`, the k-th block of C channels becoming
/// frame k. In the default layout a view; channels-last frames are copied in runs of C channels so the
/// result is channels-last too (a plain reshape would copy element by element into the default layout,
/// and the next conv would reorder it back).
fn frames_from_channels(x: &Tensor, stride: i64) -> Result<Tensor, ModelError> {
    let [n, t, sc, h, w] = dims(x)?;
    let c = sc / stride;
    if !layout::frames_are_channels_last(x) {
        return Ok(x.f_reshape([n, t * stride, c, h, w])?);
    }
    let pixels = x.f_permute([0, 1, 3, 4, 2])?.f_reshape([n, t, h, w, stride, c])?;
    let frames = pixels.f_permute([0, 1, 4, 2, 3, 5])?.f_contiguous()?;
    Ok(frames.f_view([n, t * stride, h, w, c])?.f_permute([0, 1, 4, 2, 3])?)
}

/// TPool's grouping, the inverse: `[N, G·s, C, H, W]` → `[N·G, s·C, H, W]`, consecutive frames side by
/// side on channels, channels-last in and out when the frames are.
fn channels_from_frames(x: &Tensor, stride: i64) -> Result<Tensor, ModelError> {
    let [n, frames, c, h, w] = dims(x)?;
    let groups = frames / stride;
    if !layout::frames_are_channels_last(x) {
        return Ok(x.f_reshape([n * groups, stride * c, h, w])?);
    }
    let pixels = x.f_permute([0, 1, 3, 4, 2])?.f_reshape([n * groups, stride, h, w, c])?;
    let grouped = pixels.f_permute([0, 2, 3, 1, 4])?.f_contiguous()?;
    Ok(grouped.f_view([n * groups, h, w, stride * c])?.f_permute([0, 3, 1, 2])?)
}

/// `[N, T, C, H, W]` → `[N·T, C, H, W]`. A single channels-last frame gets a batch stride of a whole
/// frame: the reshape leaves it the channel count, and libtorch, reading layouts from strides, would take
/// the frame as NCHW and reorder it around every conv (frame-by-frame decoding ran 1.7× slower).
fn flatten(x: &Tensor) -> Result<Tensor, ModelError> {
    let [n, t, c, h, w] = dims(x)?;
    if n * t == 1 && layout::frames_are_channels_last(x) {
        return Ok(x.f_as_strided([1, c, h, w], [h * w * c, 1, w * c, c], None)?);
    }
    Ok(x.f_reshape([n * t, c, h, w])?)
}

/// `[N·T, C, H, W]` → `[N, T, C, H, W]`.
fn unflatten(flat: &Tensor, n: i64, t: i64) -> Result<Tensor, ModelError> {
    let size = flat.size();
    Ok(flat.f_reshape([n, t, size[1], size[2], size[3]])?)
}

fn bad_chunk(what: String) -> ModelError {
    ModelError::Unsupported { model: "taehv".into(), what }
}
