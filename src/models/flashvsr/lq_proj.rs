//! FlashVSR's LQ projection (`LQ_proj_in.ckpt`; the original's `Buffer_LQ4x_Proj` in v1.0 and
//! `Causal_LQ4x_Proj` in v1.1, one set of weights for both): each clip of 4 LR frames, folded 16×16 per
//! token, through two causal 3-D convs that halve time (RMS norm and SiLU after each) and a linear map, to
//! one latent frame of tokens that the DiT adds to its patch embedding. The two releases differ only in
//! what the convs see in front of a clip (`lq_stream`). Widths are read from the weights.
use std::path::Path;

use tch::{Device, Kind, Tensor};

use super::version::FlashVsrVersion;
use crate::models::formats::torch_file;
use crate::models::nn::linear::Linear;
use crate::models::nn::weights::{HeldBytes, WeightPath, Weights};
use crate::models::ModelError;

/// LR pixels per token along H and W (`PixelShuffle3d(1, 16, 16)`).
pub const TOKEN_PIXELS: i64 = 16;
/// LR frames per latent frame: one clip.
pub const CLIP_FRAMES: i64 = 4;
/// Frames each causal conv takes in front of a clip (`2 × temporal padding`, the original's `CACHE_T`).
pub(super) const HISTORY_FRAMES: i64 = 2;
const KERNEL: [i64; 3] = [4, 3, 3];
/// `F.normalize`'s floor on the norm.
const NORMALIZE_EPS: f64 = 1e-12;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LqProjConfig {
    /// Colour channels of the LR video (3).
    pub in_channels: i64,
    /// The two convs' widths (released 2048 and 3072).
    pub hidden: [i64; 2],
    /// The DiT's width the tokens are made for (released 1536).
    pub out_dim: i64,
}

impl LqProjConfig {
    /// Channels of one folded frame: `in_channels × 16 × 16`.
    pub fn folded_channels(&self) -> i64 {
        self.in_channels * TOKEN_PIXELS * TOKEN_PIXELS
    }

    /// Reads the widths from the checkpoint's shapes (the original hard-codes the hidden ones; they are
    /// read here so smaller test models load).
    pub fn detect(weights: &Weights) -> Result<Self, ModelError> {
        let get = |key: &str, rank: usize| -> Result<Vec<i64>, ModelError> {
            match weights.shape(key) {
                Some(shape) if shape.len() == rank => Ok(shape),
                Some(shape) => Err(weights.format_error(format!("tensor `{key}` has shape {shape:?}, not the {rank}-D the LQ projection has there"))),
                None => Err(weights.format_error(format!("missing tensor `{key}`: not FlashVSR's LQ projection (LQ_proj_in.ckpt)"))),
            }
        };
        let conv1 = get("conv1.weight", 5)?;
        let conv2 = get("conv2.weight", 5)?;
        let linear = get("linear_layers.0.weight", 2)?;
        let folded = TOKEN_PIXELS * TOKEN_PIXELS;
        if conv1[1] % folded != 0 {
            return Err(weights.format_error(format!("`conv1.weight` takes {} channels, not a multiple of the {folded} pixels of a 16×16 token", conv1[1])));
        }
        Ok(LqProjConfig { in_channels: conv1[1] / folded, hidden: [conv1[0], conv2[0]], out_dim: linear[0] })
    }
}

#[derive(Debug, Clone, Copy)]
pub struct LqProjLoadOptions {
    pub device: Device,
    /// Compute kind; the checkpoint (fp32, fp16 or bf16) is cast to it.
    pub kind: Kind,
    /// The release the weights come from: nothing in the file says it (`FlashVsrVersion`).
    pub version: FlashVsrVersion,
}

impl LqProjLoadOptions {
    /// On the CPU in f32.
    pub fn for_version(version: FlashVsrVersion) -> Self {
        Self { device: Device::Cpu, kind: Kind::Float, version }
    }
}

/// `CausalConv3d(k (4,3,3), stride (2,1,1), padding 1)` as the LQ projection builds it: two frames in
/// front of the input in time (the caller's history, else copies of the first frame) and one pixel of
/// replicate padding on each side in space. It runs through libtorch's own `conv3d` dispatch, as the
/// original: `nn::conv3d`'s oneDNN shortcut for small CPU inputs is faster but 1.7e-6 away from it on the
/// reference's small model, beyond the 1e-6 this layer is held to.
#[derive(Debug)]
struct CausalConv {
    weight: Tensor,
    bias: Tensor,
}

impl CausalConv {
    fn new(path: &WeightPath, in_channels: i64, out_channels: i64) -> Result<Self, ModelError> {
        let [kt, kh, kw] = KERNEL;
        Ok(Self { weight: path.get("weight", &[out_channels, in_channels, kt, kh, kw])?, bias: path.get("bias", &[out_channels])? })
    }

    fn forward(&self, x: &Tensor, history: Option<&Tensor>) -> Result<Tensor, ModelError> {
        let (x, front) = match history {
            Some(history) => (Tensor::f_cat(&[history, x], 2)?, HISTORY_FRAMES - history.size()[2]),
            None => (x.shallow_clone(), HISTORY_FRAMES),
        };
        let padded = x.f_replication_pad3d([1, 1, 1, 1, front.max(0), 0])?;
        Ok(padded.f_conv3d(&self.weight, Some(&self.bias), [2, 1, 1], [0, 0, 0], [1, 1, 1], 1)?)
    }
}

/// `RMS_norm(images=False)`: `F.normalize` over channels × √C × gamma (its bias is a constant 0), in the
/// original's order of operations.
#[derive(Debug)]
struct RmsNorm {
    /// `[C, 1, 1, 1]`.
    gamma: Tensor,
    scale: f64,
}

impl RmsNorm {
    fn new(path: &WeightPath, channels: i64) -> Result<Self, ModelError> {
        Ok(Self { gamma: path.get("gamma", &[channels, 1, 1, 1])?, scale: (channels as f64).sqrt() })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        let norm = x.f_norm_scalaropt_dim(2.0, [1], true)?.f_clamp_min(NORMALIZE_EPS)?;
        Ok(x.f_div(&norm)?.f_mul_scalar(self.scale)?.f_mul(&self.gamma)?)
    }
}

pub struct LqProjection {
    config: LqProjConfig,
    version: FlashVsrVersion,
    conv1: CausalConv,
    norm1: RmsNorm,
    conv2: CausalConv,
    norm2: RmsNorm,
    linear: Linear,
    device: Device,
    kind: Kind,
    held: HeldBytes,
    parameters: i64,
}

impl std::fmt::Debug for LqProjection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LqProjection").field("config", &self.config).field("version", &self.version).field("kind", &self.kind).finish_non_exhaustive()
    }
}

impl LqProjection {
    /// `LQ_proj_in.ckpt` (a torch pickle, told apart by its zip magic) or a safetensors conversion.
    pub fn load(path: &Path, opts: &LqProjLoadOptions) -> Result<Self, ModelError> {
        std::fs::metadata(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
        let weights = if torch_file::is_torch_zip(path) {
            Weights::new(path, torch_file::read_tensors(path)?.into_iter().collect(), opts.device, opts.kind)
        } else {
            Weights::open(path, opts.device, opts.kind)?
        };
        Self::from_weights(&weights, opts.version)
    }

    /// Tensors already in memory; `source` names them in errors.
    pub fn from_tensors(source: &Path, tensors: Vec<(String, Tensor)>, opts: &LqProjLoadOptions) -> Result<Self, ModelError> {
        Self::from_weights(&Weights::new(source, tensors.into_iter().collect(), opts.device, opts.kind), opts.version)
    }

    fn from_weights(weights: &Weights, version: FlashVsrVersion) -> Result<Self, ModelError> {
        let _guard = tch::no_grad_guard();
        let config = LqProjConfig::detect(weights)?;
        let root = weights.root();
        let [hidden1, hidden2] = config.hidden;
        let conv1 = CausalConv::new(&root.pp("conv1"), config.folded_channels(), hidden1)?;
        let norm1 = RmsNorm::new(&root.pp("norm1"), hidden1)?;
        let conv2 = CausalConv::new(&root.pp("conv2"), hidden1, hidden2)?;
        let norm2 = RmsNorm::new(&root.pp("norm2"), hidden2)?;
        let linear = Linear::new(&root.pp("linear_layers").pp(0), hidden2, config.out_dim, true)?;
        // A second linear layer (`layer_num` > 1) would be one the DiT never reads: the release has one.
        weights.ensure_all_used()?;
        let parameters = weights.keys().map(|key| weights.shape(key).map_or(0, |shape| shape.iter().product::<i64>())).sum();
        Ok(Self { config, version, conv1, norm1, conv2, norm2, linear, device: weights.device(), kind: weights.kind(), held: weights.held_bytes(), parameters })
    }

    pub fn config(&self) -> &LqProjConfig {
        &self.config
    }

    pub fn version(&self) -> FlashVsrVersion {
        self.version
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn held_bytes(&self) -> HeldBytes {
        self.held
    }

    /// Elements in the checkpoint's tensors (all of which the model uses).
    pub fn parameter_count(&self) -> i64 {
        self.parameters
    }

    /// Frames `[N, C, 4, H, W]` → `[N, C·256, 4, H/16, W/16]`, channel `c·256 + dy·16 + dx`.
    pub(super) fn fold(&self, clip: &Tensor) -> Result<Tensor, ModelError> {
        let (n, c, t, h, w) = clip.size5()?;
        let s = TOKEN_PIXELS;
        let grouped = clip.f_reshape([n, c, t, h / s, s, w / s, s])?.f_permute([0, 1, 4, 6, 2, 3, 5])?;
        Ok(grouped.f_reshape([n, c * s * s, t, h / s, w / s])?)
    }

    /// conv1, norm1, SiLU: the folded clip (with `history` in front, if any) → 2 frames.
    pub(super) fn first_stage(&self, folded: &Tensor, history: Option<&Tensor>) -> Result<Tensor, ModelError> {
        Ok(self.norm1.forward(&self.conv1.forward(folded, history)?)?.f_silu()?)
    }

    /// conv2, norm2, SiLU and the linear map: the first stage's 2 frames (with `history` in front) → one
    /// latent frame of tokens `[N, h·w, out_dim]`, in (h, w) row-major order.
    pub(super) fn second_stage(&self, hidden: &Tensor, history: Option<&Tensor>) -> Result<Tensor, ModelError> {
        let y = self.norm2.forward(&self.conv2.forward(hidden, history)?)?.f_silu()?;
        let tokens = y.f_flatten(2, -1)?.f_transpose(1, 2)?;
        Ok(self.linear.try_forward(&tokens)?)
    }
}
