//! The layers of Real-CUGAN's ncnn graphs, each taken from the graph where it stands and checked against
//! what the UNet needs there: unpadded convolutions (3×3, and 2×2 stride 2 to go down a level), transposed
//! convolutions (up a level, and up to the output scale), both with ncnn's fused leaky ReLU;
//! squeeze-and-excitation; the crops that trim a skip to the size of the path it joins; the adds.
use tch::{Kind, Tensor};

use crate::models::formats::ncnn::{GraphCursor, LayerWeights, NcnnLayer};
use crate::models::ModelError;
use crate::models::nn::placement::Placement2d;

/// ncnn's fused activation (`9=`) as the Real-CUGAN exports use it.
enum Activation {
    Identity,
    /// The slope as a one-element PReLU weight: tch exposes `leaky_relu` only with slope 0.01.
    LeakyRelu(Tensor),
}

impl Activation {
    fn read(cursor: &GraphCursor, layer: &NcnnLayer, opts: &Placement2d) -> Result<Self, ModelError> {
        match layer.params.int(9, 0) {
            0 => Ok(Activation::Identity),
            2 => {
                let slope = layer.params.array(10).and_then(|a| a.first().copied()).unwrap_or(0.0);
                Ok(Activation::LeakyRelu(opts.place(&Tensor::from_slice(&[slope]))))
            }
            other => Err(cursor.error(layer, format!("fused activation type {other} is not one of Real-CUGAN's (none, leaky ReLU)"))),
        }
    }

    fn apply(&self, y: Tensor) -> Tensor {
        match self {
            Activation::Identity => y,
            Activation::LeakyRelu(slope) => y.prelu(slope),
        }
    }
}

/// The shape a (de)convolution must have at a point of the UNet; the weights come from the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct KernelShape {
    pub(super) size: i64,
    pub(super) stride: i64,
    /// ncnn `4=`: zero padding of a convolution's input, or what a deconvolution trims off each output side.
    pub(super) pad: i64,
}

impl std::fmt::Display for KernelShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{0}×{0} stride {1} pad {2}", self.size, self.stride, self.pad)
    }
}

/// 3×3, unpadded: each one takes a pixel off every side.
pub(super) const CONV_3X3: KernelShape = KernelShape { size: 3, stride: 1, pad: 0 };
/// 2×2 stride 2: down a level (a side must be even).
pub(super) const DOWN_2X2: KernelShape = KernelShape { size: 2, stride: 2, pad: 0 };
/// Transposed 2×2 stride 2: up a level.
pub(super) const UP_2X2: KernelShape = KernelShape { size: 2, stride: 2, pad: 0 };

/// What every (de)convolution layer line says, checked the same way for both.
fn read_kernel_params(cursor: &GraphCursor, layer: &NcnnLayer) -> Result<KernelShape, ModelError> {
    let p = &layer.params;
    let size = p.int(1, 0) as i64;
    let stride = p.int(3, 1) as i64;
    let pad = p.int(4, 0) as i64;
    let square = p.int(11, size as i32) as i64 == size && p.int(13, stride as i32) as i64 == stride;
    let uniform_pad = [14, 15, 16].iter().all(|&id| p.int(id, pad as i32) as i64 == pad);
    let undilated = p.int(2, 1) == 1 && p.int(12, 1) == 1;
    // Deconvolution: extra output rows/columns and a fixed output size; Convolution: a pad value and weights
    // read from a blob. None of them in these files, and none is implemented here.
    let plain_output = p.int(18, 0) == 0 && p.int(19, 0) == 0 && p.int(20, 0) == 0 && p.int(21, 0) == 0;
    if !(square && uniform_pad && undilated && plain_output) || pad < 0 {
        return Err(cursor.error(layer, "expected a square, undilated kernel with the same padding on every side"));
    }
    Ok(KernelShape { size, stride, pad })
}

/// ncnn stores both kernels `[outputs, inputs, kh, kw]`; `out_channels: None` takes what the file has.
fn check_channels(cursor: &GraphCursor, layer: &NcnnLayer, weight: &Tensor, in_channels: i64, out_channels: Option<i64>) -> Result<(), ModelError> {
    let [outputs, inputs, ..] = weight.size()[..] else {
        return Err(cursor.error(layer, "weights are not 4-D"));
    };
    if inputs != in_channels || out_channels.is_some_and(|o| o != outputs) {
        let wanted = out_channels.map_or("any".to_string(), |o| o.to_string());
        return Err(cursor.error(layer, format!("weights are {outputs}x{inputs}, the UNet needs {wanted}x{in_channels} at this point")));
    }
    Ok(())
}

/// A convolution with its fused activation.
pub(super) struct Conv {
    weight: Tensor,
    bias: Option<Tensor>,
    shape: KernelShape,
    activation: Activation,
}

impl Conv {
    /// The next Convolution layer, which must read `input` and have `shape` and these channels; returns it
    /// and its output blob.
    pub(super) fn take<'a>(
        cursor: &mut GraphCursor<'a>,
        input: &'a str,
        shape: KernelShape,
        (in_channels, out_channels): (i64, i64),
        opts: &Placement2d,
    ) -> Result<(Self, &'a str), ModelError> {
        let layer = cursor.take("Convolution")?;
        cursor.check_inputs(layer, &[input])?;
        let LayerWeights::Convolution { weight, bias } = &layer.weights else {
            return Err(cursor.error(layer, "no convolution weights were read"));
        };
        let found = read_kernel_params(cursor, layer)?;
        if found != shape {
            return Err(cursor.error(layer, format!("the UNet needs a {shape} convolution here, the file has {found}")));
        }
        check_channels(cursor, layer, weight, in_channels, Some(out_channels))?;
        let activation = Activation::read(cursor, layer, opts)?;
        let conv = Self { weight: opts.place(weight), bias: bias.as_ref().map(|b| opts.place(b)), shape, activation };
        Ok((conv, cursor.output(layer)?))
    }

    pub(super) fn forward(&self, x: &Tensor) -> Tensor {
        let KernelShape { stride, pad, .. } = self.shape;
        self.activation.apply(x.conv2d(&self.weight, self.bias.as_ref(), [stride, stride], [pad, pad], [1, 1], 1))
    }
}

/// A transposed convolution with its fused activation.
pub(super) struct Deconv {
    /// `[inputs, outputs, kh, kw]`, as `conv_transpose2d` wants it.
    weight: Tensor,
    bias: Option<Tensor>,
    shape: KernelShape,
    activation: Activation,
}

impl Deconv {
    /// The next Deconvolution layer, which must read `input`, have one of `shapes` and these channels
    /// (`None`: any number of outputs).
    pub(super) fn take<'a>(
        cursor: &mut GraphCursor<'a>,
        input: &'a str,
        shapes: &[KernelShape],
        (in_channels, out_channels): (i64, Option<i64>),
        opts: &Placement2d,
    ) -> Result<(Self, &'a str), ModelError> {
        let layer = cursor.take("Deconvolution")?;
        cursor.check_inputs(layer, &[input])?;
        let LayerWeights::Deconvolution { weight, bias } = &layer.weights else {
            return Err(cursor.error(layer, "no deconvolution weights were read"));
        };
        let shape = read_kernel_params(cursor, layer)?;
        if !shapes.contains(&shape) {
            let wanted: Vec<String> = shapes.iter().map(|s| s.to_string()).collect();
            return Err(cursor.error(layer, format!("the UNet needs a {} transposed convolution here, the file has {shape}", wanted.join(" or "))));
        }
        check_channels(cursor, layer, weight, in_channels, out_channels)?;
        let activation = Activation::read(cursor, layer, opts)?;
        let weight = opts.place(&weight.transpose(0, 1));
        let deconv = Self { weight, bias: bias.as_ref().map(|b| opts.place(b)), shape, activation };
        Ok((deconv, cursor.output(layer)?))
    }

    pub(super) fn shape(&self) -> KernelShape {
        self.shape
    }

    pub(super) fn out_channels(&self) -> i64 {
        self.weight.size()[1]
    }

    pub(super) fn forward(&self, x: &Tensor) -> Tensor {
        let KernelShape { stride, pad, .. } = self.shape;
        let y = x.conv_transpose2d(&self.weight, self.bias.as_ref(), [stride, stride], [pad, pad], [0, 0], 1, [1, 1]);
        self.activation.apply(y)
    }
}

/// Squeeze-and-excitation (ncnn: global average Pooling, InnerProduct + ReLU, InnerProduct + sigmoid,
/// BinaryOp Mul): each channel is scaled by a weight computed from the mean of every channel over the
/// whole input, which is why a tile's result depends on the tile's whole extent. The means and the two
/// small fully connected layers are fp32 whatever the model's dtype: they cost nothing, and each mean sums
/// a whole tile.
pub(super) struct SqueezeExcite {
    squeeze: FullyConnected,
    excite: FullyConnected,
}

/// An ncnn InnerProduct (its fused activation is applied by `SqueezeExcite`, which checked it).
struct FullyConnected {
    /// `[outputs, inputs]`, fp32.
    weight: Tensor,
    bias: Option<Tensor>,
}

impl FullyConnected {
    fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

impl SqueezeExcite {
    pub(super) fn take<'a>(cursor: &mut GraphCursor<'a>, input: &'a str, channels: i64, opts: &Placement2d) -> Result<(Self, &'a str), ModelError> {
        let pool = cursor.take("Pooling")?;
        cursor.check_inputs(pool, &[input])?;
        if pool.params.int(0, 0) != 1 || pool.params.int(4, 0) != 1 {
            return Err(cursor.error(pool, "expected a global average pooling (0=1 4=1)"));
        }
        let (squeeze, reduced) = Self::fully_connected(cursor, cursor.output(pool)?, (channels, None), 1, opts)?;
        let hidden = squeeze.weight.size()[0];
        let (excite, weights) = Self::fully_connected(cursor, reduced, (hidden, Some(channels)), 4, opts)?;
        let scale = cursor.take("BinaryOp")?;
        if scale.params.int(0, 0) != 2 || scale.params.int(1, 0) != 0 {
            return Err(cursor.error(scale, "expected an elementwise Mul of two blobs (0=2, no scalar)"));
        }
        cursor.check_inputs_unordered(scale, [input, weights])?;
        Ok((Self { squeeze, excite }, cursor.output(scale)?))
    }

    /// An InnerProduct reading `input` with `inputs` inputs (and `outputs` outputs where the UNet fixes them)
    /// and fused activation `activation` (1 ReLU, 4 sigmoid).
    fn fully_connected<'a>(
        cursor: &mut GraphCursor<'a>,
        input: &'a str,
        (inputs, outputs): (i64, Option<i64>),
        activation: i32,
        opts: &Placement2d,
    ) -> Result<(FullyConnected, &'a str), ModelError> {
        let layer = cursor.take("InnerProduct")?;
        cursor.check_inputs(layer, &[input])?;
        let LayerWeights::InnerProduct { weight, bias } = &layer.weights else {
            return Err(cursor.error(layer, "no fully connected weights were read"));
        };
        let [found_outputs, found_inputs] = weight.size()[..] else {
            return Err(cursor.error(layer, "weights are not 2-D"));
        };
        if found_inputs != inputs || outputs.is_some_and(|o| o != found_outputs) || layer.params.int(9, 0) != activation {
            return Err(cursor.error(
                layer,
                format!("expected {inputs} inputs, activation {activation}; the file has {found_inputs} inputs, activation {}", layer.params.int(9, 0)),
            ));
        }
        let fp32 = |t: &Tensor| t.to_device(opts.device).to_kind(Kind::Float);
        Ok((FullyConnected { weight: fp32(weight), bias: bias.as_ref().map(fp32) }, cursor.output(layer)?))
    }

    pub(super) fn forward(&self, x: &Tensor) -> Tensor {
        let [batch, channels, ..] = x.size()[..] else { unreachable!("UNet activations are 4-D") };
        let means = x.mean_dim(&[2i64, 3][..], false, Kind::Float);
        let weights = self.excite.forward(&self.squeeze.forward(&means).relu()).sigmoid();
        x * weights.to_kind(x.kind()).view([batch, channels, 1, 1])
    }
}

/// ncnn `Crop` of the same margin off every side of H and W: how a skip is trimmed to the path it joins
/// (the convolutions are unpadded, so each level's path comes back smaller than its skip).
pub(super) struct EdgeCrop {
    margin: i64,
}

impl EdgeCrop {
    /// The next Crop layer, which must read `input` and take `margin` pixels off every side of H and W
    /// (the UNet's geometry fixes each margin).
    pub(super) fn take<'a>(cursor: &mut GraphCursor<'a>, input: &'a str, margin: i64) -> Result<(Self, &'a str), ModelError> {
        let layer = cursor.take("Crop")?;
        cursor.check_inputs(layer, &[input])?;
        let p = &layer.params;
        let m = margin as f32;
        let (starts, ends, axes) = (p.array(9), p.array(10), p.array(11));
        if starts != Some(&[m, m][..]) || ends != Some(&[-m, -m][..]) || axes != Some(&[-2.0, -1.0][..]) {
            return Err(cursor.error(
                layer,
                format!("expected {margin} px cropped off every side of H and W, found starts {starts:?} ends {ends:?} axes {axes:?}"),
            ));
        }
        Ok((Self { margin }, cursor.output(layer)?))
    }

    pub(super) fn forward(&self, x: &Tensor) -> Tensor {
        let [.., height, width] = x.size()[..] else { unreachable!("UNet activations are 4-D") };
        x.narrow(2, self.margin, height - 2 * self.margin).narrow(3, self.margin, width - 2 * self.margin)
    }
}

/// The next layer is an ncnn BinaryOp adding exactly these two blobs; returns its output blob.
pub(super) fn take_add<'a>(cursor: &mut GraphCursor<'a>, inputs: [&'a str; 2]) -> Result<&'a str, ModelError> {
    let layer = cursor.take("BinaryOp")?;
    if layer.params.int(0, 0) != 0 || layer.params.int(1, 0) != 0 {
        return Err(cursor.error(layer, "expected an elementwise Add of two blobs (0=0, no scalar)"));
    }
    cursor.check_inputs_unordered(layer, inputs)?;
    cursor.output(layer)
}
