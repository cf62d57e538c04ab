//! The models this box knows: the upscalers' files it ships with (Real-ESRGAN, Real-CUGAN), every VAE
//! checkpoint found in `models_dir/vae/` and every SeedVR2 DiT in `models_dir/dit/` (named by file stem,
//! family read from the checkpoint's key names).
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::SystemTime;

use serde::Serialize;

pub mod flashvsr_folder;
pub mod flashvsr_version;

use crate::error_codes as codes;
use super::family::interpolator::InterpolatorFamily;
use super::family::upscaler::UpscalerFamily;
use super::family::Family;
use super::op::Op;
use crate::models::seedvr2::SeedVr2Config;
use crate::models::wan::{published_latent_stats, WanConfig};

#[derive(Debug, Clone)]
pub struct ModelEntry {
    pub name: String,
    pub family: Family,
    pub ops: Vec<Op>,
    pub scales: Vec<i64>,
    pub files: Vec<PathBuf>,
    pub description: String,
    /// Channels of the latents a VAE reads and writes, from its first decoder convolution.
    pub latent_channels: Option<i64>,
    /// A VAE's `(spatial, temporal)` factors, as its header says ([`vae_factors`] for a family with one
    /// layout; TAEHV's spatial factor from its checkpoint's patch size).
    pub vae_factors: Option<(i64, i64)>,
    /// A DiT's variant (`3b`, `7b`).
    pub variant: Option<&'static str>,
    /// A DiT's default VAE: the first SeedVR2 VAE in `models_dir/vae/`.
    pub pairs_with: Option<String>,
}

pub use super::op::DEFAULT_UPSCALE_MODEL;
/// VAE checkpoints are looked for here, below `models_dir`.
pub const VAE_DIR: &str = "vae";
/// SeedVR2 DiT checkpoints and their text embeddings are looked for here, below `models_dir`.
pub const DIT_DIR: &str = "dit";
/// The shipped prompt embedding, looked for in `DIT_DIR` under these names, in this order: a safetensors
/// file holding `pos_emb` (or one tensor), or the original `pos_emb.pt`.
pub const TEXT_EMBEDDING_FILES: [&str; 3] = ["text_embeds.safetensors", "pos_emb.safetensors", "pos_emb.pt"];

/// Every upscaler family: one line each.
const UPSCALER_FAMILIES: &[&UpscalerFamily] = &[&crate::models::realesrgan::FAMILY, &crate::models::realcugan::FAMILY];

/// Every frame-interpolator family: one line each.
const INTERPOLATOR_FAMILIES: &[&InterpolatorFamily] = &[&crate::models::rife::FAMILY];

/// The family that loads `family`'s interpolators; `None` for a family that is no interpolator.
pub fn interpolator_family(family: Family) -> Option<&'static InterpolatorFamily> {
    INTERPOLATOR_FAMILIES.iter().copied().find(|f| f.family == family)
}

/// The family that loads `family`'s upscalers; `None` for a family that is no upscaler.
pub fn upscaler_family(family: Family) -> Option<&'static UpscalerFamily> {
    UPSCALER_FAMILIES.iter().copied().find(|f| f.family == family)
}

/// Every job creation and every `GET /v1/models` scans; the headers behind it are read once per file version.
static HEADERS: LazyLock<HeaderCache> = LazyLock::new(HeaderCache::default);

/// Everything usable on this box now. Cheap: a directory listing, plus the header of each checkpoint
/// that is new or changed since the last scan.
pub fn scan(models_dir: &Path) -> Vec<ModelEntry> {
    scan_with(models_dir, &HEADERS)
}

fn scan_with(models_dir: &Path, headers: &HeaderCache) -> Vec<ModelEntry> {
    let mut entries: Vec<ModelEntry> = UPSCALER_FAMILIES
        .iter()
        .flat_map(|family| family.models.iter().map(move |model| (family.family, model)))
        .map(|(family, model)| ModelEntry {
            name: model.name.into(),
            family,
            ops: Op::done_by(family.kind()),
            scales: model.scales.to_vec(),
            files: model.paths(models_dir),
            description: model.description.into(),
            latent_channels: None,
            vae_factors: None,
            variant: None,
            pairs_with: None,
        })
        .collect();
    entries.extend(INTERPOLATOR_FAMILIES.iter().flat_map(|family| family.models.iter().map(move |model| (family.family, model))).map(|(family, model)| {
        ModelEntry {
            name: model.name.into(),
            family,
            ops: Op::done_by(family.kind()),
            scales: vec![],
            files: vec![models_dir.join(model.file)],
            description: model.description.into(),
            latent_channels: None,
            vae_factors: None,
            variant: None,
            pairs_with: None,
        }
    }));
    for path in checkpoints(&models_dir.join(VAE_DIR), headers) {
        let Some(name) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else { continue };
        if let Some(Detected { family, latent_channels, spatial_factor, .. }) = headers.detect(&path).filter(|d| d.family.is_vae()) {
            entries.push(ModelEntry {
                latent_channels,
                vae_factors: vae_factors(family).or_else(|| Some((spatial_factor?, TAEHV_TEMPORAL_FACTOR))),
                // Named inside the models folder: /v1/models is public, where this box keeps its files is not.
                description: vae_description(family, &name, &inside(models_dir, &path)),
                name,
                family,
                ops: Op::done_by(family.kind()),
                scales: vec![],
                files: vec![path],
                variant: None,
                pairs_with: None,
            });
        }
    }
    let default_vae = entries.iter().find(|e| e.family == Family::Seedvr2).map(|e| e.name.clone());
    let text = text_embedding_file(models_dir);
    for path in checkpoints(&models_dir.join(DIT_DIR), headers) {
        let Some(name) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else { continue };
        if let Some(Detected { family: Family::Seedvr2Dit, variant, .. }) = headers.detect(&path) {
            entries.push(ModelEntry {
                description: format!("SeedVR2 {} restoration DiT from {}", variant.unwrap_or("?"), inside(models_dir, &path)),
                name,
                family: Family::Seedvr2Dit,
                ops: Op::done_by(Family::Seedvr2Dit.kind()),
                scales: vec![1, 2, 3, 4],
                // Missing text embeddings show as a missing file, so the model is listed as not present.
                files: vec![path, text.clone().unwrap_or_else(|| models_dir.join(DIT_DIR).join(TEXT_EMBEDDING_FILES[2]))],
                latent_channels: None,
                vae_factors: None,
                variant,
                pairs_with: default_vae.clone(),
            });
        }
    }
    entries.extend(flashvsr_folder::folders(models_dir).into_iter().map(|folder| ModelEntry {
        description: format!(
            "FlashVSR {} one-step streaming video super-resolution (×4; TCDecoder, or a Wan 2.1 VAE named with vae=) from {}",
            folder.version.as_str(),
            inside(models_dir, &folder.dir)
        ),
        name: folder.name.clone(),
        family: Family::FlashVsr,
        ops: Op::done_by(Family::FlashVsr.kind()),
        scales: vec![flashvsr_folder::SCALE],
        files: folder.files(),
        latent_channels: None,
        vae_factors: None,
        variant: Some(folder.version.as_str()),
        pairs_with: None,
    }));
    entries
}

/// The `*.safetensors` / `*.gguf` / `*.pth` files of one models folder, sorted; what is remembered of
/// files gone from it is dropped.
fn checkpoints(dir: &Path, headers: &HeaderCache) -> Vec<PathBuf> {
    let Ok(listing) = std::fs::read_dir(dir) else { return vec![] };
    let mut files: Vec<PathBuf> = listing
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors" || e == "gguf" || e == "pth"))
        .filter(|p| !TEXT_EMBEDDING_FILES.iter().any(|name| p.file_name().is_some_and(|f| f == *name)))
        .collect();
    files.sort();
    headers.forget_missing(dir, &files);
    files
}

/// The first of [`TEXT_EMBEDDING_FILES`] present in the DiT folder.
pub fn text_embedding_file(models_dir: &Path) -> Option<PathBuf> {
    TEXT_EMBEDDING_FILES.iter().map(|name| models_dir.join(DIT_DIR).join(name)).find(|p| p.is_file())
}

/// What a checkpoint's header says (`detect_vae_family`), remembered per file until its size or
/// modification time changes. A file whose metadata cannot be read is read every time, never remembered.
#[derive(Default)]
struct HeaderCache {
    files: Mutex<HashMap<PathBuf, (FileStamp, Option<Detected>)>>,
    /// Headers actually read, so a test can tell a remembered answer from a fresh one.
    reads: AtomicU64,
}

/// `/v1/models`' words for a VAE; a TAEHV checkpoint says whose latents it takes (its name says, as the
/// authors' loader reads it) and what it is for.
fn vae_description(family: Family, name: &str, file: &str) -> String {
    match family {
        Family::Taehv => {
            use crate::models::taehv::LatentSpace;
            let latents = match crate::models::taehv::naming::latent_space(&name.to_lowercase()) {
                LatentSpace::Wan21 => "Wan 2.1 (and Wan 2.2 14B) latents",
                LatentSpace::Wan22 => "Wan 2.2 5B latents",
                LatentSpace::HunyuanVideo => "Hunyuan Video latents",
                LatentSpace::Unknown => "latents its name does not tie to a full VAE",
            };
            format!("tiny TAEHV video VAE for {latents} (a fast preview, softer than the full VAE) from {file}")
        }
        Family::Wan21 | Family::Wan22 | Family::Seedvr2 | Family::Realesrgan | Family::Realcugan | Family::Seedvr2Dit | Family::Rife | Family::FlashVsr => {
            format!("{} video VAE from {file}", family.as_str())
        }
    }
}

/// What a checkpoint's header says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Detected {
    family: Family,
    latent_channels: Option<i64>,
    variant: Option<&'static str>,
    /// Pixels per latent cell where the family has no one value (TAEHV: 8 × its patch size).
    spatial_factor: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: SystemTime,
}

impl FileStamp {
    fn of(path: &Path) -> Option<FileStamp> {
        let meta = std::fs::metadata(path).ok()?;
        Some(FileStamp { len: meta.len(), modified: meta.modified().ok()? })
    }
}

impl HeaderCache {
    fn detect(&self, path: &Path) -> Option<Detected> {
        let stamp = FileStamp::of(path);
        if let Some(stamp) = stamp {
            if let Some((seen, detected)) = self.files.lock().unwrap().get(path) {
                if *seen == stamp {
                    return *detected;
                }
            }
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        let detected = detect_family(path);
        if detected.is_none() {
            // Once per file version, not on every scan.
            tracing::warn!(path = %path.display(), "not a known checkpoint; skipped");
        }
        // Stamped before the read: a file rewritten meanwhile gets a newer stamp and is read again.
        if let Some(stamp) = stamp {
            self.files.lock().unwrap().insert(path.to_path_buf(), (stamp, detected));
        }
        detected
    }

    /// Drops what was remembered of files in `dir` that are gone, so a long-running box does not collect them.
    fn forget_missing(&self, dir: &Path, present: &[PathBuf]) {
        self.files.lock().unwrap().retain(|path, _| path.parent() != Some(dir) || present.contains(path));
    }
}

fn inside(models_dir: &Path, path: &Path) -> String {
    path.strip_prefix(models_dir).unwrap_or(path).display().to_string()
}

pub fn find(models_dir: &Path, name: &str) -> Option<ModelEntry> {
    scan(models_dir).into_iter().find(|m| m.name == name)
}

impl ModelEntry {
    pub fn present(&self) -> bool {
        self.files.iter().all(|p| p.is_file())
    }

    pub fn info(&self) -> ModelInfo {
        ModelInfo {
            name: self.name.clone(),
            family: self.family,
            kind: self.family.kind().as_str(),
            latent_channels: self.latent_channels,
            ops: self.ops.iter().map(|op| op.as_str()).collect(),
            scales: self.scales.clone(),
            dtypes: vec!["f32", "bf16", "f16"],
            present: self.present(),
            description: self.description.clone(),
            variant: self.variant,
            pairs_with: self.pairs_with.clone(),
        }
    }
}

/// A normalisation that a checkpoint's header already shows its VAE cannot do.
#[derive(Debug, thiserror::Error)]
pub enum NormalizeRefusal {
    #[error("model `{model}` ({family}, {channels} latent channels) has no published latent statistics, so it cannot normalise the latents it encodes; submit without normalize=true")]
    Encode { model: String, family: &'static str, channels: i64 },
    #[error("the latent is marked normalized, but model `{model}` ({family}, {channels} latent channels) has no published latent statistics to undo that with")]
    Decode { model: String, family: &'static str, channels: i64 },
}

impl NormalizeRefusal {
    pub fn code(&self) -> &'static str {
        match self {
            NormalizeRefusal::Encode { .. } => codes::NORMALIZE_UNSUPPORTED,
            NormalizeRefusal::Decode { .. } => codes::LATENT_NORMALIZE_UNSUPPORTED,
        }
    }
}

/// Whether a VAE can apply (or undo) `normalize`: SeedVR2 always (a scaling factor), Wan only at the latent
/// sizes with published statistics. `decoding`: undoing it on a latent marked `normalized`. A header that
/// did not show the latent size refuses nothing; the loaded model decides then.
pub fn check_normalization(model: &str, family: Family, latent_channels: Option<i64>, decoding: bool) -> Result<(), NormalizeRefusal> {
    let Some(channels) = latent_channels else { return Ok(()) };
    if !matches!(family, Family::Wan21 | Family::Wan22) || published_latent_stats(family, channels).is_some() {
        return Ok(());
    }
    let (model, family) = (model.to_string(), family.as_str());
    Err(if decoding { NormalizeRefusal::Decode { model, family, channels } } else { NormalizeRefusal::Encode { model, family, channels } })
}

/// The latent space a VAE reads and writes, from a family's name (as a latent file records it) and the model's:
/// a family's own, or for TAEHV the full VAE's its name ties it to (`taew2_1` reads and writes Wan 2.1's raw
/// latent, see `vae::VideoVae::load`). A latent made in one space decodes with any model of that space.
fn latent_space(family: &str, model: &str) -> String {
    if family != Family::Taehv.as_str() {
        return family.to_string();
    }
    match crate::models::taehv::naming::latent_space(&model.to_lowercase()) {
        crate::models::taehv::LatentSpace::Wan21 => Family::Wan21.as_str().into(),
        crate::models::taehv::LatentSpace::Wan22 => Family::Wan22.as_str().into(),
        crate::models::taehv::LatentSpace::HunyuanVideo => "hunyuan_video".into(),
        crate::models::taehv::LatentSpace::Unknown => format!("{family}:{model}"),
    }
}

/// Whether model `model` of `family` decodes a latent that `made_family`'s `made_by` wrote (a latent file's
/// record): both read and write one latent space.
pub fn shares_latent_space(family: Family, model: &str, made_family: &str, made_by: &str) -> bool {
    latent_space(family.as_str(), model) == latent_space(made_family, made_by)
}

/// Pixel frames per latent frame of every TAEHV checkpoint released (two TGrow stages of 2).
const TAEHV_TEMPORAL_FACTOR: i64 = 4;

/// A VAE's `(spatial, temporal)` factors: pixels per latent cell along H and W, and pixel frames per latent
/// frame after the first. From its family's released configuration, which is what the header detection
/// recognises (the loaded model reads its own from the checkpoint's shapes); `None` for a family that is no VAE.
pub fn vae_factors(family: Family) -> Option<(i64, i64)> {
    match family {
        Family::Wan21 => Some(WanConfig::wan21()).map(|c| (c.spatial_factor(), c.temporal_factor())),
        Family::Wan22 => Some(WanConfig::wan22()).map(|c| (c.spatial_factor(), c.temporal_factor())),
        Family::Seedvr2 => Some(SeedVr2Config::seedvr2()).map(|c| (c.spatial_factor(), c.temporal_factor())),
        // TAEHV's spatial factor is its checkpoint's (8 × its patch size: 8 or 16): not one per family
        // (the registry reads it from the header, with `TAEHV_TEMPORAL_FACTOR`).
        Family::Taehv => None,
        Family::Realesrgan | Family::Realcugan | Family::Seedvr2Dit | Family::Rife | Family::FlashVsr => None,
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ModelInfo {
    pub name: String,
    pub family: Family,
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latent_channels: Option<i64>,
    #[schema(value_type = Vec<super::op::Op>)]
    pub ops: Vec<&'static str>,
    pub scales: Vec<i64>,
    pub dtypes: Vec<&'static str>,
    pub present: bool,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<&'static str>,
    /// A DiT's default VAE (`restore` jobs may name another with `vae=`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pairs_with: Option<String>,
}

fn tensor_shapes(path: &Path) -> Option<BTreeMap<String, Vec<i64>>> {
    Some(crate::models::formats::checkpoint::tensor_shapes(path).ok()?.into_iter().collect())
}

/// Wan uses RMS norms (`gamma`), SeedVR2 GroupNorms and MAGViT up-samplers (`upscale_conv`);
/// Wan 2.2 patchifies its input, so its first convolution sees 12 channels instead of 3. A SeedVR2 DiT
/// has a video patch embedding and blocks; the 3B has an output norm, the 7B none.
fn detect_family(path: &Path) -> Option<Detected> {
    let shapes = tensor_shapes(path)?;
    // Of the `torch.save` files only TAEHV's are read (the other families load safetensors and GGUF).
    if crate::models::formats::torch_file::is_torch_zip(path) {
        return detect_taehv(&shapes);
    }
    let has = |needle: &str| shapes.keys().any(|k| k.contains(needle));
    let vae = |family, latent_channels| Some(Detected { family, latent_channels, variant: None, spatial_factor: None });
    if shapes.contains_key("vid_in.proj.weight") && has("blocks.0.attn.") {
        let variant = if shapes.contains_key("vid_out_norm.weight") { "3b" } else { "7b" };
        return Some(Detected { family: Family::Seedvr2Dit, latent_channels: None, variant: Some(variant), spatial_factor: None });
    }
    let input_channels = |keys: [&str; 2]| keys.iter().find_map(|k| shapes.get(*k)).and_then(|s| s.get(1).copied());
    let latent_channels = input_channels(["decoder.conv_in.weight", "decoder.conv1.weight"]);
    if has("upscale_conv") {
        return vae(Family::Seedvr2, latent_channels);
    }
    if let Some(taehv) = detect_taehv(&shapes) {
        return Some(taehv);
    }
    if has(".gamma") && has("decoder.") && has("encoder.") {
        return match input_channels(["encoder.conv_in.weight", "encoder.conv1.weight"]) {
            Some(12) => vae(Family::Wan22, latent_channels),
            Some(_) => vae(Family::Wan21, latent_channels),
            None => None,
        };
    }
    None
}

/// TAEHV: 2-D convolutions in numbered stages, the encoder's last (17) giving the latent, the decoder's last
/// (22) the pixels, no RMS norms; the super decoder opens with a block where the base one has a convolution.
fn detect_taehv(shapes: &BTreeMap<String, Vec<i64>>) -> Option<Detected> {
    let latent = shapes.get("encoder.17.weight")?;
    if !shapes.contains_key("decoder.22.weight") || shapes.keys().any(|k| k.contains(".gamma")) {
        return None;
    }
    let variant = if shapes.contains_key("decoder.1.weight") { None } else { Some("super") };
    // The first convolution sees the frame's p×p patches stacked: 3p² channels.
    let patch = shapes.get("encoder.0.weight").and_then(|s| s.get(1)).map(|&c| ((c / 3) as f64).sqrt().round() as i64);
    let spatial_factor = patch.filter(|&p| p > 0 && 3 * p * p == shapes["encoder.0.weight"][1]).map(|p| 8 * p);
    Some(Detected { family: Family::Taehv, latent_channels: latent.first().copied(), variant, spatial_factor })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Kind, Tensor};

    /// The smallest file `detect_vae_family` takes for Wan 2.1: RMS-norm gammas, both halves, and a decoder
    /// input convolution `[width, latent channels, ...]`.
    fn write_wan21(path: &Path, width: i64, latent_channels: i64) {
        let tensors = [
            ("encoder.conv_in.weight", Tensor::zeros([4, 3, 1, 1, 1], (Kind::Float, tch::Device::Cpu))),
            ("encoder.norm_out.gamma", Tensor::ones([4, 1, 1, 1], (Kind::Float, tch::Device::Cpu))),
            ("decoder.conv_in.weight", Tensor::zeros([width, latent_channels, 1, 1, 1], (Kind::Float, tch::Device::Cpu))),
        ];
        Tensor::write_safetensors(&tensors, path).unwrap();
    }

    fn latent_channels(entries: &[ModelEntry], name: &str) -> Option<i64> {
        entries.iter().find(|e| e.name == name).unwrap_or_else(|| panic!("{name} not listed")).latent_channels
    }

    /// The factors the queue sizes a decode by are the released models' (Wan 2.2 folds 2×2 pixels into
    /// channels on top of the 8× of the others); an upscaler has none.
    #[test]
    fn vae_factors_are_the_released_configurations() {
        assert_eq!(vae_factors(Family::Wan21), Some((8, 4)));
        assert_eq!(vae_factors(Family::Wan22), Some((16, 4)));
        assert_eq!(vae_factors(Family::Seedvr2), Some((8, 4)));
        assert_eq!(vae_factors(Family::Realesrgan), None);
    }

    #[test]
    fn normalisation_is_refused_only_where_no_statistics_are_published() {
        let refused = |family, channels, decoding| check_normalization("m", family, channels, decoding).err().map(|e| e.code());
        assert_eq!(refused(Family::Wan21, Some(16), false), None);
        assert_eq!(refused(Family::Wan22, Some(48), true), None);
        assert_eq!(refused(Family::Seedvr2, Some(16), false), None, "SeedVR2 scales by a constant, at any size");
        assert_eq!(refused(Family::Wan21, None, false), None, "an unknown size is left to the loaded model");
        // Each family's statistics are its own: Wan 2.1's 16 channels do not lend theirs to a 16-channel Wan 2.2.
        assert_eq!(refused(Family::Wan22, Some(16), false), Some("normalize-unsupported"));
        assert_eq!(refused(Family::Wan21, Some(48), false), Some("normalize-unsupported"));
        assert_eq!(refused(Family::Wan21, Some(4), true), Some("latent-normalize-unsupported"));
    }

    #[test]
    fn scans_read_only_new_and_changed_checkpoints() {
        let root = tempfile::tempdir().unwrap();
        let vae = root.path().join(VAE_DIR);
        std::fs::create_dir_all(&vae).unwrap();
        let (kept, changed) = (vae.join("kept.safetensors"), vae.join("changed.safetensors"));
        write_wan21(&kept, 4, 16);
        write_wan21(&changed, 4, 16);
        let cache = HeaderCache::default();
        let reads = || cache.reads.load(Ordering::Relaxed);

        scan_with(root.path(), &cache);
        assert_eq!(reads(), 2, "both files are new");
        scan_with(root.path(), &cache);
        assert_eq!(reads(), 2, "nothing changed, nothing read");

        // The same size (the two dimensions swap): only the content and the modification time tell.
        write_wan21(&changed, 16, 4);
        assert_eq!(std::fs::metadata(&changed).unwrap().len(), std::fs::metadata(&kept).unwrap().len());
        let later = std::fs::metadata(&kept).unwrap().modified().unwrap() + std::time::Duration::from_secs(5);
        std::fs::File::options().write(true).open(&changed).unwrap().set_modified(later).unwrap();
        let entries = scan_with(root.path(), &cache);
        assert_eq!(reads(), 3, "only the changed file is read again");
        assert_eq!((latent_channels(&entries, "kept"), latent_channels(&entries, "changed")), (Some(16), Some(4)));

        // A new file is noticed, a removed one disappears (and is forgotten).
        std::fs::remove_file(&kept).unwrap();
        write_wan21(&vae.join("new.safetensors"), 4, 16);
        let entries = scan_with(root.path(), &cache);
        assert_eq!(reads(), 4);
        let names: Vec<&str> = entries.iter().filter(|e| e.family.is_vae()).map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["changed", "new"]);
        assert!(!cache.files.lock().unwrap().contains_key(&kept));
    }
}
