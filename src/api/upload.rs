//! Receiving an upload: multipart (`file` part + fields or a `params` JSON part) or a raw body with
//! query parameters. The bytes stream to a temporary file under a size limit; memory stays flat.
use std::path::Path;

use axum::extract::multipart::Field;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::header::CONTENT_TYPE;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;

use super::error::ApiError;
use super::params::{self, JobFields};
use super::upload_places::{NoPlace, UploadPlace};
use crate::error_codes as codes;
use crate::queue::StagedFile;

pub struct Upload {
    pub file: StagedFile,
    pub fields: JobFields,
    /// What the body probably was, said with a refusal of it as a video (`explain`): a few bytes of text
    /// (`curl -F file=clip.mp4`, without the `@`), or a form-encoded body (`curl -d @clip.mp4`).
    pub hint: Option<String>,
}

pub fn is_multipart(request: &Request) -> bool {
    request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"))
}

pub fn query_fields(request: &Request) -> Result<JobFields, ApiError> {
    params::from_query(request.uri().query().unwrap_or(""))
}

pub struct UploadLimits<'a> {
    pub dir: &'a Path,
    pub max_bytes: u64,
    /// `min_upload_rate_kib_s` (0: none).
    pub min_kib_s: u64,
    /// The place the body is received in: a body cut as too slow cools its address down.
    pub place: &'a UploadPlace,
}

pub async fn receive_raw(request: Request, fields: JobFields, limits: &UploadLimits<'_>) -> Result<Upload, ApiError> {
    let file_name = fields.get("filename").unwrap_or("input.mp4");
    let form_encoded = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("application/x-www-form-urlencoded"));
    let sent = Sent::Raw { form_encoded, file_name: fields.get("filename").map(str::to_string) };
    let stream = request.into_body().into_data_stream();
    let file = stream_to_temp(stream, sanitize_file_name(file_name), limits).await?;
    let hint = sniff(&file, &sent).await;
    Ok(Upload { file, fields, hint })
}

pub async fn receive_multipart(request: Request, limits: &UploadLimits<'_>) -> Result<Upload, ApiError> {
    let mut multipart = Multipart::from_request(request, &())
        .await
        .map_err(|e| ApiError::bad_request(codes::INVALID_MULTIPART, e.body_text()))?;
    let received = receive_parts(&mut multipart, limits).await;
    if let Err(ApiError::FieldTooLarge { .. }) = &received {
        drain_multipart(multipart).await;
    }
    let (fields, file) = received?;
    // Refused after the body is read: a form's fields may come after its file.
    let fields: JobFields = params::from_map(fields)?;
    if fields.get("filename").is_some() {
        return Err(ApiError::bad_request(
            codes::UNKNOWN_PARAMETER,
            "unknown parameter `filename` in a form: the `file` part carries its own file name",
        ));
    }
    let file = file.ok_or_else(|| ApiError::bad_request(codes::MISSING_FILE, "the form has no `file` part (with curl: `-F file=@clip.mp4`)"))?;
    let hint = sniff(&file, &Sent::FormPart).await;
    Ok(Upload { file, fields, hint })
}

type Parts = (serde_json::Map<String, serde_json::Value>, Option<StagedFile>);

async fn receive_parts(multipart: &mut Multipart, limits: &UploadLimits<'_>) -> Result<Parts, ApiError> {
    let mut fields = serde_json::Map::new();
    // A field given twice (as a form field and in `params`, or twice in the form) is refused once the
    // body is read: one of the two would otherwise win without a word.
    let mut twice: Vec<String> = Vec::new();
    let mut file = None;
    while let Some(field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or("").to_string();
        match name.as_str() {
            "file" => {
                if file.is_some() {
                    return Err(ApiError::bad_request(codes::TOO_MANY_FILES, "send exactly one `file` part"));
                }
                let file_name = sanitize_file_name(field.file_name().unwrap_or("input.mp4"));
                file = Some(stream_to_temp(field, file_name, limits).await?);
            }
            "params" => {
                let text = small_field(field).await?;
                let params: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text)
                    .map_err(|e| ApiError::bad_request(codes::INVALID_PARAMS, format!("`params` is not a JSON object: {e}")))?;
                for (key, value) in params {
                    let value = match value {
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    if fields.insert(key.clone(), value.into()).is_some() {
                        twice.push(key);
                    }
                }
            }
            _ => {
                let text = small_field(field).await?;
                if fields.insert(name.clone(), text.into()).is_some() {
                    twice.push(name);
                }
            }
        }
    }
    if !twice.is_empty() {
        let named: Vec<String> = twice.iter().map(|name| format!("`{name}`")).collect();
        return Err(ApiError::bad_request(
            codes::INVALID_PARAMS,
            format!("{} given twice (as form fields, or as a form field and in `params`); give each once", named.join(", ")),
        ));
    }
    Ok((fields, file))
}

/// How the body came: a form's `file` part, or a raw body (form-encoded by its Content-Type, as `curl -d` sends).
enum Sent {
    FormPart,
    Raw { form_encoded: bool, file_name: Option<String> },
}

/// An upload of at most this many bytes, all of it text, is taken for a name or words sent instead of a file.
const TEXT_HINT_BYTES: u64 = 1024;

/// What an upload probably was when it is not a video (`hint_for`), from its first bytes.
async fn sniff(file: &StagedFile, sent: &Sent) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let opened = tokio::fs::File::open(&file.path).await.ok()?;
    opened.take(TEXT_HINT_BYTES).read_to_end(&mut head).await.ok()?;
    hint_for(&head, file.bytes, sent)
}

/// `head`: the upload's first bytes (all of them when it is small). A few bytes of text are a file's name
/// or some words; a form-encoded body is what `curl -d @clip.mp4` sends, the file's line breaks dropped.
fn hint_for(head: &[u8], bytes: u64, sent: &Sent) -> Option<String> {
    let text = (bytes <= TEXT_HINT_BYTES && bytes == head.len() as u64)
        .then(|| std::str::from_utf8(head).ok())
        .flatten()
        .map(str::trim)
        .filter(|text| !text.is_empty() && text.chars().all(|c| !c.is_control() || c.is_whitespace()));
    let form_encoded = matches!(sent, Sent::Raw { form_encoded: true, .. });
    if let Some(text) = text {
        // `curl -d file=clip.mp4`: the name is the value.
        let name = if form_encoded { text.rsplit('=').next().unwrap_or(text) } else { text };
        let shown: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let shown = if shown.chars().count() > 60 { format!("{}…", shown.chars().take(60).collect::<String>()) } else { shown };
        let looks_like_a_name = !name.is_empty() && name.len() <= 255 && !name.contains(char::is_whitespace);
        let what = format!("the upload is {bytes} bytes of text `{shown}`, not a file's content");
        return Some(match (sent, looks_like_a_name) {
            (Sent::FormPart, true) => format!("{what}: did you mean `-F file=@{name}`? (without the `@`, curl sends the name itself)"),
            (Sent::Raw { .. }, true) => format!("{what}: did you mean `--data-binary @{name}` or `-F file=@{name}`?"),
            (_, false) => format!("{what}: send the file itself, `-F file=@clip.mp4` or `--data-binary @clip.mp4` with curl"),
        });
    }
    let Sent::Raw { form_encoded: true, file_name } = sent else { return None };
    let name = file_name.as_deref().unwrap_or("clip.mp4");
    Some(format!(
        "the body came form-encoded (Content-Type application/x-www-form-urlencoded, as `curl -d` sends it, dropping the file's \
         line breaks): send the file with `--data-binary @{name}` or `-F file=@{name}`"
    ))
}

/// A refusal of the upload as a video or latent, with what the body probably was (`Upload::hint`) added to
/// its message; the code stays the refusal's own.
pub fn explain(error: ApiError, hint: Option<&str>) -> ApiError {
    use crate::media::latent::LatentError;
    use crate::media::MediaError;
    use crate::queue::QueueError;
    let Some(hint) = hint else { return error };
    let with = |reason: String| format!("{reason}; {hint}");
    match error {
        ApiError::Queue(QueueError::Media(MediaError::NotAVideo { reason })) => QueueError::Media(MediaError::NotAVideo { reason: with(reason) }).into(),
        ApiError::Queue(QueueError::Media(MediaError::Truncated { reason })) => QueueError::Media(MediaError::Truncated { reason: with(reason) }).into(),
        ApiError::Queue(QueueError::Latent(LatentError::NotALatent(reason))) => QueueError::Latent(LatentError::NotALatent(with(reason))).into(),
        other => other,
    }
}

/// Form fields other than the file are a few words each; a larger one is refused without being held in memory.
pub const MAX_FIELD_BYTES: usize = 16 << 10;

async fn small_field(mut field: Field<'_>) -> Result<String, ApiError> {
    let name = field.name().unwrap_or("").to_string();
    let mut bytes = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
        if bytes.len() + chunk.len() > MAX_FIELD_BYTES {
            return Err(ApiError::FieldTooLarge { field: name, limit: MAX_FIELD_BYTES });
        }
        bytes.extend_from_slice(&chunk);
    }
    String::from_utf8(bytes).map_err(|_| ApiError::bad_request(codes::INVALID_MULTIPART, format!("form field `{name}` is not UTF-8 text")))
}

/// Reads (and drops) the rest of a refused form, bounded as `drain` is, so the client gets the answer.
async fn drain_multipart(mut multipart: Multipart) {
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        let mut drained = 0u64;
        while let Ok(Some(mut field)) = multipart.next_field().await {
            while let Ok(Some(chunk)) = field.chunk().await {
                drained += chunk.len() as u64;
                if drained > DRAIN_LIMIT {
                    return;
                }
            }
        }
    })
    .await;
}

fn multipart_error(e: axum::extract::multipart::MultipartError) -> ApiError {
    if is_stall(&e) {
        return ApiError::UploadStalled;
    }
    ApiError::bad_request(codes::INVALID_MULTIPART, e.body_text())
}

/// A body error: the client went silent past `body_idle_timeout_s` (408), or the body broke off.
pub fn body_error(e: &(dyn std::error::Error + 'static)) -> ApiError {
    if is_stall(e) {
        return ApiError::UploadStalled;
    }
    ApiError::bad_request(codes::UPLOAD_INTERRUPTED, format!("the upload broke off: {e}"))
}

/// Whether the body timeout (`RequestBodyTimeoutLayer`) is somewhere in the error's chain of causes.
fn is_stall(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(error) = cause {
        if error.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cause = error.source();
    }
    false
}

/// One of `max_concurrent_uploads` places (within its address's share, reserve and cool-down: see
/// `upload_places`), held while a body is received; taken before the body is read.
pub fn upload_slot(app: &super::state::AppState, request: &Request) -> Result<UploadPlace, ApiError> {
    let client = request.extensions().get::<super::upload_places::ClientAddr>().map(|addr| addr.0);
    app.uploads.take(client).map_err(|refusal| match refusal {
        NoPlace::Full => ApiError::TooManyUploads { limit: app.config.max_concurrent_uploads },
        NoPlace::ClientShare { limit } => ApiError::TooManyUploadsFromClient { limit },
        NoPlace::Reserved { reserve } => ApiError::UploadPlacesReserved { reserve },
        NoPlace::NetworkShare { limit } => ApiError::TooManyUploadsFromNetwork { limit },
        // Whole seconds, rounded up: a client that waits as told is not refused again.
        NoPlace::CoolingDown { retry_after } => ApiError::SlowUploadCoolDown { retry_after_s: retry_after.as_secs() + 1 },
    })
}

async fn stream_to_temp<S, E>(mut stream: S, file_name: String, limits: &UploadLimits<'_>) -> Result<StagedFile, ApiError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::error::Error + 'static,
{
    tokio::fs::create_dir_all(limits.dir).await?;
    let path = limits.dir.join(format!("{}.part", uuid::Uuid::new_v4()));
    let mut upload = StagedFile::new(path, file_name);
    let mut out = tokio::io::BufWriter::new(tokio::fs::File::create(&upload.path).await?);
    let mut rate = limits.place.rate_check(limits.min_kib_s);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| body_error(&e))?;
        rate.add(chunk.len()).map_err(|slow| ApiError::UploadTooSlow(slow.to_string()))?;
        upload.bytes += chunk.len() as u64;
        if upload.bytes > limits.max_bytes {
            drain(stream).await;
            return Err(ApiError::UploadTooLarge { limit: limits.max_bytes });
        }
        out.write_all(&chunk).await?;
    }
    out.flush().await?;
    out.into_inner().sync_all().await?;
    Ok(upload)
}

/// A client still sending its body when we answer early sees a broken connection instead of our
/// error; reading (and dropping) a bounded amount more lets ordinary uploads get the answer.
const DRAIN_LIMIT: u64 = 64 << 20;
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

async fn drain<S, E>(mut stream: S)
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        let mut drained = 0u64;
        while let Some(Ok(chunk)) = stream.next().await {
            drained += chunk.len() as u64;
            if drained > DRAIN_LIMIT {
                break;
            }
        }
    })
    .await;
}

/// Answers with `error` after draining the request body (bounded), for refusals made before reading it.
/// A client that waits for `100 Continue` sends nothing unless the body is read, so it is not read: the
/// refusal is all it gets.
pub async fn refuse_unread(request: Request, error: ApiError) -> ApiError {
    let waits_for_continue = request
        .headers()
        .get(axum::http::header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    if !waits_for_continue {
        drain(request.into_body().into_data_stream()).await;
    }
    error
}

/// Room a multipart form takes beside its file (boundaries, part headers, the text fields).
const MULTIPART_FORM_BYTES: u64 = 1 << 20;

/// The declared `Content-Length` of an upload over the limit (plus a form's own bytes when it is
/// multipart), to be refused from the header, before any of the body is read.
pub fn declared_too_large(request: &Request, max_bytes: u64) -> Option<u64> {
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let allowed = if is_multipart(request) { max_bytes.saturating_add(MULTIPART_FORM_BYTES) } else { max_bytes };
    declared.filter(|declared| *declared > allowed)
}

/// Refuses an upload declared too large. A body the client is sending anyway is drained when it is small
/// enough (else the client sees a reset connection, not the 413); a larger one, or one that waits for
/// `100 Continue`, gets the answer at once.
pub async fn refuse_declared_too_large(request: Request, declared: u64, limit: u64) -> ApiError {
    let error = ApiError::UploadTooLarge { limit };
    if declared <= DRAIN_LIMIT {
        return refuse_unread(request, error).await;
    }
    error
}

/// Keeps a readable base name for the download; never a path.
pub fn sanitize_file_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or("");
    let cleaned: String = base
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' })
        .take(120)
        .collect();
    let cleaned = cleaned.trim_start_matches('.').to_string();
    if cleaned.is_empty() {
        "input.mp4".into()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_sent_as_text_or_a_form_encoded_body_is_named() {
        let form = |name: Option<&str>| Sent::Raw { form_encoded: true, file_name: name.map(str::to_string) };
        let raw = Sent::Raw { form_encoded: false, file_name: None };
        assert_eq!(
            hint_for(b"clip.mp4", 8, &Sent::FormPart).unwrap(),
            "the upload is 8 bytes of text `clip.mp4`, not a file's content: did you mean `-F file=@clip.mp4`? (without the `@`, curl sends the name itself)"
        );
        assert!(hint_for(b"clip.mp4\n", 9, &raw).unwrap().ends_with("did you mean `--data-binary @clip.mp4` or `-F file=@clip.mp4`?"));
        assert!(hint_for(b"file=a.mp4", 10, &form(None)).unwrap().ends_with("did you mean `--data-binary @a.mp4` or `-F file=@a.mp4`?"));
        let words = b"not a video\n".repeat(3);
        assert!(hint_for(&words, words.len() as u64, &raw).unwrap().contains("36 bytes of text `not a video not a video not a video`"));
        // Binary, or text cut off (more bytes than read): no guess, unless the body came form-encoded.
        let mp4 = b"\0\0\0\x1cftypisom";
        assert_eq!(hint_for(mp4, 12, &Sent::FormPart), None);
        assert_eq!(hint_for(b"clip.mp4", 5000, &raw), None);
        assert!(hint_for(mp4, 500_000, &form(Some("x.mp4"))).unwrap().ends_with("send the file with `--data-binary @x.mp4` or `-F file=@x.mp4`"));
        assert!(hint_for(mp4, 500_000, &form(None)).unwrap().contains("`curl -d`"));
    }

    #[test]
    fn file_names_lose_paths_and_odd_characters() {
        assert_eq!(sanitize_file_name("../../etc/passwd"), "passwd");
        assert_eq!(sanitize_file_name("C:\\clips\\my clip.mp4"), "my_clip.mp4");
        assert_eq!(sanitize_file_name(".."), "input.mp4");
        assert_eq!(sanitize_file_name(""), "input.mp4");
    }
}
