//! Colour through the media round trip the jobs make (decode to the model's RGB frames, encode them
//! back), against the ffmpeg CLI: a flat patch of a full-range BT.709 clip and of a limited-range BT.601
//! clip keeps its mean within ±1 code value, the RGB the model sees is the colour that was encoded, and
//! the output carries the flags; an unflagged clip gets its size's defaults, written explicitly.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use vaebox::media::{probe, Colour, FrameReader, FrameWriter, MediaLimits, MediaTools, OutputFormat, ProcessPriority, ReadConfig, WriteConfig};

const WIDTH: u32 = 176;
const HEIGHT: u32 = 144;
/// The patch colour, in RGB: saturated enough that BT.601 and BT.709 decode it several values apart.
const RGB: [u8; 3] = [60, 140, 210];

fn tools() -> MediaTools {
    MediaTools { ffmpeg: "ffmpeg".into(), ffprobe: "ffprobe".into(), probe_timeout: Duration::from_secs(30), stream_timeout: Duration::from_secs(120) }
}

fn ffmpeg(args: &[&str]) -> Vec<u8> {
    let output = Command::new("ffmpeg").args(["-nostdin", "-v", "error", "-y"]).args(args).output().unwrap();
    assert!(output.status.success(), "ffmpeg {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output.stdout
}

/// A flat clip of `RGB`, made YUV by ffmpeg with `matrix` and `range`, flagged so or not at all.
fn flat_clip(dir: &Path, name: &str, matrix: &str, range: &str, flagged: bool) -> PathBuf {
    let path = dir.join(name);
    let colour = format!("color=c=0x{:02x}{:02x}{:02x}:s={WIDTH}x{HEIGHT}:r=25:d=0.24", RGB[0], RGB[1], RGB[2]);
    let scaler_matrix = if matrix == "bt709" { "bt709" } else { "bt601" };
    let filter = format!("scale=out_color_matrix={scaler_matrix}:out_range={range}:flags=accurate_rnd,format=yuv420p");
    let mut args = vec!["-f", "lavfi", "-i", &colour, "-vf", &filter, "-c:v", "libx264", "-qp", "0"];
    let flags = ["-colorspace", matrix, "-color_primaries", if matrix == "bt709" { "bt709" } else { "smpte170m" }, "-color_trc", "bt709", "-color_range", range];
    if flagged {
        args.extend(flags);
    }
    args.push(path.to_str().unwrap());
    ffmpeg(&args);
    path
}

/// ffprobe's colour fields of the first video stream: range, space, primaries, transfer.
fn ffprobe_colour(path: &Path) -> Vec<String> {
    let output = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_entries", "stream=color_range,color_space,color_primaries,color_transfer", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).trim().split(',').map(str::to_string).collect()
}

/// Mean Y, U, V of the centre 64×64 (32×32 in the chroma planes) over all frames, as stored.
fn yuv_means(path: &Path) -> [f64; 3] {
    let raw = ffmpeg(&["-i", path.to_str().unwrap(), "-f", "rawvideo", "-pix_fmt", "yuv420p", "-"]);
    let (w, h) = (WIDTH as usize, HEIGHT as usize);
    let frame = w * h * 3 / 2;
    assert!(!raw.is_empty() && raw.len() % frame == 0);
    let mut sums = [0f64; 3];
    let mut counts = [0f64; 3];
    for f in raw.chunks_exact(frame) {
        let planes = [(&f[..w * h], w, h, 0), (&f[w * h..w * h * 5 / 4], w / 2, h / 2, 1), (&f[w * h * 5 / 4..], w / 2, h / 2, 2)];
        for (plane, pw, ph, i) in planes {
            let half = if i == 0 { 32 } else { 16 };
            for y in ph / 2 - half..ph / 2 + half {
                for x in pw / 2 - half..pw / 2 + half {
                    sums[i] += plane[y * pw + x] as f64;
                    counts[i] += 1.0;
                }
            }
        }
    }
    [sums[0] / counts[0], sums[1] / counts[1], sums[2] / counts[2]]
}

/// Decodes with our reader (the input's colour) and encodes back with our writer (the same colour).
fn round_trip(input: &Path, output: &Path) -> (Colour, [f64; 3]) {
    let info = probe(&tools(), input, &MediaLimits::unlimited()).unwrap();
    let read = ReadConfig { input: input.to_path_buf(), width: WIDTH, height: HEIGHT, chunk_frames: 4, queue_chunks: 2, colour: info.colour.clone(), priority: ProcessPriority::Normal, span: None };
    let mut reader = FrameReader::spawn(&tools(), read).unwrap();
    let write = WriteConfig {
        output: output.to_path_buf(),
        width: WIDTH,
        height: HEIGHT,
        fps_rational: info.fps_rational.clone(),
        streams_from: None,
        streams_span: None,
        format: OutputFormat::H264,
        colour: info.colour.clone(),
        crf: 0,
        preset: "veryfast".into(),
        queue_chunks: 2,
        priority: ProcessPriority::Normal,
        sample_aspect_ratio: None,
    };
    let mut writer = FrameWriter::spawn(&tools(), write).unwrap();
    let (mut sums, mut pixels) = ([0f64; 3], 0f64);
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for i in 0..chunk.count {
            for (n, px) in chunk.frame(i).chunks_exact(3).enumerate() {
                let (x, y) = (n as u32 % WIDTH, n as u32 / WIDTH);
                if x.abs_diff(WIDTH / 2) < 32 && y.abs_diff(HEIGHT / 2) < 32 {
                    (0..3).for_each(|c| sums[c] += px[c] as f64);
                    pixels += 1.0;
                }
            }
        }
        writer.write(chunk).unwrap();
    }
    writer.finish().unwrap();
    (info.colour, sums.map(|s| s / pixels))
}

fn assert_round_trip(dir: &Path, name: &str, matrix: &str, range: &str) {
    let input = flat_clip(dir, name, matrix, range, true);
    let output = dir.join(format!("out-{name}"));
    let (colour, rgb) = round_trip(&input, &output);
    assert_eq!((colour.matrix.as_str(), colour.range.as_str(), colour.flagged), (matrix, range, true), "{name}: {colour:?}");
    // One code value of 8-bit chroma is up to 1.9 of blue (BT.709's Cb → B gain), so the clip holds
    // the colour to ±2; a wrong matrix or range is 6 and more off (the test below).
    for c in 0..3 {
        assert!((rgb[c] - RGB[c] as f64).abs() <= 2.5, "{name}: the model sees {rgb:.2?}, the clip holds {RGB:?}");
    }
    let (before, after) = (yuv_means(&input), yuv_means(&output));
    for c in 0..3 {
        assert!((before[c] - after[c]).abs() <= 1.0, "{name}: YUV means {before:.2?} became {after:.2?}");
    }
    let flags = ffprobe_colour(&output);
    assert_eq!(flags[0], range, "{name}: {flags:?}");
    assert_eq!(flags[1], matrix, "{name}: {flags:?}");
}

#[test]
fn a_flat_patch_keeps_its_colour_through_decode_and_encode() {
    let dir = tempfile::tempdir().unwrap();
    assert_round_trip(dir.path(), "full-709.mp4", "bt709", "pc");
    assert_round_trip(dir.path(), "limited-601.mp4", "smpte170m", "tv");
}

#[test]
fn decoding_with_ffmpegs_default_matrix_would_shift_the_colour() {
    // The check above can fail: ffmpeg's own default (BT.601, limited) on the full-range BT.709 clip
    // is several code values off.
    let dir = tempfile::tempdir().unwrap();
    let input = flat_clip(dir.path(), "full-709.mp4", "bt709", "pc", false);
    let raw = ffmpeg(&["-i", input.to_str().unwrap(), "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"]);
    let centre = ((HEIGHT / 2 * WIDTH + WIDTH / 2) * 3) as usize;
    let worst = (0..3).map(|c| (raw[centre + c] as i32 - RGB[c] as i32).abs()).max().unwrap();
    assert!(worst > 6, "ffmpeg's default decodes {:?} for {RGB:?}", &raw[centre..centre + 3]);
}

#[test]
fn an_unflagged_clip_gets_its_sizes_defaults_written_explicitly() {
    let dir = tempfile::tempdir().unwrap();
    let input = flat_clip(dir.path(), "plain.mp4", "smpte170m", "tv", false);
    assert_eq!(ffprobe_colour(&input)[0], "unknown", "the test clip carries no flags");
    let output = dir.path().join("out.mp4");
    let (colour, _) = round_trip(&input, &output);
    assert_eq!((colour.matrix.as_str(), colour.range.as_str(), colour.flagged), ("smpte170m", "tv", false));
    assert_eq!(ffprobe_colour(&output), ["tv", "smpte170m", "smpte170m", "smpte170m"]);
    let hd = Colour::default_for_height(1080);
    assert_eq!((hd.matrix.as_str(), hd.primaries.as_str(), hd.transfer.as_str(), hd.range.as_str()), ("bt709", "bt709", "bt709", "tv"));
}
