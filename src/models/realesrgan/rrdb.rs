//! RRDBNet (RealESRGAN_x4plus, x4plus_anime_6B): residual-in-residual dense blocks, then two nearest ×2 upsamples.
use tch::Tensor;

use crate::models::formats::ncnn::GraphCursor;
use crate::models::stop::StopFlag;
use crate::models::ModelError;
use super::layers::*;
use super::receptive::SpatialOp;
use crate::models::nn::placement::Placement2d;

/// Five densely connected convs; `x + residual_scale · conv5(...)` (ncnn: Eltwise sum with coefficients).
pub struct ResidualDenseBlock {
    convs: Vec<Conv2d>,
    residual_scale: f64,
}

pub(super) const DENSE_CONVS: usize = 5;
pub(super) const RDBS_PER_RRDB: usize = 3;

impl ResidualDenseBlock {
    pub(super) fn new<'a>(
        cursor: &mut GraphCursor<'a>,
        input: &'a str,
        num_feat: i64,
        opts: &Placement2d,
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

    pub(super) fn forward(&self, x: &Tensor, stop: &StopFlag) -> Result<Tensor, ModelError> {
        let mut features = vec![x.shallow_clone()];
        for conv in &self.convs {
            stop.check()?;
            let input = if features.len() == 1 { x.shallow_clone() } else { Tensor::cat(&features, 1) };
            features.push(conv.forward(&input));
        }
        let last = features.pop().expect("five convs ran");
        Ok(x + last * self.residual_scale)
    }
}

/// An ncnn Eltwise sum `skip + scale · branch`; returns the branch scale and the output blob.
pub(super) fn residual_add<'a>(cursor: &mut GraphCursor<'a>, branch: &'a str, skip: &'a str) -> Result<(f64, &'a str), ModelError> {
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
    pub(super) fn new<'a>(cursor: &mut GraphCursor<'a>, input: &'a str, num_feat: i64, opts: &Placement2d) -> Result<(Self, &'a str), ModelError> {
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

    pub(super) fn forward(&self, x: &Tensor, stop: &StopFlag) -> Result<Tensor, ModelError> {
        let mut out = x.shallow_clone();
        for block in &self.blocks {
            out = block.forward(&out, stop)?;
        }
        Ok(x + out * self.residual_scale)
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
    pub(super) fn new<'a>(cursor: &mut GraphCursor<'a>, input: &'a str, opts: &Placement2d) -> Result<(Self, &'a str), ModelError> {
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

    /// `stop` is asked before every convolution. The ones after the upsamplers work at up to the output's
    /// size, 16× the body's pixels, so they run one frame at a time, in bands of rows on the CPU, with an
    /// ask between them: a batch of frames there was seconds between two asks.
    pub(super) fn forward(&self, x: &Tensor, stop: &StopFlag) -> Result<Tensor, ModelError> {
        let feature = self.conv_first.forward(x);
        let mut body = feature.shallow_clone();
        for block in &self.body {
            body = block.forward(&body, stop)?;
        }
        stop.check()?;
        let h = feature + self.conv_body.forward(&body);
        let frames = (0..h.size()[0]).map(|i| self.forward_upsampling(&h.narrow(0, i, 1), stop)).collect::<Result<Vec<_>, _>>()?;
        Ok(Tensor::cat(&frames, 0))
    }

    /// The upsamplers and the last two convolutions, for one frame's features.
    fn forward_upsampling(&self, h: &Tensor, stop: &StopFlag) -> Result<Tensor, ModelError> {
        let mut h = h.shallow_clone();
        for (factor, conv) in &self.upsamplers {
            h = conv.forward_until(&upsample_nearest(&h, *factor), stop)?;
        }
        let h = self.conv_hr.forward_until(&h, stop)?;
        self.conv_last.forward_until(&h, stop)
    }

    /// The longest path: through all five convs of every dense block.
    pub(super) fn spatial_ops(&self) -> Vec<SpatialOp> {
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
