//! Where a job's result goes: its name beside the input in the job's folder, from the op's spec, its scale or
//! rate, and the part of the input it runs over.
use std::path::PathBuf;

use crate::jobs::model::*;
use crate::models::{OutputName, Writes};

/// `in.mp4` upscaled ×4 becomes `in_x4.mp4`, next to the input in the job's folder.
pub fn output_path_for(job: &Job) -> PathBuf {
    use crate::executor::interpolate::settings::DEFAULT_FACTOR;
    let input = PathBuf::from(&job.input_path);
    let stem = std::path::Path::new(&job.input.file_name)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "video".into());
    let still = job.input.media.as_ref().is_some_and(|media| media.still);
    let spec = job.op.spec();
    let extension = match spec.writes {
        Writes::Latent => "latent.safetensors",
        Writes::Video { .. } => job.params.output_format.unwrap_or(OutputFormat::H264).extension_for(still),
    };
    let factor = job.params.interpolate.as_ref().and_then(|p| p.factor);
    let label = match spec.output_name {
        OutputName::Suffix(suffix) => suffix.to_string(),
        OutputName::Scale => {
            let interpolated = factor.map(|factor| format!("_x{factor}fps")).unwrap_or_default();
            format!("_x{}{interpolated}", job.op.scale_or_default(job.params.scale))
        }
        OutputName::Rate => match job.params.interpolate.as_ref().and_then(|p| p.fps.as_deref()) {
            // `60000/1001` → `in_60000-1001fps.mp4`; a factor: `in_x2fps.mp4`.
            Some(fps) => format!("_{}fps", fps.strip_suffix("/1").unwrap_or(fps).replace('/', "-")),
            None => format!("_x{}fps", factor.unwrap_or(DEFAULT_FACTOR)),
        },
    };
    // `in_x4.mp4` over part of the input: `in_x4_12.5s+5s.mp4`, `in_x4_f120+48f.mp4`; before the extension
    // the op wrote, whatever dots the input's own name has (`cam.2024_x4_0s+5s.mp4`).
    let range = job.params.range.as_ref().map(|range| format!("_{}", range_label(range))).unwrap_or_default();
    let name = format!("{stem}{label}{range}.{extension}");
    input.parent().map(|dir| dir.join(&name)).unwrap_or_else(|| PathBuf::from(name))
}

/// `12.5s+5s`, `f120+48f`, `0s+end`: where a part of the input starts and how long it is, for a file name.
fn range_label(range: &crate::media::InputRange) -> String {
    let start = match (range.start, range.start_frame) {
        (Some(seconds), _) => format!("{seconds}s"),
        (None, Some(frame)) => format!("f{frame}"),
        (None, None) => "0s".into(),
    };
    let length = match (range.frames, range.duration) {
        (Some(frames), _) => format!("{frames}f"),
        (None, Some(seconds)) => format!("{seconds}s"),
        (None, None) => "end".into(),
    };
    format!("{start}+{length}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DtypeChoice;
    use crate::media::InputRange;
    use crate::models::Op;
    use uuid::Uuid;

    fn job(op: Op, params: JobParams) -> Job {
        Job {
            id: Uuid::nil(),
            status: JobStatus::Queued,
            op,
            model: "m".into(),
            priority: 0,
            params,
            created_at: String::new(),
            started_at: None,
            finished_at: None,
            input: InputInfo { file_name: "in.mp4".into(), bytes: 0, media: None },
            output: None,
            progress: None,
            timings: None,
            plan: None,
            metrics: None,
            error: None,
            attempts: 0,
            worker: None,
            owner: None,
            callback: None,
            from_try: None,
            pausing: false,
            estimate: None,
            queue: None,
            partial: false,
            keep_partial: false,
            parts: None,
            split: None,
            part: None,
            input_path: "/jobs/1/in.mp4".into(),
            output_path: None,
        }
    }

    fn name(op: Op, params: JobParams) -> String {
        let path = output_path_for(&job(op, params));
        assert_eq!(path.parent(), Some(std::path::Path::new("/jobs/1")), "next to the input");
        path.file_name().unwrap().to_string_lossy().into_owned()
    }

    /// Every op's name for its output, as the op's spec gives it (clients and tests match these names).
    #[test]
    fn each_op_names_its_output() {
        let plain = || JobParams::new(DtypeChoice::Auto);
        let retimed = |factor, fps: Option<&str>| JobParams {
            interpolate: Some(InterpolateParams { factor, fps: fps.map(str::to_string), ..Default::default() }),
            ..plain()
        };
        assert_eq!(name(Op::Upscale, plain()), "in_x4.mp4", "the default scale");
        assert_eq!(name(Op::Upscale, JobParams { scale: Some(2), ..retimed(Some(3), None) }), "in_x2_x3fps.mp4");
        assert_eq!(name(Op::VaeEncode, plain()), "in.latent.safetensors");
        assert_eq!(name(Op::VaeDecode, plain()), "in_decoded.mp4");
        assert_eq!(name(Op::VaeReconstruct, JobParams { output_format: Some(OutputFormat::Ffv1), ..plain() }), "in_reconstructed.mkv");
        assert_eq!(name(Op::Restore, plain()), "in_restored.mp4");
        assert_eq!(name(Op::Interpolate, retimed(None, Some("60000/1001"))), "in_60000-1001fps.mp4");
        assert_eq!(name(Op::Interpolate, retimed(None, Some("60/1"))), "in_60fps.mp4");
        assert_eq!(name(Op::Interpolate, plain()), "in_x2fps.mp4");
        let part = InputRange { start_frame: Some(120), frames: Some(48), ..Default::default() };
        assert_eq!(name(Op::VaeEncode, JobParams { range: Some(part), ..plain() }), "in_f120+48f.latent.safetensors");
    }

    /// A dotted input name (as a camera or a watch folder gives them) keeps its part's tag at the end of the
    /// name, before the extension the op wrote, not after its first dot.
    #[test]
    fn a_dotted_name_gets_its_range_before_the_extension() {
        let mut dotted = job(Op::Upscale, JobParams { range: Some(InputRange { start: Some(12.5), duration: Some(5.0), ..Default::default() }), ..JobParams::new(DtypeChoice::Auto) });
        dotted.input.file_name = "cam.2024.06.01.mp4".into();
        let path = output_path_for(&dotted);
        assert_eq!(path.file_name().unwrap(), "cam.2024.06.01_x4_12.5s+5s.mp4");
        dotted.op = Op::VaeEncode;
        assert_eq!(output_path_for(&dotted).file_name().unwrap(), "cam.2024.06.01_12.5s+5s.latent.safetensors");
    }
}
