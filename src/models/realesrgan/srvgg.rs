//! SRVGGNetCompact (realesr-animevideov3): a plain conv/PReLU body, a pixel shuffle and the nearest-upsampled input added back.
use tch::{Kind, Tensor};

use crate::models::formats::ncnn::GraphCursor;
use crate::models::stop::StopFlag;
use crate::models::ModelError;
use super::layers::*;
use super::receptive::SpatialOp;
use crate::models::nn::placement::Placement2d;

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
    pub(super) fn new<'a>(cursor: &mut GraphCursor<'a>, input: &'a str, opts: &Placement2d) -> Result<(Self, &'a str), ModelError> {
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
    pub(super) fn forward(&self, x: &Tensor, opts: &Placement2d, stop: &StopFlag) -> Result<Tensor, ModelError> {
        let mut h = self.act_first.forward(&self.conv_first.forward(&opts.place(x)));
        for (conv, act) in &self.body {
            stop.check()?;
            h = act.forward(&conv.forward(&h));
        }
        stop.check()?;
        let residual = self.conv_last.forward(&h).to_kind(Kind::Float).pixel_shuffle(self.upscale);
        Ok(residual + upsample_nearest(x, self.upscale))
    }

    /// The longest path (the conv chain; the skip branch reaches no further).
    pub(super) fn spatial_ops(&self) -> Vec<SpatialOp> {
        let convs = std::iter::once(&self.conv_first).chain(self.body.iter().map(|(c, _)| c)).chain([&self.conv_last]);
        let mut ops: Vec<SpatialOp> = convs.map(|c| SpatialOp::Conv { radius: c.radius() }).collect();
        ops.push(SpatialOp::Upsample { factor: self.upscale });
        ops
    }
}
