//! Real-ESRGAN super-resolution built directly from the ncnn files the Real-ESRGAN packages ship:
//! `SrVggNetCompact` (realesr-animevideov3) and `RrdbNet` (RealESRGAN_x4plus, x4plus_anime_6B).
//! The ncnn graph is walked once at load time and mapped onto these structs; the walk checks
//! that every layer reads the blobs the architecture implies, so a different graph is an error.
use std::path::Path;

use tch::{Device, Kind, Tensor};

use super::ncnn::{self, GraphCursor, LayerWeights, NcnnLayer};
use super::ModelError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    pub device: Device,
    /// `Float` or `BFloat16` (`Half` too, for GPUs); weights and activations use it inside `forward`.
    pub kind: Kind,
    /// NHWC strides for weights and activations: oneDNN's fast path on CPU.
    pub channels_last: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self { device: Device::Cpu, kind: Kind::Float, channels_last: false }
    }
}

impl LoadOptions {
    fn place(&self, tensor: &Tensor) -> Tensor {
        let placed = tensor.to_device(self.device).to_kind(self.kind);
        if self.channels_last && placed.dim() == 4 {
            // tch has no memory-format API; an NHWC-contiguous tensor viewed as NCHW is exactly
            // what `torch.channels_last` is, and libtorch picks the format up from the strides.
            placed.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2])
        } else {
            placed
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RealEsrganArch {
    Compact,
    Rrdb,
}

enum Network {
    Compact(SrVggNetCompact),
    Rrdb(RrdbNet),
}

pub struct RealEsrgan {
    network: Network,
    /// The UP2X/UP3X files end in a bicubic Interp that shrinks the x4 output.
    output_resize: Option<BicubicResize>,
    options: LoadOptions,
    native_scale: i64,
    receptive_radius: i64,
}

impl RealEsrgan {
    pub fn load(param: &Path, bin: &Path, opts: &LoadOptions) -> Result<Self, ModelError> {
        if !matches!(opts.kind, Kind::Float | Kind::BFloat16 | Kind::Half) {
            return Err(ModelError::Unsupported {
                model: model_name(param),
                what: format!("dtype {:?} (use Float or BFloat16)", opts.kind),
            });
        }
        let layers = ncnn::load(param, bin)?;
        tch::no_grad(|| Self::from_layers(param, &layers, opts))
    }

    fn from_layers(param: &Path, layers: &[NcnnLayer], opts: &LoadOptions) -> Result<Self, ModelError> {
        let mut cursor = GraphCursor::new(param, layers)?;
        let input_layer = cursor.take("Input")?;
        let input = cursor.output(input_layer)?;
        let (network, output) = match detect_arch(param, layers)? {
            RealEsrganArch::Compact => {
                let (net, output) = SrVggNetCompact::new(&mut cursor, input, opts)?;
                (Network::Compact(net), output)
            }
            RealEsrganArch::Rrdb => {
                let (net, output) = RrdbNet::new(&mut cursor, input, opts)?;
                (Network::Rrdb(net), output)
            }
        };
        let output_resize = match cursor.peek_kind() {
            Some("Interp") => Some(BicubicResize::new(&mut cursor, output)?),
            _ => None,
        };
        cursor.finish()?;

        let mut ops = match &network {
            Network::Compact(net) => net.spatial_ops(),
            Network::Rrdb(net) => net.spatial_ops(),
        };
        if let Some(resize) = &output_resize {
            ops.push(SpatialOp::Bicubic { scale: resize.scale });
        }
        let scale = ops.iter().map(SpatialOp::scale).product::<f64>();
        if (scale - scale.round()).abs() > 1e-9 || scale < 1.0 {
            return Err(ModelError::Format {
                path: param.to_path_buf(),
                reason: format!("the graph scales by {scale}, not by a whole factor"),
            });
        }
        let mut receptive_radius = path_receptive_radius(&ops);
        if output_resize.is_none() && scale == 4.0 {
            // `upscale(x, 2)` appends a 2x bicubic shrink; tiles must cover that path too.
            ops.push(SpatialOp::Bicubic { scale: 0.5 });
            receptive_radius = receptive_radius.max(path_receptive_radius(&ops));
        }
        Ok(Self { network, output_resize, options: *opts, native_scale: scale.round() as i64, receptive_radius })
    }

    pub fn arch(&self) -> RealEsrganArch {
        match self.network {
            Network::Compact(_) => RealEsrganArch::Compact,
            Network::Rrdb(_) => RealEsrganArch::Rrdb,
        }
    }

    pub fn native_scale(&self) -> i64 {
        self.native_scale
    }

    /// Input pixels per side that can influence an output pixel, for `forward` and for every
    /// scale `upscale` accepts; tiles with at least this much context reproduce the whole frame.
    pub fn receptive_radius(&self) -> i64 {
        self.receptive_radius
    }

    pub fn options(&self) -> &LoadOptions {
        &self.options
    }

    /// `[N,3,H,W]` Float in [0,1] -> `[N,3,H*s,W*s]` Float in [0,1], NCHW-contiguous.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        tch::no_grad(|| {
            let _span = tracing::trace_span!("realesrgan", arch = ?self.arch()).entered();
            let y = self.forward_network(x);
            let y = match &self.output_resize {
                Some(resize) => resize.forward(&y),
                None => y,
            };
            y.clamp(0.0, 1.0).contiguous()
        })
    }

    /// Upscales by 2 or 4. A x4 network serves 2 as x4 then a 2x bicubic shrink (a = -0.75, half-pixel
    /// centres, no antialias). Why this filter: it is exactly what the shipped `*_UP2X` ncnn files do
    /// with the same weights, so results equal the engine people already use (tested); at exactly 0.5
    /// its taps are (-0.09, 0.59, 0.59, -0.09), a pair average with slight sharpening that keeps
    /// aliasing low. Real-ESRGAN's Python `outscale` uses a Lanczos resize instead, which would give
    /// slightly different pixels from every ncnn-based tool.
    pub fn upscale(&self, x: &Tensor, scale: i64) -> Result<Tensor, ModelError> {
        if scale == self.native_scale {
            return Ok(self.forward(x));
        }
        if scale == 2 && self.native_scale == 4 && self.output_resize.is_none() {
            return Ok(tch::no_grad(|| {
                let y = BicubicResize { scale: 0.5 }.forward(&self.forward_network(x));
                y.clamp(0.0, 1.0).contiguous()
            }));
        }
        Err(ModelError::Unsupported {
            model: format!("realesrgan x{}", self.native_scale),
            what: format!("scale {scale} (supported: {})", if self.native_scale == 4 { "2 and 4".to_string() } else { self.native_scale.to_string() }),
        })
    }

    /// Native-scale output of the network, unclamped, Float.
    fn forward_network(&self, x: &Tensor) -> Tensor {
        let x = x.to_kind(Kind::Float);
        match &self.network {
            Network::Compact(net) => net.forward(&x, &self.options),
            Network::Rrdb(net) => net.forward(&self.options.place(&x)).to_kind(Kind::Float),
        }
    }
}

fn model_name(param: &Path) -> String {
    param.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| param.display().to_string())
}

fn detect_arch(param: &Path, layers: &[NcnnLayer]) -> Result<RealEsrganArch, ModelError> {
    let has = |kind: &str| layers.iter().any(|l| l.kind == kind);
    match (has("PReLU") && has("PixelShuffle"), has("Eltwise") && has("Concat")) {
        (true, false) => Ok(RealEsrganArch::Compact),
        (false, true) => Ok(RealEsrganArch::Rrdb),
        _ => Err(ModelError::Format {
            path: param.to_path_buf(),
            reason: "neither SRVGGNetCompact (PReLU + PixelShuffle) nor RRDBNet (Concat + Eltwise) layers".into(),
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// Layers.

enum Activation {
    Identity,
    Relu,
    /// The slope as a one-element PReLU weight: tch exposes leaky_relu only with slope 0.01.
    LeakyRelu(Tensor),
}

/// What the architecture expects of a convolution; the kernel comes from the file.
#[derive(Clone, Copy)]
struct ConvSpec {
    in_channels: i64,
    out_channels: Option<i64>,
}

/// A stride-1 "same" convolution with ncnn's fused activation (`9=` type, `10=` parameters).
struct Conv2d {
    weight: Tensor,
    bias: Option<Tensor>,
    padding: [i64; 2],
    dilation: [i64; 2],
    activation: Activation,
}

impl Conv2d {
    fn new(cursor: &GraphCursor, layer: &NcnnLayer, spec: ConvSpec, opts: &LoadOptions) -> Result<Self, ModelError> {
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

    fn out_channels(&self) -> i64 {
        self.weight.size()[0]
    }

    fn radius(&self) -> i64 {
        self.padding[0].max(self.padding[1])
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let y = x.conv2d(&self.weight, self.bias.as_ref(), [1, 1], self.padding, self.dilation, 1);
        match &self.activation {
            Activation::Identity => y,
            Activation::Relu => y.relu(),
            Activation::LeakyRelu(slope) => y.prelu(slope),
        }
    }
}

struct PRelu {
    slopes: Tensor,
}

impl PRelu {
    fn new(cursor: &GraphCursor, layer: &NcnnLayer, channels: i64, opts: &LoadOptions) -> Result<Self, ModelError> {
        let LayerWeights::PRelu { slopes } = &layer.weights else {
            return Err(cursor.error(layer, "no PReLU slopes were read"));
        };
        let count = slopes.numel() as i64;
        if count != channels && count != 1 {
            return Err(cursor.error(layer, format!("{count} slopes for {channels} channels")));
        }
        Ok(Self { slopes: opts.place(slopes) })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        x.prelu(&self.slopes)
    }
}

/// ncnn `Interp` with nearest resize by a whole factor; returns the factor.
fn nearest_upsample_factor(cursor: &GraphCursor, layer: &NcnnLayer) -> Result<i64, ModelError> {
    let (kind, sy, sx) = (layer.params.int(0, 0), layer.params.float(1, 1.0), layer.params.float(2, 1.0));
    if kind != 1 || sy != sx || sy < 1.0 || sy.fract() != 0.0 {
        return Err(cursor.error(layer, format!("expected a nearest upsample by a whole factor, found type {kind} scale {sy}x{sx}")));
    }
    Ok(sy as i64)
}

fn upsample_nearest(x: &Tensor, factor: i64) -> Tensor {
    let size = x.size();
    x.upsample_nearest2d([size[2] * factor, size[3] * factor], None, None)
}

/// ncnn `Interp` type 3 (bicubic, a = -0.75, half-pixel centres, edge clamp) == PyTorch's
/// `upsample_bicubic2d(align_corners = false)`.
struct BicubicResize {
    scale: f64,
}

impl BicubicResize {
    fn new<'a>(cursor: &mut GraphCursor<'a>, input: &'a str) -> Result<Self, ModelError> {
        let layer = cursor.take("Interp")?;
        cursor.check_inputs(layer, &[input])?;
        let (kind, sy, sx) = (layer.params.int(0, 0), layer.params.float(1, 1.0), layer.params.float(2, 1.0));
        if kind != 3 || sy != sx || !(sy > 0.0 && sy < 1.0) || layer.params.int(6, 0) != 0 {
            return Err(cursor.error(layer, format!("expected a bicubic output downscale, found type {kind} scale {sy}x{sx}")));
        }
        Ok(Self { scale: sy as f64 })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let size = x.size();
        // ncnn truncates `size * scale` in f32; the scales it ships (0.5, 0.75) are exact.
        let out = |len: i64| (len as f32 * self.scale as f32) as i64;
        x.upsample_bicubic2d([out(size[2]), out(size[3])], false, None, None)
    }
}

// ---------------------------------------------------------------------------------------------
// SRVGGNetCompact.

pub struct SrVggNetCompact {
    conv_first: Conv2d,
    act_first: PRelu,
    body: Vec<(Conv2d, PRelu)>,
    conv_last: Conv2d,
    upscale: i64,
}

impl SrVggNetCompact {
    /// Layers: conv+PReLU, N × (conv+PReLU), conv to 3·s² channels, PixelShuffle(s),
    /// nearest Interp(s) of the input, Add. Returns the net and its output blob.
    fn new<'a>(cursor: &mut GraphCursor<'a>, input: &'a str, opts: &LoadOptions) -> Result<(Self, &'a str), ModelError> {
        let first = cursor.take("Convolution")?;
        cursor.check_inputs(first, &[input])?;
        let conv_first = Conv2d::new(cursor, first, ConvSpec { in_channels: 3, out_channels: None }, opts)?;
        let num_feat = conv_first.out_channels();
        let act_layer = cursor.take("PReLU")?;
        cursor.check_inputs(act_layer, &[cursor.output(first)?])?;
        let act_first = PRelu::new(cursor, act_layer, num_feat, opts)?;
        let mut feature = cursor.output(act_layer)?;
        let mut body = Vec::new();
        let last_layer = loop {
            let conv_layer = cursor.take("Convolution")?;
            cursor.check_inputs(conv_layer, &[feature])?;
            if cursor.peek_kind() != Some("PReLU") {
                break conv_layer;
            }
            let conv = Conv2d::new(cursor, conv_layer, ConvSpec { in_channels: num_feat, out_channels: Some(num_feat) }, opts)?;
            let act_layer = cursor.take("PReLU")?;
            cursor.check_inputs(act_layer, &[cursor.output(conv_layer)?])?;
            body.push((conv, PRelu::new(cursor, act_layer, num_feat, opts)?));
            feature = cursor.output(act_layer)?;
        };

        let shuffle = cursor.take("PixelShuffle")?;
        cursor.check_inputs(shuffle, &[cursor.output(last_layer)?])?;
        let upscale = shuffle.params.int(0, 1) as i64;
        if upscale < 1 || shuffle.params.int(1, 0) != 0 {
            return Err(cursor.error(shuffle, "expected PyTorch-order pixel shuffle (1=0) by a positive factor"));
        }
        let conv_spec = ConvSpec { in_channels: num_feat, out_channels: Some(3 * upscale * upscale) };
        let conv_last = Conv2d::new(cursor, last_layer, conv_spec, opts)?;

        let base = cursor.take("Interp")?;
        cursor.check_inputs(base, &[input])?;
        if nearest_upsample_factor(cursor, base)? != upscale {
            return Err(cursor.error(base, format!("the skip upsample must match the pixel shuffle factor {upscale}")));
        }
        let add = cursor.take("BinaryOp")?;
        check_binary_add(cursor, add, [cursor.output(shuffle)?, cursor.output(base)?])?;
        Ok((Self { conv_first, act_first, body, conv_last, upscale }, cursor.output(add)?))
    }

    /// `x` is the Float input; the body runs in `opts.kind`, but the skip is added in Float:
    /// in bf16 the upsampled image itself would be rounded by up to 2^-9, ten times the
    /// rounding of the small residual the body predicts.
    fn forward(&self, x: &Tensor, opts: &LoadOptions) -> Tensor {
        let mut h = self.act_first.forward(&self.conv_first.forward(&opts.place(x)));
        for (conv, act) in &self.body {
            h = act.forward(&conv.forward(&h));
        }
        let residual = self.conv_last.forward(&h).to_kind(Kind::Float).pixel_shuffle(self.upscale);
        residual + upsample_nearest(x, self.upscale)
    }

    /// The longest path (the conv chain; the skip branch reaches no further).
    fn spatial_ops(&self) -> Vec<SpatialOp> {
        let convs = std::iter::once(&self.conv_first).chain(self.body.iter().map(|(c, _)| c)).chain([&self.conv_last]);
        let mut ops: Vec<SpatialOp> = convs.map(|c| SpatialOp::Conv { radius: c.radius() }).collect();
        ops.push(SpatialOp::Upsample { factor: self.upscale });
        ops
    }
}

fn check_binary_add<'a>(cursor: &GraphCursor<'a>, layer: &'a NcnnLayer, inputs: [&'a str; 2]) -> Result<(), ModelError> {
    if layer.params.int(0, 0) != 0 || layer.params.int(1, 0) != 0 {
        return Err(cursor.error(layer, "expected an elementwise Add of two blobs (0=0, no scalar)"));
    }
    cursor.check_inputs_unordered(layer, inputs)
}

// ---------------------------------------------------------------------------------------------
// RRDBNet.

/// Five densely connected convs; `x + residual_scale · conv5(...)` (ncnn: Eltwise sum with coefficients).
pub struct ResidualDenseBlock {
    convs: Vec<Conv2d>,
    residual_scale: f64,
}

const DENSE_CONVS: usize = 5;
const RDBS_PER_RRDB: usize = 3;

impl ResidualDenseBlock {
    fn new<'a>(
        cursor: &mut GraphCursor<'a>,
        input: &'a str,
        num_feat: i64,
        opts: &LoadOptions,
    ) -> Result<(Self, &'a str), ModelError> {
        let mut features = vec![input];
        let mut convs: Vec<Conv2d> = Vec::with_capacity(DENSE_CONVS);
        for index in 0..DENSE_CONVS {
            let conv_input = if index == 0 {
                input
            } else {
                let concat = cursor.take("Concat")?;
                cursor.check_inputs(concat, &features)?;
                if concat.params.int(0, 0) != 0 {
                    return Err(cursor.error(concat, "expected a channel concat (0=0)"));
                }
                cursor.output(concat)?
            };
            let layer = cursor.take("Convolution")?;
            cursor.check_inputs(layer, &[conv_input])?;
            let num_grow = convs.first().map(Conv2d::out_channels);
            let in_channels = num_feat + index as i64 * num_grow.unwrap_or(0);
            let out_channels = if index + 1 == DENSE_CONVS { Some(num_feat) } else { num_grow };
            convs.push(Conv2d::new(cursor, layer, ConvSpec { in_channels, out_channels }, opts)?);
            features.push(cursor.output(layer)?);
        }
        let (residual_scale, output) = residual_add(cursor, features[DENSE_CONVS], input)?;
        Ok((Self { convs, residual_scale }, output))
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let mut features = vec![x.shallow_clone()];
        for conv in &self.convs {
            let input = if features.len() == 1 { x.shallow_clone() } else { Tensor::cat(&features, 1) };
            features.push(conv.forward(&input));
        }
        let last = features.pop().expect("five convs ran");
        x + last * self.residual_scale
    }
}

/// An ncnn Eltwise sum `skip + scale · branch`; returns the branch scale and the output blob.
fn residual_add<'a>(cursor: &mut GraphCursor<'a>, branch: &'a str, skip: &'a str) -> Result<(f64, &'a str), ModelError> {
    let layer = cursor.take("Eltwise")?;
    let coefficients = layer.params.array(1).unwrap_or(&[]);
    let origins: Vec<&str> = layer.inputs.iter().map(|b| cursor.origin(b)).collect();
    let branch_first = origins == [cursor.origin(branch), cursor.origin(skip)];
    let skip_first = origins == [cursor.origin(skip), cursor.origin(branch)];
    let (branch_coefficient, skip_coefficient) = match (coefficients, branch_first, skip_first) {
        ([a, b], true, _) => (*a, *b),
        ([a, b], _, true) => (*b, *a),
        _ => {
            return Err(cursor.error(
                layer,
                format!("expected a weighted sum of {branch:?} and {skip:?} with 2 coefficients, found {origins:?} with {coefficients:?}"),
            ))
        }
    };
    if layer.params.int(0, 1) != 1 || skip_coefficient != 1.0 {
        return Err(cursor.error(layer, "expected a sum (0=1) with the skip input weighted 1"));
    }
    Ok((branch_coefficient as f64, cursor.output(layer)?))
}

pub struct Rrdb {
    blocks: Vec<ResidualDenseBlock>,
    residual_scale: f64,
}

impl Rrdb {
    fn new<'a>(cursor: &mut GraphCursor<'a>, input: &'a str, num_feat: i64, opts: &LoadOptions) -> Result<(Self, &'a str), ModelError> {
        let mut blocks = Vec::with_capacity(RDBS_PER_RRDB);
        let mut feature = input;
        for _ in 0..RDBS_PER_RRDB {
            let (block, output) = ResidualDenseBlock::new(cursor, feature, num_feat, opts)?;
            blocks.push(block);
            feature = output;
        }
        let (residual_scale, output) = residual_add(cursor, feature, input)?;
        Ok((Self { blocks, residual_scale }, output))
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let out = self.blocks.iter().fold(x.shallow_clone(), |h, block| block.forward(&h));
        x + out * self.residual_scale
    }
}

pub struct RrdbNet {
    conv_first: Conv2d,
    body: Vec<Rrdb>,
    conv_body: Conv2d,
    /// (nearest upsample factor, conv) pairs.
    upsamplers: Vec<(i64, Conv2d)>,
    conv_hr: Conv2d,
    conv_last: Conv2d,
}

impl RrdbNet {
    fn new<'a>(cursor: &mut GraphCursor<'a>, input: &'a str, opts: &LoadOptions) -> Result<(Self, &'a str), ModelError> {
        let first = cursor.take("Convolution")?;
        cursor.check_inputs(first, &[input])?;
        let conv_first = Conv2d::new(cursor, first, ConvSpec { in_channels: 3, out_channels: None }, opts)?;
        let num_feat = conv_first.out_channels();
        let head = cursor.output(first)?;
        let feature_conv = ConvSpec { in_channels: num_feat, out_channels: Some(num_feat) };

        // Each RRDB is three RDBs plus its own residual: four Eltwise layers per RRDB.
        let mut body = Vec::new();
        let mut feature = head;
        while cursor.peek_kind() == Some("Convolution") && cursor.remaining().iter().any(|l| l.kind == "Eltwise") {
            let (block, output) = Rrdb::new(cursor, feature, num_feat, opts)?;
            body.push(block);
            feature = output;
        }
        let body_layer = cursor.take("Convolution")?;
        cursor.check_inputs(body_layer, &[feature])?;
        let conv_body = Conv2d::new(cursor, body_layer, feature_conv, opts)?;
        let add = cursor.take("BinaryOp")?;
        check_binary_add(cursor, add, [head, cursor.output(body_layer)?])?;
        let mut feature = cursor.output(add)?;

        let mut upsamplers = Vec::new();
        while cursor.peek_kind() == Some("Interp") {
            let interp = cursor.take("Interp")?;
            cursor.check_inputs(interp, &[feature])?;
            let factor = nearest_upsample_factor(cursor, interp)?;
            let conv_layer = cursor.take("Convolution")?;
            cursor.check_inputs(conv_layer, &[cursor.output(interp)?])?;
            upsamplers.push((factor, Conv2d::new(cursor, conv_layer, feature_conv, opts)?));
            feature = cursor.output(conv_layer)?;
        }
        let hr_layer = cursor.take("Convolution")?;
        cursor.check_inputs(hr_layer, &[feature])?;
        let conv_hr = Conv2d::new(cursor, hr_layer, feature_conv, opts)?;
        let last_layer = cursor.take("Convolution")?;
        cursor.check_inputs(last_layer, &[cursor.output(hr_layer)?])?;
        let conv_last = Conv2d::new(cursor, last_layer, ConvSpec { in_channels: num_feat, out_channels: Some(3) }, opts)?;
        if body.is_empty() || upsamplers.is_empty() {
            return Err(cursor.error(first, "an RRDBNet needs at least one RRDB block and one upsampler"));
        }
        Ok((Self { conv_first, body, conv_body, upsamplers, conv_hr, conv_last }, cursor.output(last_layer)?))
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let feature = self.conv_first.forward(x);
        let body = self.body.iter().fold(feature.shallow_clone(), |h, block| block.forward(&h));
        let mut h = feature + self.conv_body.forward(&body);
        for (factor, conv) in &self.upsamplers {
            h = conv.forward(&upsample_nearest(&h, *factor));
        }
        self.conv_last.forward(&self.conv_hr.forward(&h))
    }

    /// The longest path: through all five convs of every dense block.
    fn spatial_ops(&self) -> Vec<SpatialOp> {
        let conv = |c: &Conv2d| SpatialOp::Conv { radius: c.radius() };
        let mut ops = vec![conv(&self.conv_first)];
        for rdb in self.body.iter().flat_map(|rrdb| &rrdb.blocks) {
            ops.extend(rdb.convs.iter().map(conv));
        }
        ops.push(conv(&self.conv_body));
        for (factor, up) in &self.upsamplers {
            ops.push(SpatialOp::Upsample { factor: *factor });
            ops.push(conv(up));
        }
        ops.extend([conv(&self.conv_hr), conv(&self.conv_last)]);
        ops
    }
}

// ---------------------------------------------------------------------------------------------
// Receptive field.

/// One step of the longest input-to-output path, as far as spatial reach is concerned.
#[derive(Debug, Clone, Copy)]
enum SpatialOp {
    Conv { radius: i64 },
    /// Nearest upsample or pixel shuffle: output pixel q reads input pixel floor(q / factor).
    Upsample { factor: i64 },
    /// Bicubic resize by `scale` with half-pixel centres: 4 taps around (q + 0.5) / scale - 0.5.
    Bicubic { scale: f64 },
}

impl SpatialOp {
    fn scale(&self) -> f64 {
        match self {
            SpatialOp::Conv { .. } => 1.0,
            SpatialOp::Upsample { factor } => *factor as f64,
            SpatialOp::Bicubic { scale } => *scale,
        }
    }
}

/// Walks each output pixel phase back to the input interval it depends on and returns the
/// largest distance from the pixel's own input pixel `floor(q / total_scale)`.
fn path_receptive_radius(ops: &[SpatialOp]) -> i64 {
    let total_scale: f64 = ops.iter().map(SpatialOp::scale).product();
    let phases = (total_scale.ceil() as i64 * 8).max(8);
    let mut radius = 0;
    for q in phases..2 * phases {
        let (mut lo, mut hi) = (q, q);
        for op in ops.iter().rev() {
            (lo, hi) = match *op {
                SpatialOp::Conv { radius } => (lo - radius, hi + radius),
                SpatialOp::Upsample { factor } => (lo.div_euclid(factor), hi.div_euclid(factor)),
                SpatialOp::Bicubic { scale } => {
                    let source = |p: i64| ((p as f64 + 0.5) / scale - 0.5).floor() as i64;
                    (source(lo) - 1, source(hi) + 2)
                }
            };
        }
        let own = (q as f64 / total_scale).floor() as i64;
        radius = radius.max(own - lo).max(hi - own);
    }
    radius
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radius_of_conv_chain_with_upsampling() {
        let conv = SpatialOp::Conv { radius: 1 };
        assert_eq!(path_receptive_radius(&[conv, conv, SpatialOp::Upsample { factor: 4 }]), 2);
        // A conv after a x2 upsample reaches one input pixel at some phases.
        assert_eq!(path_receptive_radius(&[SpatialOp::Upsample { factor: 2 }, conv]), 1);
        let halved = [conv, SpatialOp::Upsample { factor: 4 }, SpatialOp::Bicubic { scale: 0.5 }];
        assert_eq!(path_receptive_radius(&halved), 2);
    }
}
