//! The media layer against the real ffmpeg/ffprobe and a real clip (176×144, 120 frames, 30000/1001).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vaebox::media::{
    probe, Colour, FrameReader, FrameWriter, MediaError, MediaInfo, MediaLimits, MediaTools, OutputFormat, ProcessPriority, ReadConfig, RgbFrames,
    WriteConfig,
};

const CLIP_FRAMES: u64 = 120;
const CLIP_WIDTH: u32 = 176;
const CLIP_HEIGHT: u32 = 144;

fn clip() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/media/carphone_pristine.mp4")
}

fn tools() -> MediaTools {
    MediaTools {
        ffmpeg: "ffmpeg".into(),
        ffprobe: "ffprobe".into(),
        probe_timeout: Duration::from_secs(30),
        stream_timeout: Duration::from_secs(120),
    }
}

fn roomy_limits() -> MediaLimits {
    MediaLimits { max_bytes: 1 << 30, max_width: 4096, max_height: 4096, max_frames: 100_000, max_duration_s: 3600.0 }
}

fn probe_ok(path: &Path) -> MediaInfo {
    probe(&tools(), path, &roomy_limits()).unwrap_or_else(|e| panic!("probing {}: {e}", path.display()))
}

fn probe_err(path: &Path, limits: &MediaLimits) -> MediaError {
    match probe(&tools(), path, limits) {
        Ok(info) => panic!("{} probed fine: {info:?}", path.display()),
        Err(e) => e,
    }
}

/// Runs the ffmpeg CLI directly: the outside reference the layer is checked against.
fn ffmpeg_cli(args: &[&str]) -> Vec<u8> {
    let output = Command::new("ffmpeg").args(["-nostdin", "-v", "error", "-y"]).args(args).output().unwrap();
    assert!(output.status.success(), "ffmpeg {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output.stdout
}

fn ffprobe_audio_codec(path: &Path) -> String {
    let output = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "a:0", "-show_entries", "stream=codec_name", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

fn read_all(path: &Path, width: u32, height: u32, chunk_frames: usize) -> Vec<RgbFrames> {
    let config = ReadConfig { input: path.to_path_buf(), width, height, chunk_frames, queue_chunks: 2, colour: probe_ok(path).colour, priority: ProcessPriority::Normal, span: None };
    let mut reader = FrameReader::spawn(&tools(), config).unwrap();
    let mut chunks = Vec::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        chunks.push(chunk);
    }
    assert_eq!(reader.next_chunk().unwrap(), None, "the stream stays ended");
    chunks
}

fn write_config(output: &Path, width: u32, height: u32) -> WriteConfig {
    WriteConfig {
        output: output.to_path_buf(),
        width,
        height,
        fps_rational: "30000/1001".into(),
        streams_from: None,
        streams_span: None,
        format: OutputFormat::H264,
        colour: Colour::default_for_height(height),
        crf: 12,
        preset: "veryfast".into(),
        queue_chunks: 2,
        priority: ProcessPriority::Normal,
        sample_aspect_ratio: None,
    }
}

fn psnr(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let mse = a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum::<f64>() / a.len() as f64;
    10.0 * (255.0f64 * 255.0 / mse.max(1e-10)).log10()
}

#[test]
fn probe_describes_the_reference_clip() {
    let info = probe_ok(&clip());
    let bytes = std::fs::metadata(clip()).unwrap().len();
    assert_eq!(
        (info.container.as_str(), info.codec.as_str(), info.width, info.height),
        ("mp4", "h264", CLIP_WIDTH, CLIP_HEIGHT)
    );
    assert_eq!((info.frames, info.fps_rational.as_str(), info.has_audio, info.bytes), (CLIP_FRAMES, "30000/1001", false, bytes));
    assert!((info.fps - 30000.0 / 1001.0).abs() < 1e-9);
    assert!((info.duration_s - 4.004).abs() < 1e-3, "{}", info.duration_s);
}

#[test]
fn decoding_in_chunks_yields_every_frame_once_and_matches_the_ffmpeg_cli() {
    let chunks = read_all(&clip(), CLIP_WIDTH, CLIP_HEIGHT, 16);
    let counts: Vec<usize> = chunks.iter().map(|c| c.count).collect();
    assert_eq!(counts, [16, 16, 16, 16, 16, 16, 16, 8]);
    let decoded: Vec<u8> = chunks.into_iter().flat_map(|c| c.data).collect();
    let reference = ffmpeg_cli(&[
        "-i", clip().to_str().unwrap(), "-f", "rawvideo", "-pix_fmt", "rgb24", "-fps_mode", "passthrough", "-",
    ]);
    assert_eq!(decoded.len(), reference.len());
    assert!(decoded == reference, "decoded pixels differ from the ffmpeg CLI's");
}

#[test]
fn reencoding_the_first_frames_keeps_size_count_rate_and_pixels() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.mp4");
    let config = ReadConfig { input: clip(), width: CLIP_WIDTH, height: CLIP_HEIGHT, chunk_frames: 7, queue_chunks: 2, colour: Colour::default_for_height(CLIP_HEIGHT), priority: ProcessPriority::Normal, span: None };
    let mut reader = FrameReader::spawn(&tools(), config).unwrap();
    let mut writer = FrameWriter::spawn(&tools(), write_config(&output, CLIP_WIDTH, CLIP_HEIGHT)).unwrap();
    let mut originals = Vec::new();
    for _ in 0..6 {
        let chunk = reader.next_chunk().unwrap().unwrap();
        originals.extend_from_slice(&chunk.data);
        writer.write(chunk).unwrap();
    }
    drop(reader); // stops the decoder mid-stream
    assert_eq!(writer.frames_written(), 42);
    assert!(!output.exists(), "the output must not be visible before finish");
    writer.finish().unwrap();

    let info = probe_ok(&output);
    assert_eq!((info.width, info.height, info.frames, info.fps_rational.as_str()), (CLIP_WIDTH, CLIP_HEIGHT, 42, "30000/1001"));
    assert_eq!((info.container.as_str(), info.codec.as_str(), info.has_audio), ("mp4", "h264", false));
    let round_trip: Vec<u8> = read_all(&output, CLIP_WIDTH, CLIP_HEIGHT, 42).into_iter().flat_map(|c| c.data).collect();
    let quality = psnr(&originals, &round_trip);
    assert!(quality > 35.0, "PSNR {quality:.1} dB after a crf-12 re-encode");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, ["out.mp4"], "no partial file remains");
}

#[test]
fn a_rotated_phone_video_is_probed_and_decoded_upright() {
    let dir = tempfile::tempdir().unwrap();
    let rotated = dir.path().join("rotated.mp4");
    ffmpeg_cli(&[
        "-i", clip().to_str().unwrap(), "-frames:v", "10", "-c", "copy", "-metadata:s:v", "rotate=90",
        rotated.to_str().unwrap(),
    ]);
    let info = probe_ok(&rotated);
    assert_eq!((info.width, info.height, info.frames), (CLIP_HEIGHT, CLIP_WIDTH, 10));
    let chunks = read_all(&rotated, info.width, info.height, 4);
    assert_eq!(chunks.iter().map(|c| c.count).sum::<usize>(), 10);
    let decoded: Vec<u8> = chunks.into_iter().flat_map(|c| c.data).collect();
    let upright = ffmpeg_cli(&["-i", rotated.to_str().unwrap(), "-f", "rawvideo", "-pix_fmt", "rgb24", "-fps_mode", "passthrough", "-"]);
    assert!(decoded == upright, "frames differ from ffmpeg's auto-rotated decode");
}

#[test]
fn odd_sizes_are_padded_to_even_without_losing_frames() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("odd.mp4");
    let (width, height) = (175, 143);
    let gradient: Vec<u8> = (0..width * height * 3 * 5).map(|i| (i % 251) as u8).collect();
    let mut writer = FrameWriter::spawn(&tools(), write_config(&output, width, height)).unwrap();
    writer.write(RgbFrames::new(width, height, gradient).unwrap()).unwrap();
    writer.finish().unwrap();
    let info = probe_ok(&output);
    assert_eq!((info.width, info.height, info.frames), (176, 144, 5));
}

/// The carphone clip's first second with a 440 Hz tone in `audio_codec`, in `container`.
fn clip_with_audio(dir: &Path, name: &str, audio_codec: &str) -> PathBuf {
    let path = dir.join(name);
    ffmpeg_cli(&[
        "-i", clip().to_str().unwrap(), "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000",
        "-map", "0:v:0", "-map", "1:a:0", "-frames:v", "30", "-t", "1.001", "-c:v", "copy", "-c:a", audio_codec,
        path.to_str().unwrap(),
    ]);
    path
}

fn reencode_with_audio(input: &Path, output: &Path) -> MediaInfo {
    let source = probe_ok(input);
    assert!(source.has_audio);
    let mut writer = FrameWriter::spawn(
        &tools(),
        WriteConfig { streams_from: Some(input.to_path_buf()), fps_rational: source.fps_rational.clone(), ..write_config(output, source.width, source.height) },
    )
    .unwrap();
    for chunk in read_all(input, source.width, source.height, 8) {
        writer.write(chunk).unwrap();
    }
    writer.finish().unwrap();
    let info = probe_ok(output);
    assert_eq!((info.frames, info.fps_rational.as_str(), info.has_audio), (source.frames, source.fps_rational.as_str(), true));
    info
}

#[test]
fn aac_audio_is_copied_into_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = clip_with_audio(dir.path(), "tone.mp4", "aac");
    assert_eq!(probe_ok(&input).frames, 30);
    reencode_with_audio(&input, &dir.path().join("out.mp4"));
    assert_eq!(ffprobe_audio_codec(&dir.path().join("out.mp4")), "aac");
}

#[test]
fn audio_that_mp4_cannot_hold_is_reencoded_to_aac() {
    let dir = tempfile::tempdir().unwrap();
    let input = clip_with_audio(dir.path(), "tone.mkv", "pcm_s16le");
    assert_eq!(ffprobe_audio_codec(&input), "pcm_s16le");
    let info = reencode_with_audio(&input, &dir.path().join("out.mp4"));
    assert_eq!(info.frames, 30);
    assert_eq!(ffprobe_audio_codec(&dir.path().join("out.mp4")), "aac");
}

#[test]
fn audio_from_a_silent_file_gives_a_silent_output() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.mp4");
    let config = WriteConfig { streams_from: Some(clip()), ..write_config(&output, CLIP_WIDTH, CLIP_HEIGHT) };
    let mut writer = FrameWriter::spawn(&tools(), config).unwrap();
    writer.write(RgbFrames::new(CLIP_WIDTH, CLIP_HEIGHT, vec![128; (CLIP_WIDTH * CLIP_HEIGHT * 3 * 3) as usize]).unwrap()).unwrap();
    writer.finish().unwrap();
    let info = probe_ok(&output);
    assert_eq!((info.frames, info.has_audio), (3, false));
}

#[test]
fn bad_inputs_get_their_codes() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.mp4");
    std::fs::write(&empty, b"").unwrap();
    let text = dir.path().join("notes.mp4");
    std::fs::write(&text, "this is not a video\n".repeat(100)).unwrap();
    let clip_bytes = std::fs::read(clip()).unwrap();
    // The clip keeps its index (moov) at the end, so half of it has no index at all.
    let half = dir.path().join("half.mp4");
    std::fs::write(&half, &clip_bytes[..clip_bytes.len() / 2]).unwrap();
    // With the index in front (faststart) half a file still opens, but frames are missing.
    let faststart = dir.path().join("faststart.mp4");
    ffmpeg_cli(&["-i", clip().to_str().unwrap(), "-c", "copy", "-movflags", "+faststart", faststart.to_str().unwrap()]);
    let faststart_bytes = std::fs::read(&faststart).unwrap();
    let faststart_half = dir.path().join("faststart_half.mp4");
    std::fs::write(&faststart_half, &faststart_bytes[..faststart_bytes.len() / 2]).unwrap();

    // Matroska declares no frame count; ffprobe warns when the file ends inside a cluster.
    let mkv = dir.path().join("copy.mkv");
    ffmpeg_cli(&["-i", clip().to_str().unwrap(), "-c", "copy", mkv.to_str().unwrap()]);
    let mkv_bytes = std::fs::read(&mkv).unwrap();
    let mkv_half = dir.path().join("half.mkv");
    std::fs::write(&mkv_half, &mkv_bytes[..mkv_bytes.len() / 2]).unwrap();

    let cases = [
        (&empty, "empty-file"),
        (&mkv_half, "truncated-media"),
        (&text, "not-a-video"),
        (&half, "truncated-media"),
        (&faststart_half, "truncated-media"),
    ];
    for (path, code) in cases {
        let err = probe_err(path, &roomy_limits());
        assert_eq!(err.code(), code, "{}: {err}", path.display());
        assert!(err.is_client_error(), "{err}");
    }
    assert_eq!(probe_ok(&faststart).frames, CLIP_FRAMES, "the intact faststart copy is fine");
    let intact_mkv = probe_ok(&mkv);
    assert_eq!((intact_mkv.container.as_str(), intact_mkv.frames), ("matroska", CLIP_FRAMES));
    let missing = probe_err(&dir.path().join("nope.mp4"), &roomy_limits());
    assert_eq!(missing.code(), "media-io");
}

#[test]
fn each_limit_is_enforced_and_named() {
    let bytes = std::fs::metadata(clip()).unwrap().len();
    let cases = [
        (MediaLimits { max_bytes: bytes - 1, ..roomy_limits() }, format!("bytes is {bytes}, the limit is {}", bytes - 1)),
        (MediaLimits { max_width: 175, ..roomy_limits() }, "width is 176, the limit is 175".into()),
        (MediaLimits { max_height: 100, ..roomy_limits() }, "height is 144, the limit is 100".into()),
        (MediaLimits { max_frames: 119, ..roomy_limits() }, "frames is 120, the limit is 119".into()),
        (MediaLimits { max_duration_s: 4.0, ..roomy_limits() }, "duration is 4.004 s, the limit is 4 s".into()),
    ];
    for (limits, expected) in cases {
        let err = probe_err(&clip(), &limits);
        assert_eq!(err.code(), "media-too-large");
        assert!(err.to_string().contains(&expected), "{err:?} does not say {expected:?}");
    }
    let exact = MediaLimits { max_bytes: bytes, max_width: 176, max_height: 144, max_frames: 120, max_duration_s: 4.004 };
    assert!(probe(&tools(), &clip(), &exact).is_ok(), "limits are inclusive");
}

#[test]
fn a_writer_dropped_midway_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.mp4");
    let mut writer = FrameWriter::spawn(&tools(), write_config(&output, CLIP_WIDTH, CLIP_HEIGHT)).unwrap();
    for chunk in read_all(&clip(), CLIP_WIDTH, CLIP_HEIGHT, 20).into_iter().take(3) {
        writer.write(chunk).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200)); // let ffmpeg write part of the file
    drop(writer);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
}

#[test]
fn a_failing_encoder_reports_ffmpegs_stderr_and_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.mp4");
    let config = WriteConfig { preset: "nosuchpreset".into(), ..write_config(&output, CLIP_WIDTH, CLIP_HEIGHT) };
    let mut writer = FrameWriter::spawn(&tools(), config).unwrap();
    let frames = || RgbFrames::new(CLIP_WIDTH, CLIP_HEIGHT, vec![0; (CLIP_WIDTH * CLIP_HEIGHT * 3 * 10) as usize]).unwrap();
    // ffmpeg fails at start-up; depending on timing the error shows in `write` or in `finish`.
    let error = (0..50).find_map(|_| writer.write(frames()).err()).unwrap_or_else(|| writer.finish().unwrap_err());
    assert_eq!(error.code(), "ffmpeg-failed", "{error}");
    assert!(error.to_string().contains("preset"), "stderr missing from: {error}");
    assert!(!error.is_client_error());
    assert!(!output.exists());
}

#[test]
fn the_stream_timeout_kills_a_stalled_decode() {
    let tools = MediaTools { stream_timeout: Duration::from_millis(500), ..tools() };
    let config = ReadConfig { input: clip(), width: CLIP_WIDTH, height: CLIP_HEIGHT, chunk_frames: 1, queue_chunks: 1, colour: Colour::default_for_height(CLIP_HEIGHT), priority: ProcessPriority::Normal, span: None };
    let mut reader = FrameReader::spawn(&tools, config).unwrap();
    let started = Instant::now();
    let first = reader.next_chunk().unwrap().unwrap();
    assert_eq!(first.count, 1);
    // A consumer that stalls: ffmpeg blocks on a full pipe until the deadline kills it.
    std::thread::sleep(Duration::from_millis(1500));
    let mut frames = 1;
    let error = loop {
        match reader.next_chunk() {
            Ok(Some(chunk)) => frames += chunk.count,
            Ok(None) => panic!("decode finished ({frames} frames) despite the timeout"),
            Err(e) => break e,
        }
    };
    assert_eq!(error.code(), "media-timeout", "{error}");
    assert!((frames as u64) < CLIP_FRAMES);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn the_probe_timeout_kills_a_stalled_ffprobe() {
    let dir = tempfile::tempdir().unwrap();
    let stalled = dir.path().join("ffprobe");
    std::fs::write(&stalled, "#!/bin/sh\nexec sleep 30\n").unwrap();
    std::fs::set_permissions(&stalled, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let tools = MediaTools { ffprobe: stalled, probe_timeout: Duration::from_millis(300), ..tools() };
    let started = Instant::now();
    let error = probe(&tools, &clip(), &roomy_limits()).unwrap_err();
    assert_eq!(error.code(), "media-timeout", "{error}");
    assert!(!error.is_client_error());
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}

#[test]
fn a_missing_ffprobe_is_a_server_fault() {
    let tools = MediaTools { ffprobe: "/nonexistent/ffprobe".into(), ..tools() };
    let error = probe(&tools, &clip(), &roomy_limits()).unwrap_err();
    assert_eq!(error.code(), "ffmpeg-missing");
    assert!(!error.is_client_error());
}

#[test]
fn media_info_round_trips_through_json() {
    let info = probe_ok(&clip());
    let json = serde_json::to_string(&info).unwrap();
    assert_eq!(serde_json::from_str::<MediaInfo>(&json).unwrap(), info);
}
