//! The job store: the truth about every job. A small trait so that a PostgreSQL backend
//! (shared queue with `FOR UPDATE SKIP LOCKED`) can sit beside SQLite for several boxes.
use std::path::Path;
use std::str::FromStr;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::model::*;
use crate::media::MediaInfo;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("database migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored job {id} is unreadable: {reason}")]
    Corrupt { id: String, reason: String },
}

pub struct NewJob {
    pub id: Uuid,
    pub op: Op,
    pub model: String,
    pub priority: i64,
    pub params: JobParams,
    pub input_name: String,
    pub input_path: String,
    pub input_bytes: u64,
    pub input_media: Option<MediaInfo>,
    /// Seconds the upload's checks took before it was queued; the job's `probe` timing.
    pub probe_s: Option<f64>,
    /// The name of the access token that made it (none when the box has no tokens).
    pub owner: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub status: Option<JobStatus>,
    /// Only this token's jobs.
    pub owner: Option<String>,
    pub limit: i64,
    pub offset: i64,
}

pub enum CancelOutcome {
    /// It was waiting; it is now cancelled.
    Cancelled(Job),
    /// It is running; the executor stops it at the next chunk.
    Requested(Job),
    AlreadyFinished(Job),
    NotFound,
}

pub enum DeleteOutcome {
    Deleted(Job),
    NotFinished(Job),
    NotFound,
}

#[async_trait]
pub trait JobStore: Send + Sync + 'static {
    async fn insert(&self, job: NewJob) -> Result<Job, StoreError>;
    async fn get(&self, id: Uuid) -> Result<Option<Job>, StoreError>;
    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError>;
    async fn count(&self, status: JobStatus) -> Result<i64, StoreError>;
    /// Atomically moves the next queued job (highest priority, then oldest) to `running`.
    async fn claim_next(&self) -> Result<Option<Job>, StoreError>;
    async fn set_progress(&self, id: Uuid, progress: &Progress) -> Result<(), StoreError>;
    async fn succeed(&self, id: Uuid, outcome: &JobOutcome) -> Result<(), StoreError>;
    async fn fail(&self, id: Uuid, error: &JobError, timings: Option<&Timings>) -> Result<(), StoreError>;
    async fn mark_cancelled(&self, id: Uuid, timings: Option<&Timings>) -> Result<(), StoreError>;
    async fn request_cancel(&self, id: Uuid) -> Result<CancelOutcome, StoreError>;
    async fn delete(&self, id: Uuid) -> Result<DeleteOutcome, StoreError>;
    /// After a restart: jobs that were running when the process died go back to the queue.
    async fn requeue_interrupted(&self) -> Result<u64, StoreError>;
    /// Jobs that ended before `before` (RFC 3339), oldest first, at most `limit`.
    async fn finished_before(&self, before: &str, limit: i64) -> Result<Vec<Uuid>, StoreError>;
}

pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    pub async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // WAL + NORMAL survives process crashes (kill -9) without losing committed rows.
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(std::time::Duration::from_secs(10))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new().max_connections(4).connect_with(options).await?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(SqliteStore { pool })
    }

    async fn fetch(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        let row = sqlx::query("SELECT * FROM jobs WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| job_from_row(&r)).transpose()
    }

    async fn fetch_existing(&self, id: Uuid) -> Result<Job, StoreError> {
        self.fetch(id)
            .await?
            .ok_or_else(|| StoreError::Corrupt { id: id.to_string(), reason: "row vanished".into() })
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("job values serialize")
}

fn from_json<T: DeserializeOwned>(id: &str, column: &str, text: Option<String>) -> Result<Option<T>, StoreError> {
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| StoreError::Corrupt { id: id.into(), reason: format!("{column}: {e}") })
    })
    .transpose()
}

fn job_from_row(row: &SqliteRow) -> Result<Job, StoreError> {
    let id: String = row.try_get("id")?;
    let corrupt = |reason: String| StoreError::Corrupt { id: id.clone(), reason };
    let status: String = row.try_get("status")?;
    let op: String = row.try_get("op")?;
    let output_name: Option<String> = row.try_get("output_name")?;
    let output_bytes: Option<i64> = row.try_get("output_bytes")?;
    let error_code: Option<String> = row.try_get("error_code")?;
    let uuid = Uuid::parse_str(&id).map_err(|e| corrupt(e.to_string()))?;
    let output = match (output_name, output_bytes) {
        (Some(file_name), Some(bytes)) => Some(OutputInfo {
            content_type: content_type_for(&file_name).into(),
            url: format!("/v1/jobs/{id}/result"),
            file_name,
            bytes: bytes as u64,
            media: from_json(&id, "output_media", row.try_get("output_media")?)?,
        }),
        _ => None,
    };
    Ok(Job {
        id: uuid,
        status: JobStatus::parse(&status).ok_or_else(|| corrupt(format!("status {status}")))?,
        op: Op::parse(&op).ok_or_else(|| corrupt(format!("op {op}")))?,
        model: row.try_get("model")?,
        priority: row.try_get("priority")?,
        params: from_json(&id, "params", row.try_get("params")?)?.ok_or_else(|| corrupt("no params".into()))?,
        created_at: row.try_get("created_at")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        input: InputInfo {
            file_name: row.try_get("input_name")?,
            bytes: row.try_get::<i64, _>("input_bytes")? as u64,
            media: from_json(&id, "input_media", row.try_get("input_media")?)?,
        },
        output,
        progress: from_json(&id, "progress", row.try_get("progress")?)?,
        timings: from_json(&id, "timings", row.try_get("timings")?)?,
        plan: from_json(&id, "plan", row.try_get("plan")?)?,
        metrics: from_json(&id, "metrics", row.try_get("metrics")?)?,
        error: error_code.map(|code| JobError { code, message: row.try_get("error_message").unwrap_or_default() }),
        attempts: row.try_get("attempts")?,
        owner: row.try_get("owner")?,
        input_path: row.try_get("input_path")?,
        output_path: row.try_get("output_path")?,
    })
}

pub fn content_type_for(file_name: &str) -> &'static str {
    match file_name.rsplit('.').next().unwrap_or("") {
        "mp4" => "video/mp4",
        "mov" => "video/quicktime",
        "mkv" => "video/x-matroska",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    }
}

#[async_trait]
impl JobStore for SqliteStore {
    async fn insert(&self, job: NewJob) -> Result<Job, StoreError> {
        sqlx::query(
            "INSERT INTO jobs (id, status, op, model, priority, params, input_name, input_path, input_bytes,
                               input_media, timings, created_at, owner)
             VALUES (?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(job.id.to_string())
        .bind(job.op.as_str())
        .bind(&job.model)
        .bind(job.priority)
        .bind(to_json(&job.params))
        .bind(&job.input_name)
        .bind(&job.input_path)
        .bind(job.input_bytes as i64)
        .bind(job.input_media.as_ref().map(to_json))
        .bind(job.probe_s.map(|probe| to_json(&Timings { probe: Some(probe), ..Timings::default() })))
        .bind(now_rfc3339())
        .bind(&job.owner)
        .execute(&self.pool)
        .await?;
        self.fetch_existing(job.id).await
    }

    async fn get(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        self.fetch(id).await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM jobs WHERE (?1 IS NULL OR status = ?1) AND (?4 IS NULL OR owner = ?4) ORDER BY seq DESC LIMIT ?2 OFFSET ?3",
        )
            .bind(filter.status.map(JobStatus::as_str))
            .bind(filter.limit)
            .bind(filter.offset)
            .bind(&filter.owner)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(job_from_row).collect()
    }

    async fn count(&self, status: JobStatus) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM jobs WHERE status = ?")
            .bind(status.as_str())
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("n")?)
    }

    async fn claim_next(&self) -> Result<Option<Job>, StoreError> {
        // In a transaction whose commit is checked: as a bare statement, `RETURNING` hands the row back
        // before SQLite has written it, so a claim that failed to commit (a full disk) ran the job all
        // the same, and again at every poll.
        let mut tx = self.pool.begin().await?;
        let claimed = sqlx::query(
            "UPDATE jobs SET status = 'running', started_at = ?, attempts = attempts + 1, progress = NULL
             WHERE id = (SELECT id FROM jobs WHERE status = 'queued' ORDER BY priority DESC, seq ASC LIMIT 1)
               AND status = 'queued'
             RETURNING id",
        )
        .bind(now_rfc3339())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        match claimed {
            Some(row) => {
                let id: String = row.try_get("id")?;
                let id = Uuid::parse_str(&id).map_err(|e| StoreError::Corrupt { id, reason: e.to_string() })?;
                self.fetch(id).await
            }
            None => Ok(None),
        }
    }

    async fn set_progress(&self, id: Uuid, progress: &Progress) -> Result<(), StoreError> {
        sqlx::query("UPDATE jobs SET progress = ? WHERE id = ? AND status = 'running'")
            .bind(to_json(progress))
            .bind(id.to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn succeed(&self, id: Uuid, outcome: &JobOutcome) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET status = 'succeeded', finished_at = ?, output_name = ?, output_path = ?, output_bytes = ?,
                             output_media = ?, timings = ?, plan = ?, metrics = ?, error_code = NULL, error_message = NULL
             WHERE id = ?",
        )
        .bind(now_rfc3339())
        .bind(&outcome.output_name)
        .bind(outcome.output_path.to_string_lossy().to_string())
        .bind(outcome.output_bytes as i64)
        .bind(outcome.output_media.as_ref().map(to_json))
        .bind(to_json(&outcome.timings))
        .bind(outcome.plan.as_ref().map(to_json))
        .bind(outcome.metrics.as_ref().map(to_json))
        .bind(id.to_string())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn fail(&self, id: Uuid, error: &JobError, timings: Option<&Timings>) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET status = 'failed', finished_at = ?, error_code = ?, error_message = ?,
                             timings = COALESCE(?, timings)
             WHERE id = ?",
        )
        .bind(now_rfc3339())
        .bind(&error.code)
        .bind(&error.message)
        .bind(timings.map(to_json))
        .bind(id.to_string())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn mark_cancelled(&self, id: Uuid, timings: Option<&Timings>) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET status = 'cancelled', finished_at = ?, timings = COALESCE(?, timings)
             WHERE id = ? AND status IN ('queued', 'running')",
        )
        .bind(now_rfc3339())
        .bind(timings.map(to_json))
        .bind(id.to_string())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn request_cancel(&self, id: Uuid) -> Result<CancelOutcome, StoreError> {
        let mut tx = self.pool.begin().await?;
        let status: Option<String> = sqlx::query_scalar("SELECT status FROM jobs WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(status) = status else { return Ok(CancelOutcome::NotFound) };
        let status = JobStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt { id: id.to_string(), reason: format!("status {status}") })?;
        match status {
            JobStatus::Queued => {
                sqlx::query("UPDATE jobs SET status = 'cancelled', finished_at = ? WHERE id = ?")
                    .bind(now_rfc3339())
                    .bind(id.to_string())
                    .execute(&mut *tx)
                    .await?;
            }
            JobStatus::Running => {
                sqlx::query("UPDATE jobs SET cancel_requested = 1 WHERE id = ?")
                    .bind(id.to_string())
                    .execute(&mut *tx)
                    .await?;
            }
            _ => {}
        }
        tx.commit().await?;
        let job = self.fetch_existing(id).await?;
        Ok(match status {
            JobStatus::Queued => CancelOutcome::Cancelled(job),
            JobStatus::Running => CancelOutcome::Requested(job),
            _ => CancelOutcome::AlreadyFinished(job),
        })
    }

    async fn delete(&self, id: Uuid) -> Result<DeleteOutcome, StoreError> {
        let Some(job) = self.fetch(id).await? else { return Ok(DeleteOutcome::NotFound) };
        if !job.status.is_terminal() {
            return Ok(DeleteOutcome::NotFinished(job));
        }
        sqlx::query("DELETE FROM jobs WHERE id = ? AND status IN ('succeeded', 'failed', 'cancelled')")
            .bind(id.to_string())
            .execute(&self.pool)
            .await?;
        Ok(DeleteOutcome::Deleted(job))
    }

    async fn finished_before(&self, before: &str, limit: i64) -> Result<Vec<Uuid>, StoreError> {
        let rows = sqlx::query(
            "SELECT id FROM jobs WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at < ? ORDER BY finished_at LIMIT ?",
        )
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let id: String = row.try_get("id")?;
                Uuid::parse_str(&id).map_err(|e| StoreError::Corrupt { id, reason: e.to_string() })
            })
            .collect()
    }

    async fn requeue_interrupted(&self) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE jobs SET status = CASE WHEN cancel_requested = 1 THEN 'cancelled' ELSE 'queued' END,
                             finished_at = CASE WHEN cancel_requested = 1 THEN ? ELSE NULL END,
                             started_at = NULL, progress = NULL
             WHERE status = 'running'",
        )
        .bind(now_rfc3339())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::device::DtypeChoice;
    use crate::jobs::plan::{JobPlan, UpscalePlan};

    async fn succeeded_job(store: &SqliteStore, plan: JobPlan) -> Uuid {
        let id = Uuid::new_v4();
        let new = NewJob {
            id,
            op: Op::Upscale,
            model: "realesrgan-animevideov3".into(),
            priority: 0,
            params: JobParams::new(DtypeChoice::Auto),
            input_name: "clip.mp4".into(),
            input_path: "/nowhere/clip.mp4".into(),
            input_bytes: 1,
            input_media: None,
            probe_s: None,
            owner: None,
        };
        store.insert(new).await.unwrap();
        let outcome = JobOutcome {
            output_name: "out.mp4".into(),
            output_path: "/nowhere/out.mp4".into(),
            output_bytes: 1,
            output_media: None,
            timings: Timings::default(),
            plan: Some(plan),
            metrics: Some(QualityMetrics { psnr_db: None, ssim: Some(0.5), frames_compared: 2 }),
        };
        store.succeed(id, &outcome).await.unwrap();
        id
    }

    #[tokio::test]
    async fn plans_written_by_an_earlier_version_are_listed_as_they_were_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("jobs.db")).await.unwrap();
        let plan = UpscalePlan {
            chunk_frames: 8,
            tile: 0,
            overlap: 19,
            receptive_radius: 19,
            exact: true,
            blend: false,
            tiles_per_frame: 1,
            scale: 4,
            frames: 2,
            fallbacks: vec![],
        };
        let current = succeeded_job(&store, JobPlan::Upscale(plan.clone())).await;
        // An upscale plan as versions before the out-of-memory fallbacks and blending wrote it.
        let earlier = succeeded_job(&store, JobPlan::Upscale(plan.clone())).await;
        let stored =
            r#"{"chunk_frames":8,"exact":true,"frames":2,"overlap":19,"receptive_radius":19,"scale":4,"tile":0,"tiles_per_frame":1}"#;
        sqlx::query("UPDATE jobs SET plan = ? WHERE id = ?").bind(stored).bind(earlier.to_string()).execute(&store.pool).await.unwrap();

        let listed = store.list(&ListFilter { limit: 10, ..ListFilter::default() }).await.unwrap();
        let plan_of = |id| listed.iter().find(|job| job.id == id).unwrap().plan.clone().unwrap();
        assert_eq!(plan_of(current), JobPlan::Upscale(plan));
        assert_eq!(plan_of(earlier), JobPlan::Other(serde_json::from_str(stored).unwrap()));
        assert_eq!(serde_json::to_string(&plan_of(earlier)).unwrap(), stored);
        let metrics = listed[0].metrics.unwrap();
        assert_eq!(serde_json::to_value(metrics).unwrap(), json!({"psnr_db": null, "ssim": 0.5, "frames_compared": 2}));
    }
}
