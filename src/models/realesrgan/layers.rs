//! The layers the ncnn graphs use: convolutions with fused activations, PReLU, nearest and bicubic resizes.
use tch::{Device, Tensor};

use crate::models::formats::ncnn::{GraphCursor, LayerWeights, NcnnLayer};
use crate::models::stop::StopFlag;
use crate::models::ModelError;
use crate::models::nn::placement::Placement2d;

pub(super) enum Activation {
    Identity,
    Relu,
    /// The slope as a one-element PReLU weight: tch exposes leaky_relu only with slope 0.01.
    LeakyRelu(Tensor),
}

/// What the architecture expects of a convolution; the kernel comes from the file.
#[derive(Clone, Copy)]
pub(super) struct ConvSpec {
    pub(super) in_channels: i64,
    pub(super) out_channels: Option<i64>,
}

/// A stride-1 "same" convolution with ncnn's fused activation (`9=` type, `10=` parameters).
pub(super) struct Conv2d {
    weight: Tensor,
    bias: Option<Tensor>,
    padding: [i64; 2],
    dilation: [i64; 2],
    activation: Activation,
}

impl Conv2d {
    pub(super) fn new(cursor: &GraphCursor, layer: &NcnnLayer, spec: ConvSpec, opts: &Placement2d) -> Result<Self, ModelError> {
        let LayerWeights::Convolution { weight, bias } = &layer.weights else {
            return Err(cursor.error(layer, "no convolution weights were read"));
        };
        let p = &layer.params;
        let [out_channels, in_channels, kernel_h, kernel_w] = weight.size()[..] else {
            return Err(cursor.error(layer, "weights are not OIHW"));
        };
        let dilation_w = p.int(2, 1) as i64;
        let dilation = [p.int(12, dilation_w as i32) as i64, dilation_w];
        let stride_w = p.int(3, 1);
        let pad_left = p.int(4, 0) as i64;
        let pad_top = p.int(14, pad_left as i32) as i64;
        let pads = [pad_left, pad_top, p.int(15, pad_left as i32) as i64, p.int(16, pad_top as i32) as i64];
        let same = [dilation[1] * (kernel_w - 1) / 2, dilation[0] * (kernel_h - 1) / 2];
        if stride_w != 1 || p.int(13, stride_w) != 1 {
            return Err(cursor.error(layer, "stride is not 1"));
        }
        if kernel_w % 2 == 0 || kernel_h % 2 == 0 || pads != [same[0], same[1], same[0], same[1]] {
            return Err(cursor.error(layer, format!("padding {pads:?} is not the same-size padding {same:?} for a {kernel_h}x{kernel_w} kernel")));
        }
        if in_channels != spec.in_channels || spec.out_channels.is_some_and(|o| o != out_channels) {
            return Err(cursor.error(
                layer,
                format!(
                    "weights are {out_channels}x{in_channels}, the architecture needs {}x{} at this point",
                    spec.out_channels.map_or("any".to_string(), |o| o.to_string()),
                    spec.in_channels
                ),
            ));
        }
        let activation = match p.int(9, 0) {
            0 => Activation::Identity,
            1 => Activation::Relu,
            2 => {
                let slope = p.array(10).and_then(|a| a.first().copied()).unwrap_or(0.0);
                Activation::LeakyRelu(opts.place(&Tensor::from_slice(&[slope])))
            }
            other => return Err(cursor.error(layer, format!("fused activation type {other} is not supported"))),
        };
        Ok(Self {
            weight: opts.place(weight),
            bias: bias.as_ref().map(|b| opts.place(b)),
            padding: [same[1], same[0]],
            dilation,
            activation,
        })
    }

    pub(super) fn out_channels(&self) -> i64 {
        self.weight.size()[0]
    }

    pub(super) fn radius(&self) -> i64 {
        self.padding[0].max(self.padding[1])
    }

    pub(super) fn forward(&self, x: &Tensor) -> Tensor {
        self.activate(x.conv2d(&self.weight, self.bias.as_ref(), [1, 1], self.padding, self.dilation, 1))
    }

    /// [`Conv2d::forward`] in bands of output rows with `stop` asked between them, for the
    /// convolutions at the output's size: on the CPU one of them over a 704×576 frame is a second or
    /// more under load, too long between two asks. Elsewhere (a GPU) the frame is one call.
    pub(super) fn forward_until(&self, x: &Tensor, stop: &StopFlag) -> Result<Tensor, ModelError> {
        let [_, _, height, width] = x.size()[..] else { unreachable!("a conv2d input is NCHW") };
        let band_rows = (BAND_PIXELS / width.max(1)).max(1);
        if x.device() != Device::Cpu || height <= band_rows {
            stop.check()?;
            return Ok(self.forward(x));
        }
        let [pad_rows, pad_cols] = self.padding;
        let padded = x.constant_pad_nd([0, 0, pad_rows, pad_rows]);
        let mut bands = Vec::with_capacity((height / band_rows + 1) as usize);
        for top in (0..height).step_by(band_rows as usize) {
            stop.check()?;
            let rows = band_rows.min(height - top);
            let input = padded.narrow(2, top, rows + 2 * pad_rows);
            bands.push(self.activate(input.conv2d(&self.weight, self.bias.as_ref(), [1, 1], [0, pad_cols], self.dilation, 1)));
        }
        Ok(Tensor::cat(&bands, 2))
    }

    fn activate(&self, y: Tensor) -> Tensor {
        match &self.activation {
            Activation::Identity => y,
            Activation::Relu => y.relu(),
            Activation::LeakyRelu(slope) => y.prelu(slope),
        }
    }
}

/// The output pixels of one band in [`Conv2d::forward_until`]: a 64→64 3×3 band is about 5 GFLOP, a
/// tenth of a second or so on two cores.
const BAND_PIXELS: i64 = 1 << 16;

pub(super) struct PRelu {
    slopes: Tensor,
}

impl PRelu {
    pub(super) fn new(cursor: &GraphCursor, layer: &NcnnLayer, channels: i64, opts: &Placement2d) -> Result<Self, ModelError> {
        let LayerWeights::PRelu { slopes } = &layer.weights else {
            return Err(cursor.error(layer, "no PReLU slopes were read"));
        };
        let count = slopes.numel() as i64;
        if count != channels && count != 1 {
            return Err(cursor.error(layer, format!("{count} slopes for {channels} channels")));
        }
        Ok(Self { slopes: opts.place(slopes) })
    }

    pub(super) fn forward(&self, x: &Tensor) -> Tensor {
        x.prelu(&self.slopes)
    }
}

/// ncnn `Interp` with nearest resize by a whole factor; returns the factor.
pub(super) fn nearest_upsample_factor(cursor: &GraphCursor, layer: &NcnnLayer) -> Result<i64, ModelError> {
    let (kind, sy, sx) = (layer.params.int(0, 0), layer.params.float(1, 1.0), layer.params.float(2, 1.0));
    if kind != 1 || sy != sx || sy < 1.0 || sy.fract() != 0.0 {
        return Err(cursor.error(layer, format!("expected a nearest upsample by a whole factor, found type {kind} scale {sy}x{sx}")));
    }
    Ok(sy as i64)
}

pub(super) fn upsample_nearest(x: &Tensor, factor: i64) -> Tensor {
    let size = x.size();
    x.upsample_nearest2d([size[2] * factor, size[3] * factor], None, None)
}

/// ncnn `Interp` type 3 (bicubic, a = -0.75, half-pixel centres, edge clamp) == PyTorch's
/// `upsample_bicubic2d(align_corners = false)`.
pub(super) struct BicubicResize {
    pub(super) scale: f64,
}

impl BicubicResize {
    pub(super) fn new<'a>(cursor: &mut GraphCursor<'a>, input: &'a str) -> Result<Self, ModelError> {
        let layer = cursor.take("Interp")?;
        cursor.check_inputs(layer, &[input])?;
        let (kind, sy, sx) = (layer.params.int(0, 0), layer.params.float(1, 1.0), layer.params.float(2, 1.0));
        if kind != 3 || sy != sx || !(sy > 0.0 && sy < 1.0) || layer.params.int(6, 0) != 0 {
            return Err(cursor.error(layer, format!("expected a bicubic output downscale, found type {kind} scale {sy}x{sx}")));
        }
        Ok(Self { scale: sy as f64 })
    }

    pub(super) fn forward(&self, x: &Tensor) -> Tensor {
        let size = x.size();
        // ncnn truncates `size * scale` in f32; the scales it ships (0.5, 0.75) are exact.
        let out = |len: i64| (len as f32 * self.scale as f32) as i64;
        x.upsample_bicubic2d([out(size[2]), out(size[3])], false, None, None)
    }
}

/// The two networks' skip connections: an ncnn BinaryOp that adds exactly these two blobs.
pub(super) fn check_binary_add<'a>(cursor: &GraphCursor<'a>, layer: &'a NcnnLayer, inputs: [&'a str; 2]) -> Result<(), ModelError> {
    if layer.params.int(0, 0) != 0 || layer.params.int(1, 0) != 0 {
        return Err(cursor.error(layer, "expected an elementwise Add of two blobs (0=0, no scalar)"));
    }
    cursor.check_inputs_unordered(layer, inputs)
}
