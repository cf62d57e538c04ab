//! Inputs and results in shared storage (`storage = "file:///path" | "s3://bucket/prefix"`), for boxes
//! that share no disk. The API puts each upload there once its checks passed; a worker fetches the input
//! into its own data dir (its cache) before the job runs and puts the result there before the job is
//! recorded as succeeded; the API streams results from there (Range included) and copies a side into its
//! own data dir only to make a preview of it. Keys mirror the data dir: `jobs/{id}/{file name}`.
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use object_store::buffered::BufWriter;
use object_store::path::Path as Key;
use object_store::{GetOptions, ObjectStore, ObjectStoreExt};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

/// Uploads go up in parts of this size (one request for smaller files).
const PART_BYTES: usize = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error("storage setting: {0}")]
    Setting(String),
    #[error("`{0}` is not in the storage")]
    NotFound(String),
    #[error("the range asked for is outside the file's {size} bytes")]
    RangeNotSatisfiable { size: u64 },
    #[error("storage: {0}")]
    Store(object_store::Error),
    #[error("storage, local copy: {0}")]
    Io(#[from] std::io::Error),
}

impl From<object_store::Error> for BlobError {
    fn from(e: object_store::Error) -> Self {
        match e {
            object_store::Error::NotFound { path, .. } => BlobError::NotFound(path),
            other => BlobError::Store(other),
        }
    }
}

/// A stored file, or the part of it a Range asked for.
pub struct BlobRead {
    pub size: u64,
    pub range: Range<u64>,
    pub body: BoxStream<'static, Result<Bytes, object_store::Error>>,
}

pub struct Blobs {
    store: Arc<dyn ObjectStore>,
    root: Key,
    /// The storage URL, for logs.
    pub url: String,
}

impl Blobs {
    /// `url`: `file:///path` or `s3://bucket/prefix`. S3 settings come, as with the AWS tools, from the
    /// `AWS_*` variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT`...),
    /// then from `options` (`storage_options` in the config, the same names in lower case).
    pub fn open(url: &str, options: &BTreeMap<String, String>) -> Result<Blobs, BlobError> {
        let parsed = url::Url::parse(url).map_err(|e| BlobError::Setting(format!("`{url}` is not a URL: {e}")))?;
        match parsed.scheme() {
            "file" => std::fs::create_dir_all(parsed.path())?,
            "s3" => {}
            other => return Err(BlobError::Setting(format!("`{url}`: `{other}://` is not one of file://, s3://"))),
        }
        let mut settings: BTreeMap<String, String> =
            std::env::vars().filter(|(k, _)| k.starts_with("AWS_")).map(|(k, v)| (k.to_ascii_lowercase(), v)).collect();
        settings.extend(options.clone());
        let (store, root) = object_store::parse_url_opts(&parsed, settings)?;
        Ok(Blobs { store: Arc::from(store), root, url: url.to_string() })
    }

    fn job_prefix(&self, id: Uuid) -> Key {
        self.root.clone().join("jobs").join(id.to_string())
    }

    /// `name` may name a file in a folder of the job's (`resume/segment_000000.mkv`).
    fn key(&self, id: Uuid, name: &str) -> Key {
        name.split('/').fold(self.job_prefix(id), |key, part| key.join(part))
    }

    /// Puts `local` under the job's key of the same file name (in parts when it is large).
    pub async fn put_file(&self, id: Uuid, local: &Path) -> Result<(), BlobError> {
        self.put_file_as(id, &file_name(local), local).await
    }

    /// Puts `local` under the job's `name`.
    pub async fn put_file_as(&self, id: Uuid, name: &str, local: &Path) -> Result<(), BlobError> {
        let key = self.key(id, name);
        let mut file = tokio::fs::File::open(local).await?;
        let mut writer = BufWriter::with_capacity(self.store.clone(), key, PART_BYTES);
        if let Err(e) = tokio::io::copy(&mut file, &mut writer).await {
            // Parts already sent are dropped. (After a failed `shutdown` the writer is finished and
            // `abort` would panic: the store drops an upload that was never completed.)
            let _ = writer.abort().await;
            return Err(e.into());
        }
        writer.shutdown().await?;
        Ok(())
    }

    /// Puts a small file, whole, under the job's `name`.
    pub async fn put_bytes(&self, id: Uuid, name: &str, bytes: Bytes) -> Result<(), BlobError> {
        self.store.put(&self.key(id, name), bytes.into()).await?;
        Ok(())
    }

    /// The job's stored `name`, whole, in memory (a small file).
    pub async fn get_bytes(&self, id: Uuid, name: &str) -> Result<Bytes, BlobError> {
        Ok(self.store.get(&self.key(id, name)).await?.bytes().await?)
    }

    /// The names of the files stored in the job's `folder`, relative to it (`frames/frame_000000.png`).
    pub async fn list_folder(&self, id: Uuid, folder: &str) -> Result<Vec<String>, BlobError> {
        let prefix = self.key(id, folder);
        let listed: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
        Ok(listed
            .iter()
            .filter_map(|meta| Some(meta.location.prefix_match(&prefix)?.map(|part| part.as_ref().to_string()).collect::<Vec<_>>().join("/")))
            .filter(|name| !name.is_empty())
            .collect())
    }

    /// Removes the job's stored `name`; one that is not there is no error.
    pub async fn delete(&self, id: Uuid, name: &str) -> Result<(), BlobError> {
        match self.store.delete(&self.key(id, name)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes the files stored in the job's `folder`.
    pub async fn delete_folder(&self, id: Uuid, folder: &str) -> Result<(), BlobError> {
        let keys = self.store.list(Some(&self.key(id, folder))).map_ok(|meta| meta.location).boxed();
        self.store.delete_stream(keys).try_collect::<Vec<_>>().await?;
        Ok(())
    }

    /// Copies the job's stored `name` to `local` (through a `.part` file, so a copy cut short is never
    /// taken for the file).
    pub async fn fetch(&self, id: Uuid, name: &str, local: &Path) -> Result<(), BlobError> {
        let stored = self.store.get(&self.key(id, name)).await?;
        if let Some(dir) = local.parent() {
            tokio::fs::create_dir_all(dir).await?;
        }
        let part = local.with_file_name(format!("{}.part", file_name(local)));
        let copied = async {
            let mut out = tokio::fs::File::create(&part).await?;
            let mut body = stored.into_stream();
            while let Some(chunk) = body.next().await {
                out.write_all(&chunk?).await?;
            }
            out.sync_all().await?;
            tokio::fs::rename(&part, local).await?;
            Ok::<(), BlobError>(())
        }
        .await;
        if copied.is_err() {
            let _ = tokio::fs::remove_file(&part).await;
        }
        copied
    }

    /// The job's stored `name`, whole or the bytes `range` picks from its size (see [`ByteRange`]).
    pub async fn read(&self, id: Uuid, name: &str, range: Option<ByteRange>) -> Result<BlobRead, BlobError> {
        let key = self.key(id, name);
        let size = self.store.head(&key).await?.size;
        let range = match range {
            Some(asked) => asked.within(size).ok_or(BlobError::RangeNotSatisfiable { size })?,
            None => 0..size,
        };
        let body = if range.is_empty() {
            futures_util::stream::empty().boxed()
        } else {
            self.store.get_opts(&key, GetOptions::new().with_range(Some(range.clone()))).await?.into_stream()
        };
        Ok(BlobRead { size, range, body })
    }

    /// Removes everything stored for the job.
    pub async fn delete_job(&self, id: Uuid) -> Result<(), BlobError> {
        let keys = self.store.list(Some(&self.job_prefix(id))).map_ok(|meta| meta.location).boxed();
        self.store.delete_stream(keys).try_collect::<Vec<_>>().await?;
        Ok(())
    }
}

/// One `Range: bytes=` range as a client wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// `bytes=a-b`
    FromTo(u64, u64),
    /// `bytes=a-`
    From(u64),
    /// `bytes=-n`
    Last(u64),
}

impl ByteRange {
    /// A single range; `None` for anything else (several ranges, other units), which is answered whole.
    pub fn parse(header: &str) -> Option<ByteRange> {
        let spec = header.trim().strip_prefix("bytes=")?;
        if spec.contains(',') {
            return None;
        }
        let (start, end) = spec.split_once('-')?;
        let number = |s: &str| s.trim().parse::<u64>().ok();
        match (start.trim().is_empty(), end.trim().is_empty()) {
            (true, false) => Some(ByteRange::Last(number(end)?)),
            (false, true) => Some(ByteRange::From(number(start)?)),
            (false, false) => Some(ByteRange::FromTo(number(start)?, number(end)?)).filter(|r| matches!(r, ByteRange::FromTo(a, b) if a <= b)),
            (true, true) => None,
        }
    }

    /// The bytes it picks from a file of `size`; `None` when it picks none (416).
    pub fn within(self, size: u64) -> Option<Range<u64>> {
        let range = match self {
            ByteRange::FromTo(start, end) => start..end.saturating_add(1).min(size),
            ByteRange::From(start) => start..size,
            ByteRange::Last(n) => size.saturating_sub(n)..size,
        };
        (range.start < size && !range.is_empty()).then_some(range)
    }
}

/// A path's last part as text (keys use it, as do downloads named after the file).
pub fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_pick_what_http_says() {
        assert_eq!(ByteRange::parse("bytes=0-99").and_then(|r| r.within(1000)), Some(0..100));
        assert_eq!(ByteRange::parse("bytes=990-2000").and_then(|r| r.within(1000)), Some(990..1000));
        assert_eq!(ByteRange::parse("bytes=500-").and_then(|r| r.within(1000)), Some(500..1000));
        assert_eq!(ByteRange::parse("bytes=-100").and_then(|r| r.within(1000)), Some(900..1000));
        assert_eq!(ByteRange::parse("bytes=-5000").and_then(|r| r.within(1000)), Some(0..1000));
        assert_eq!(ByteRange::parse("bytes=1000-").and_then(|r| r.within(1000)), None);
        assert_eq!(ByteRange::parse("bytes=5-2"), None);
        assert_eq!(ByteRange::parse("bytes=0-1,5-6"), None);
        assert_eq!(ByteRange::parse("items=0-1"), None);
    }

    #[tokio::test]
    async fn a_file_store_keeps_puts_reads_ranges_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().join("store").display());
        let blobs = Blobs::open(&url, &BTreeMap::new()).unwrap();
        let id = Uuid::new_v4();
        let local = dir.path().join("input.mp4");
        let content: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&local, &content).unwrap();
        blobs.put_file(id, &local).await.unwrap();
        assert!(dir.path().join("store/jobs").join(id.to_string()).join("input.mp4").exists());

        let copy = dir.path().join("cache/input.mp4");
        blobs.fetch(id, "input.mp4", &copy).await.unwrap();
        assert_eq!(std::fs::read(&copy).unwrap(), content);

        let read = blobs.read(id, "input.mp4", ByteRange::parse("bytes=10-19")).await.unwrap();
        assert_eq!((read.size, read.range.clone()), (100_000, 10..20));
        let bytes: Vec<Bytes> = read.body.try_collect().await.unwrap();
        assert_eq!(bytes.concat(), content[10..20]);

        assert!(matches!(blobs.fetch(id, "missing.mp4", &copy).await, Err(BlobError::NotFound(_))));
        blobs.delete_job(id).await.unwrap();
        assert!(matches!(blobs.read(id, "input.mp4", None).await, Err(BlobError::NotFound(_))));
    }
}
