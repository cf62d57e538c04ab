//! Stills (issue 30 item 4): PNG, JPEG and WebP pictures upscaled and restored into PNGs (8- or 16-bit,
//! alpha kept), and zips of PNG frames taken as image sequences; each against the box's own video path or
//! the pictures it was made from, over HTTP.
use crate::common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

/// 64 × 48 pictures keep every upscale here well under a second.
const W: usize = 64;
const H: usize = 48;

fn ffmpeg(args: &[&str]) {
    let out = Command::new("ffmpeg").args(["-nostdin", "-v", "error", "-y"]).args(args).output().expect("run ffmpeg");
    assert!(out.status.success(), "ffmpeg {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `picture` with the alpha `expression` of X and Y (ffmpeg's `geq`) merged in; the colour stays as it is.
fn with_alpha(picture: &Path, expression: &str, out: &Path) -> PathBuf {
    let graph = format!("[0:v]format=rgba[c];[0:v]format=gray,geq=lum={expression}[a];[c][a]alphamerge");
    ffmpeg(&["-i", picture.to_str().unwrap(), "-filter_complex", &graph, "-frames:v", "1", out.to_str().unwrap()]);
    out.to_path_buf()
}

/// The decoded samples of a picture or video, as ffmpeg converts them to `pix_fmt`.
fn decode(path: &Path, pix_fmt: &str) -> Vec<u8> {
    let out = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-i"])
        .arg(path)
        .args(["-f", "rawvideo", "-pix_fmt", pix_fmt, "-"])
        .output()
        .expect("run ffmpeg");
    assert!(out.status.success(), "decoding {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn u16s(bytes: &[u8]) -> Vec<u16> {
    bytes.chunks_exact(2).map(|pair| u16::from_le_bytes([pair[0], pair[1]])).collect()
}

/// IHDR: (width, height, bit depth, colour type: 2 RGB, 6 RGBA).
fn png_header(png: &[u8]) -> (u32, u32, u8, u8) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    (u32::from_be_bytes(png[16..20].try_into().unwrap()), u32::from_be_bytes(png[20..24].try_into().unwrap()), png[24], png[25])
}

fn max_difference(a: &[u8], b: &[u8]) -> u8 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x.abs_diff(*y)).max().unwrap()
}

async fn upscaled(client: &reqwest::Client, server: &Server, query: &str, input: &Path, out: &Path) -> Value {
    let job = run_job(client, server, query, std::fs::read(input).unwrap()).await;
    std::fs::write(out, fetch(client, server, &job).await).unwrap();
    job
}

/// A zip of `(name, bytes)` members, deflated as zip tools make them.
fn zip_of(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::FileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in members {
        zip.start_file(*name, options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stills_upscale_as_their_one_frame_video_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = Server::start(d, &[]);
    let client = client();
    let png = crop_of_astronaut(&d.join("face.png"), 180, 60);
    let jpeg = d.join("face.jpg");
    ffmpeg(&["-i", png.to_str().unwrap(), "-q:v", "3", jpeg.to_str().unwrap()]);
    let webp = d.join("face.webp");
    ffmpeg(&["-i", png.to_str().unwrap(), "-c:v", "libwebp", "-quality", "80", webp.to_str().unwrap()]);

    for (still, ext) in [(&png, "png"), (&jpeg, "jpg"), (&webp, "webp")] {
        // Named `upload.bin`: a still is found by probing, not by its name.
        let out = d.join(format!("out-{ext}.png"));
        let job = upscaled(&client, &server, "op=upscale&filename=upload.bin", still, &out).await;
        assert_eq!(job["input"]["media"]["still"], true, "{job}");
        assert_eq!(job["params"]["output_format"], "png", "a still's default: {job}");
        assert_eq!(job["output"]["file_name"], "upload_x4.png", "{job}");
        assert_eq!(job["output"]["content_type"], "image/png", "{job}");
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(png_header(&bytes), (4 * W as u32, 4 * H as u32, 8, 2), "{ext}");
        // The page's thumbnail of a finished still job: the upscaled picture (under 320 px wide, as it is).
        let thumbnail = client.get(server.url(&format!("/v1/jobs/{}/thumbnail", job["id"].as_str().unwrap()))).send().await.unwrap();
        assert_eq!(thumbnail.status(), 200, "{ext}");
        assert_eq!(png_header(&thumbnail.bytes().await.unwrap()).0, 4 * W as u32, "{ext}");

        // The same pixels as a one-frame video (the JPEG's own bitstream copied into Matroska; the others
        // as lossless FFV1, which keeps their samples and colour flags), upscaled by the box's video path
        // into 16-bit RGB: within one 8-bit level.
        let video = d.join(format!("one-frame-{ext}.mkv"));
        let codec = if ext == "jpg" { "copy" } else { "ffv1" };
        ffmpeg(&["-i", still.to_str().unwrap(), "-c:v", codec, video.to_str().unwrap()]);
        let video_out = d.join(format!("video-{ext}.mkv"));
        upscaled(&client, &server, "op=upscale&output_format=ffv1&filename=one.mkv", &video, &video_out).await;
        let from_video: Vec<u8> = u16s(&decode(&video_out, "rgb48le")).iter().map(|v| (f64::from(*v) / 257.0).round() as u8).collect();
        let from_still = decode(&out, "rgb24");
        let worst = max_difference(&from_still, &from_video);
        let big = from_still.iter().zip(&from_video).filter(|(a, b)| a.abs_diff(**b) > 1).count();
        assert!(worst <= 1, "{ext}: the still's upscale differs from the video path's by up to {worst} ({big} samples)");
    }

    // The other upscaler family: Real-CUGAN ×2.
    let out = d.join("cugan.png");
    let job = upscaled(&client, &server, "op=upscale&model=realcugan-se-2x&scale=2&filename=face.png", &png, &out).await;
    assert_eq!(job["output"]["file_name"], "face_x2.png", "{job}");
    assert_eq!(png_header(&std::fs::read(&out).unwrap()), (2 * W as u32, 2 * H as u32, 8, 2));

    // png16: 16 bits made from the float output, not 8-bit values widened, and within 1/255 of the 8-bit PNG.
    let out16 = d.join("face16.png");
    let job = upscaled(&client, &server, "op=upscale&output_format=png16&filename=face.png", &png, &out16).await;
    assert_eq!(job["params"]["output_format"], "png16", "{job}");
    assert_eq!(png_header(&std::fs::read(&out16).unwrap()), (4 * W as u32, 4 * H as u32, 16, 2));
    let deep = u16s(&decode(&out16, "rgb48le"));
    assert!(deep.iter().any(|v| v % 257 != 0), "every sample is a widened 8-bit one");
    let eight = decode(&d.join("out-png.png"), "rgb24");
    let worst = deep.iter().zip(&eight).map(|(v, e)| (f64::from(*v) / 65535.0 - f64::from(*e) / 255.0).abs()).fold(0.0, f64::max);
    assert!(worst <= 1.0 / 255.0 + 1e-9, "png16 is {worst} from png");

    // Refused: a video format for a still, video-only parameters, a sequence's fps.
    let body = std::fs::read(&png).unwrap();
    let refused = [
        ("op=upscale&output_format=h264", "output-format-not-for-still"),
        ("op=upscale&output_format=ffv1", "output-format-not-for-still"),
        ("op=upscale&keep_audio=false", "parameter-not-for-input"),
        ("op=upscale&fps=12", "parameter-not-for-input"),
        ("op=upscale&fps=0", "invalid-fps"),
        ("op=upscale&output_format=gif", "invalid-output-format"),
    ];
    for (query, code) in refused {
        let (status, answer) = upload_raw(&client, &server, query, body.clone()).await;
        assert_eq!((status, answer["error"]["code"].as_str()), (400, Some(code)), "{query}: {answer}");
    }
    // A video's png keeps its meaning from before stills: a zip of 16-bit frames.
    let clip = d.join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 1, false, &clip);
    let (status, answer) = upload_raw(&client, &server, "op=upscale&output_format=png", std::fs::read(&clip).unwrap()).await;
    assert_eq!((status, answer["params"]["output_format"].as_str()), (202, Some("png16")), "{answer}");
    wait_for_final(&client, &server, answer["id"].as_str().unwrap(), std::time::Duration::from_secs(120)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpha_is_upscaled_beside_the_colour() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = Server::start(d, &[]);
    let client = client();
    let png = crop_of_astronaut(&d.join("face.png"), 180, 60);
    // Left half transparent, right half opaque, with a soft ramp between.
    let rgba = with_alpha(&png, "if(lt(X\\,28)\\,0\\,if(gt(X\\,35)\\,255\\,(X-28)*32))", &d.join("rgba.png"));
    // The alpha alone as a grey picture: what the box makes of it through the model is the reference.
    let grey = d.join("grey.png");
    ffmpeg(&["-i", rgba.to_str().unwrap(), "-vf", "alphaextract,format=rgb24", grey.to_str().unwrap()]);

    let out = d.join("rgba_x4.png");
    let job = upscaled(&client, &server, "op=upscale&filename=rgba.png", &rgba, &out).await;
    assert_eq!(job["input"]["media"]["alpha"], true, "{job}");
    assert_eq!(png_header(&std::fs::read(&out).unwrap()), (4 * W as u32, 4 * H as u32, 8, 6), "RGBA out");
    let pixels = decode(&out, "rgba");
    let alpha_at = |x: usize, y: usize| pixels[(y * 4 * W + x) * 4 + 3];
    for y in 0..4 * H {
        // At most 1/255 (the model's own border response, at the picture's corner), else 0.
        assert!((0..4 * 24).all(|x| alpha_at(x, y) <= 1), "row {y}: the transparent part stays transparent");
        // The model's output on a flat white is within a level or two of it, not exactly 1.
        assert!((4 * 40..4 * W).all(|x| alpha_at(x, y) >= 250), "row {y}: the opaque part stays opaque");
    }
    let grey_out = d.join("grey_x4.png");
    upscaled(&client, &server, "op=upscale&filename=grey.png", &grey, &grey_out).await;
    let luma: Vec<u8> = decode(&grey_out, "rgb24")
        .chunks_exact(3)
        .map(|p| (0.299 * f64::from(p[0]) + 0.587 * f64::from(p[1]) + 0.114 * f64::from(p[2])).round() as u8)
        .collect();
    let alpha: Vec<u8> = pixels.chunks_exact(4).map(|p| p[3]).collect();
    assert!(max_difference(&alpha, &luma) <= 1, "the alpha is the model's upscale of the alpha as a grey picture");
    // The colour under the alpha is the RGB picture's upscale.
    let rgb_out = d.join("face_x4.png");
    upscaled(&client, &server, "op=upscale&filename=face.png", &png, &rgb_out).await;
    let colour: Vec<u8> = pixels.chunks_exact(4).flat_map(|p| p[..3].to_vec()).collect();
    assert!(max_difference(&colour, &decode(&rgb_out, "rgb24")) <= 1, "the colour is untouched by the alpha");

    // WebP with alpha: alpha kept in a 16-bit RGBA PNG.
    let webp = d.join("rgba.webp");
    ffmpeg(&["-i", rgba.to_str().unwrap(), "-c:v", "libwebp", "-lossless", "1", webp.to_str().unwrap()]);
    let out16 = d.join("webp16.png");
    upscaled(&client, &server, "op=upscale&output_format=png16&filename=rgba.webp", &webp, &out16).await;
    assert_eq!(png_header(&std::fs::read(&out16).unwrap()), (4 * W as u32, 4 * H as u32, 16, 6));
    let deep = u16s(&decode(&out16, "rgba64le"));
    assert!(deep.chunks_exact(4).take(4 * 20).all(|p| p[3] <= 257) && deep.chunks_exact(4).last().unwrap()[3] > 64000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zips_of_png_frames_are_sequences() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let limits = [("VAEBOX_MAX_FRAMES", "4"), ("VAEBOX_MAX_UPLOAD_BYTES", "1000000"), ("VAEBOX_MAX_WIDTH", "300")];
    let server = Server::start(d, &limits);
    let client = client();
    // Three different parts of the photograph, stored out of name order: frames go in name order.
    let frames: Vec<Vec<u8>> = [(0, 0), (180, 60), (300, 300)]
        .iter()
        .enumerate()
        .map(|(i, (x, y))| std::fs::read(crop_of_astronaut(&d.join(format!("f{i}.png")), *x, *y)).unwrap())
        .collect();
    let zip = zip_of(&[("frame_b.png", frames[1].clone()), ("frame_a.png", frames[0].clone()), ("frame_c.png", frames[2].clone())]);

    let job = run_job(&client, &server, "op=upscale&fps=12&filename=seq.zip", zip.clone()).await;
    let input = &job["input"]["media"];
    assert_eq!((input["container"].as_str(), input["frames"].as_u64(), input["fps_rational"].as_str()), (Some("zip"), Some(3), Some("12/1")), "{job}");
    assert_eq!(job["output"]["file_name"], "seq_x4.mp4", "{job}");
    // The page's thumbnail is of the output video; a zip input has none of its own (409, not a failed ffmpeg).
    let thumbnail = |job: &Value| server.url(&format!("/v1/jobs/{}/thumbnail", job["id"].as_str().unwrap()));
    assert_eq!(client.get(thumbnail(&job)).send().await.unwrap().status(), 200);
    let mp4 = d.join("seq.mp4");
    std::fs::write(&mp4, fetch(&client, &server, &job).await).unwrap();
    let probed = ffprobe(&mp4);
    assert_eq!((probed.width, probed.height, probed.frames, probed.fps.as_str()), (256, 192, 3, "12/1"), "{probed:?}");

    let job = run_job(&client, &server, "op=upscale&output_format=png&filename=seq.zip", zip).await;
    assert_eq!(job["output"]["file_name"], "seq_x4.zip", "{job}");
    assert_eq!(job["input"]["media"]["fps_rational"], "24/1", "the default rate: {job}");
    let (status, answer) = get_json(&client, &thumbnail(&job)).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (409, Some("preview-unavailable")), "{answer}");
    let bytes = fetch(&client, &server, &job).await;
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
    assert_eq!(archive.len(), 3);
    for (i, source) in frames.iter().enumerate() {
        let mut png = Vec::new();
        archive.by_name(&format!("frame_{i:06}.png")).unwrap().read_to_end(&mut png).unwrap();
        assert_eq!(png_header(&png), (256, 192, 8, 2), "8-bit frames");
        // Each output frame is its own source upscaled (the mean colour of a crop tells them apart).
        let (out_path, in_path) = (d.join(format!("out{i}.png")), d.join(format!("in{i}.png")));
        std::fs::write(&out_path, &png).unwrap();
        std::fs::write(&in_path, source).unwrap();
        let mean = |p: &Path| decode(p, "rgb24").iter().map(|v| f64::from(*v)).sum::<f64>() / (decode(p, "rgb24").len() as f64);
        assert!((mean(&out_path) - mean(&in_path)).abs() < 3.0, "frame {i} is not its source's upscale");
    }

    // Refused before a job is queued, each with its code.
    let jpeg = d.join("f.jpg");
    ffmpeg(&["-i", d.join("f0.png").to_str().unwrap(), jpeg.to_str().unwrap()]);
    let small = d.join("small.png");
    ffmpeg(&["-i", d.join("f0.png").to_str().unwrap(), "-vf", "scale=32:24", small.to_str().unwrap()]);
    let five: Vec<(String, Vec<u8>)> = (0..5).map(|i| (format!("{i}.png"), frames[0].clone())).collect();
    let bomb = vec![0u8; 2_000_000]; // 2 MB unpacked, a few KiB packed, over the 1 MB upload limit
    let refused = [
        (zip_of(&[("a.png", frames[0].clone()), ("b.jpg", std::fs::read(&jpeg).unwrap())]), 422, "sequence-not-png"),
        (zip_of(&[("a.png", frames[0].clone()), ("b.png", std::fs::read(&small).unwrap())]), 422, "sequence-mixed-sizes"),
        (zip_of(&five.iter().map(|(n, b)| (n.as_str(), b.clone())).collect::<Vec<_>>()), 422, "media-too-large"),
        (zip_of(&[("a.png", frames[0].clone()), ("b.png", bomb)]), 422, "media-too-large"),
    ];
    for (body, status, code) in refused {
        let (got, answer) = upload_raw(&client, &server, "op=upscale&filename=bad.zip", body).await;
        assert_eq!((got, answer["error"]["code"].as_str()), (status, Some(code)), "{answer}");
    }

    // The size limits hold for stills as for videos: on the picture, and on what the upscale would write.
    for (width, code) in [(320, "media-too-large"), (76, "output-too-large")] {
        let wide = d.join(format!("wide{width}.png"));
        ffmpeg(&["-i", media("astronaut.png").to_str().unwrap(), "-vf", &format!("crop={width}:{H}:0:0"), wide.to_str().unwrap()]);
        let (got, answer) = upload_raw(&client, &server, "op=upscale&filename=wide.png", std::fs::read(&wide).unwrap()).await;
        assert_eq!((got, answer["error"]["code"].as_str()), (422, Some(code)), "{width} px: {answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_still_is_restored_as_a_one_frame_clip() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let models = models_with_small_seedvr2(d);
    let server = Server::start(d, &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let png = crop_of_astronaut(&d.join("face.png"), 180, 60);
    let rgba = with_alpha(&png, "if(lt(X\\,32)\\,0\\,255)", &d.join("rgba.png"));

    let out = d.join("restored.png");
    let job = upscaled(&client, &server, "op=restore&model=seedvr2-3b-small&height=96&width=128&filename=rgba.png", &rgba, &out).await;
    assert_eq!(job["output"]["file_name"], "rgba_restored.png", "{job}");
    assert_eq!(job["plan"]["frames"], 1, "{job}");
    assert_eq!(png_header(&std::fs::read(&out).unwrap()), (128, 96, 8, 6), "the expected size, with alpha");
    // The alpha resized as the colour was: transparent on the left, opaque on the right, away from the edge.
    let pixels = decode(&out, "rgba");
    let alpha_at = |x: usize, y: usize| pixels[(y * 128 + x) * 4 + 3];
    assert!((0..96).all(|y| (0..56).all(|x| alpha_at(x, y) == 0) && (72..128).all(|x| alpha_at(x, y) == 255)));
}
