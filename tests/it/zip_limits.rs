//! Pictures are refused by what their PNG headers declare they decode to, before anything is decoded: a
//! 74 KB zip of 200 frames of 4096×4096 was taken for `vae_encode` (10 GB of pixels), each frame within the
//! size limits, the zip far within the upload limit.
use crate::common;

use std::io::Write;
use std::time::Duration;

use common::*;

/// An 8-bit RGB PNG declaring `width` × `height`, with `zlib` as its one IDAT.
fn png(width: u32, height: u32, zlib: &[u8]) -> Vec<u8> {
    let header = [&width.to_be_bytes()[..], &height.to_be_bytes(), &[8, 2, 0, 0, 0]].concat();
    [&b"\x89PNG\r\n\x1a\n"[..], &png_chunk(b"IHDR", &header), &png_chunk(b"IDAT", zlib), &png_chunk(b"IEND", &[])].concat()
}

/// A whole `side` × `side` grey picture: its rows (each a filter byte and the samples) in one stored
/// (uncompressed) deflate block, with zlib's header and Adler-32.
fn grey_png(side: u32, level: u8) -> Vec<u8> {
    let rows: Vec<u8> = (0..side).flat_map(|_| std::iter::once(0).chain(std::iter::repeat_n(level, 3 * side as usize))).collect();
    let length = rows.len() as u16;
    let (mut a, mut b) = (1u32, 0u32);
    for byte in &rows {
        a = (a + u32::from(*byte)) % 65521;
        b = (b + a) % 65521;
    }
    let zlib = [&[0x78, 0x01, 0x01][..], &length.to_le_bytes(), &(!length).to_le_bytes(), &rows, &((b << 16) | a).to_be_bytes()].concat();
    png(side, side, &zlib)
}

fn zip_of(members: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::FileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in members {
        zip.start_file(name.as_str(), options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pictures_that_decode_past_the_upload_limit_are_refused_from_their_headers() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    // 48 MB: the 4096×4096 still below (50 MB of pixels) is over it too; the sides are the defaults (4096).
    let settings = [("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_MAX_UPLOAD_BYTES", "48000000")];
    let server = Server::start(dir.path(), &settings);
    let client = client();
    let query = "op=vae_encode&model=wan21-small&filename=frames.zip";

    // 200 frames of 4096×4096, each an IDAT of one empty row: a few dozen KB, 10 GB decoded.
    let huge = png(4096, 4096, &[0x78, 0x9c, 0x63, 0, 0, 0, 1, 0, 1]);
    let bomb = zip_of(&(0..200).map(|i| (format!("frame_{i:03}.png"), huge.clone())).collect::<Vec<_>>());
    assert!(bomb.len() < 100_000, "{} bytes", bomb.len());
    let (status, body) = upload_raw(&client, &server, query, bomb).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("media-too-large")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("decoded size is 10066329600 bytes (200 frames of 4096×4096") && message.contains("the limit is 48000000 bytes"), "{message}");

    // A still the same way: one picture of 4096×4096 is 50 MB of pixels.
    let (status, body) = upload_raw(&client, &server, "op=vae_encode&model=wan21-small&filename=still.png", huge).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("media-too-large")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("(1 picture of 4096×4096"), "{body}");

    // Nothing was queued, and the box goes on serving: a small sequence is encoded.
    let (_, list) = get_json(&client, &server.url("/v1/jobs")).await;
    assert_eq!(list["jobs"].as_array().map(Vec::len), Some(0), "{list}");
    let small = zip_of(&[("a.png".to_string(), grey_png(32, 60)), ("b.png".to_string(), grey_png(32, 200))]);
    let (status, job) = upload_raw(&client, &server, query, small).await;
    assert_eq!(status, 202, "{job}");
    assert_eq!((job["input"]["media"]["frames"].as_u64(), job["input"]["media"]["width"].as_u64()), (Some(2), Some(32)), "{job}");
    let job = wait_for_final(&client, &server, job["id"].as_str().unwrap(), Duration::from_secs(120)).await;
    assert_eq!(job["status"], "succeeded", "{job}");
}
