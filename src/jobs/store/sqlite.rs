//! The embedded store: one SQLite file (WAL) beside the data, for one box.
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::row::{clamp_i64, parse_id, parse_ids, rfc3339_in, paused_flag, snapshot, stored_status, to_json, EntryRow, JobRow, LostLease, StartRow, WatchedRow, WorkerRow, SNAPSHOT_JOBS, SNAPSHOT_STARTS};
use super::*;

pub struct SqliteStore {
    pub(super) pool: SqlitePool,
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
        sqlx::migrate!("./migrations/sqlite").run(&pool).await?;
        Ok(SqliteStore { pool })
    }

    async fn fetch(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        let row: Option<JobRow> =
            sqlx::query_as("SELECT * FROM jobs WHERE id = ?").bind(id.to_string()).fetch_optional(&self.pool).await?;
        row.map(JobRow::into_job).transpose()
    }

    /// A transaction that takes SQLite's write lock at its start. A deferred one that reads and then
    /// writes fails at once with SQLITE_BUSY_SNAPSHOT (517, "database is locked") whenever another
    /// connection committed in between, and the busy timeout does not wait for that case.
    pub(super) async fn write_transaction(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    async fn fetch_existing(&self, id: Uuid) -> Result<Job, StoreError> {
        self.fetch(id)
            .await?
            .ok_or_else(|| StoreError::Corrupt { id: id.to_string(), reason: "row vanished".into() })
    }
}

#[async_trait]
impl JobStore for SqliteStore {
    async fn insert(&self, job: NewJob) -> Result<Job, StoreError> {
        sqlx::query(
            "INSERT INTO jobs (id, status, op, model, priority, params, input_name, input_path, input_bytes,
                               input_media, timings, created_at, owner, device_bytes_needed, answered_by,
                               callback_url, callback_state, from_try, estimate)
             VALUES (?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        .bind(clamp_i64(job.device_bytes_needed))
        .bind(&job.answered_by)
        .bind(&job.callback_url)
        .bind(job.callback_url.as_ref().map(|_| CallbackState::Pending.as_str()))
        .bind(job.from_try.map(|id| id.to_string()))
        .bind(job.estimate.as_ref().map(to_json))
        .execute(&self.pool)
        .await?;
        self.fetch_existing(job.id).await
    }

    async fn get(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        self.fetch(id).await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError> {
        let rows: Vec<JobRow> = sqlx::query_as(
            "SELECT * FROM jobs WHERE (?1 IS NULL OR status = ?1) AND (?5 IS NULL OR paused = ?5) AND (?4 IS NULL OR owner = ?4)
             AND parent_id IS NULL ORDER BY seq DESC LIMIT ?2 OFFSET ?3",
        )
        .bind(filter.status.map(stored_status))
        .bind(filter.limit)
        .bind(filter.offset)
        .bind(&filter.owner)
        .bind(filter.status.and_then(paused_flag))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(JobRow::into_job).collect()
    }

    async fn count(&self, status: JobStatus) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM jobs WHERE status = ? AND (?2 IS NULL OR paused = ?2) AND parent_id IS NULL")
            .bind(stored_status(status))
            .bind(paused_flag(status))
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("n")?)
    }

    async fn queue_snapshot(&self) -> Result<Snapshot, StoreError> {
        let jobs: Vec<EntryRow> = sqlx::query_as(SNAPSHOT_JOBS).fetch_all(&self.pool).await?;
        let starts: Vec<StartRow> = sqlx::query_as(SNAPSHOT_STARTS).fetch_all(&self.pool).await?;
        snapshot(jobs, starts)
    }

    async fn claim_job(&self, id: Uuid, claim: &Claim) -> Result<Option<Job>, StoreError> {
        // In a transaction whose commit is checked: as a bare statement, `RETURNING` hands the row back
        // before SQLite has written it, so a claim that failed to commit (a full disk) ran the job all
        // the same, and again at every poll.
        let mut tx = self.write_transaction().await?;
        let claimed = sqlx::query(
            "UPDATE jobs SET status = 'running', started_at = CASE WHEN split_state IS NULL THEN ?1 ELSE COALESCE(started_at, ?1) END,
                             attempts = attempts + 1, progress = ?5,
                             worker = ?2, lease_until = ?3
             WHERE id = ?4 AND status = 'queued' AND paused = 0
             RETURNING id",
        )
        .bind(now_rfc3339())
        .bind(&claim.worker)
        .bind(rfc3339_in(claim.lease, true))
        .bind(id.to_string())
        // Running from the claim on, and saying so: never a running job without a stage.
        .bind(to_json(&Progress::starting(0)))
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        match claimed {
            Some(row) => self.fetch(parse_id(row.try_get("id")?)?).await,
            None => Ok(None),
        }
    }

    async fn set_paused(&self, id: Uuid, paused: bool) -> Result<PauseOutcome, StoreError> {
        // A job run in parts pauses (and goes on) with its parts.
        let changed = sqlx::query("UPDATE jobs SET paused = ?1 WHERE (id = ?2 OR parent_id = ?2) AND status IN ('queued', 'running')")
            .bind(i64::from(paused))
            .bind(id.to_string())
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(match self.fetch(id).await? {
            None => PauseOutcome::NotFound,
            Some(job) if changed == 0 => PauseOutcome::AlreadyFinished(job),
            Some(job) => PauseOutcome::Changed(job),
        })
    }

    async fn heartbeat(&self, lease: &Lease, extend: Duration) -> Result<LeaseState, StoreError> {
        let row = sqlx::query(
            "UPDATE jobs SET lease_until = ? WHERE id = ? AND worker = ? AND status = 'running' RETURNING cancel_requested, paused",
        )
        .bind(rfc3339_in(extend, true))
        .bind(lease.id.to_string())
        .bind(&lease.worker)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match row {
            Some(row) => LeaseState::Held {
                cancel_requested: row.try_get::<i64, _>("cancel_requested")? != 0,
                pause_requested: row.try_get::<i64, _>("paused")? != 0,
            },
            None => LeaseState::Lost,
        })
    }

    async fn set_progress(&self, lease: &Lease, progress: &Progress) -> Result<(), StoreError> {
        sqlx::query("UPDATE jobs SET progress = ? WHERE id = ? AND worker = ? AND status = 'running'")
            .bind(to_json(progress))
            .bind(lease.id.to_string())
            .bind(&lease.worker)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn succeed(&self, lease: &Lease, outcome: &JobOutcome) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET status = 'succeeded', finished_at = ?1, output_name = ?2, output_path = ?3, output_bytes = ?4,
                             output_media = ?5, timings = ?6, plan = ?7, metrics = ?8, error_code = NULL, error_message = NULL,
                             lease_until = NULL, started_at = COALESCE(started_at, ?1), worker = ?10
             WHERE id = ?9 AND ((worker = ?10 AND status = 'running') OR (status = 'queued' AND worker IS NULL AND attempts = ?11))",
        )
        .bind(now_rfc3339())
        .bind(&outcome.output_name)
        .bind(outcome.output_path.to_string_lossy().to_string())
        .bind(outcome.output_bytes as i64)
        .bind(outcome.output_media.as_ref().map(to_json))
        .bind(to_json(&outcome.timings))
        .bind(outcome.plan.as_ref().map(to_json))
        .bind(outcome.metrics.as_ref().map(to_json))
        .bind(lease.id.to_string())
        .bind(&lease.worker)
        .bind(lease.attempt)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn fail(&self, lease: &Lease, error: &JobError, timings: Option<&Timings>) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET status = 'failed', finished_at = ?, error_code = ?, error_message = ?,
                             timings = COALESCE(?, timings), lease_until = NULL
             WHERE id = ? AND worker = ? AND status = 'running'",
        )
        .bind(now_rfc3339())
        .bind(&error.code)
        .bind(&error.message)
        .bind(timings.map(to_json))
        .bind(lease.id.to_string())
        .bind(&lease.worker)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn mark_cancelled(&self, lease: &Lease, timings: Option<&Timings>, kept: Option<&KeptOutput>) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET status = 'cancelled', finished_at = ?, timings = COALESCE(?, timings), lease_until = NULL,
                             output_name = ?, output_path = ?, output_bytes = ?, output_media = ?
             WHERE id = ? AND worker = ? AND status = 'running'",
        )
        .bind(now_rfc3339())
        .bind(timings.map(to_json))
        .bind(kept.map(|k| &k.name))
        .bind(kept.map(|k| &k.path))
        .bind(kept.map(|k| clamp_i64(k.bytes)))
        .bind(kept.and_then(|k| k.media.as_ref()).map(to_json))
        .bind(lease.id.to_string())
        .bind(&lease.worker)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn request_cancel(&self, id: Uuid, keep: bool) -> Result<CancelOutcome, StoreError> {
        let mut tx = self.write_transaction().await?;
        let status: Option<String> = sqlx::query_scalar("SELECT status FROM jobs WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(status) = status else { return Ok(CancelOutcome::NotFound) };
        let status = JobStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt { id: id.to_string(), reason: format!("status {status}") })?;
        match status {
            JobStatus::Queued | JobStatus::Paused => {
                sqlx::query("UPDATE jobs SET status = 'cancelled', finished_at = ?, keep_partial = ? WHERE id = ?")
                    .bind(now_rfc3339())
                    .bind(i64::from(keep))
                    .bind(id.to_string())
                    .execute(&mut *tx)
                    .await?;
            }
            JobStatus::Running => {
                sqlx::query("UPDATE jobs SET cancel_requested = 1, keep_partial = ? WHERE id = ?")
                    .bind(i64::from(keep))
                    .bind(id.to_string())
                    .execute(&mut *tx)
                    .await?;
            }
            _ => {}
        }
        tx.commit().await?;
        // A job run in parts: its parts are cancelled (or asked to stop) with it.
        self.settle(id).await?;
        let job = self.fetch_existing(id).await?;
        Ok(match status {
            JobStatus::Queued | JobStatus::Paused => CancelOutcome::Cancelled(job),
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

    async fn keep_output(&self, id: Uuid, output: &KeptOutput) -> Result<(), StoreError> {
        sqlx::query("UPDATE jobs SET output_name = ?, output_path = ?, output_bytes = ?, output_media = ? WHERE id = ? AND status = 'cancelled'")
            .bind(&output.name)
            .bind(&output.path)
            .bind(clamp_i64(output.bytes))
            .bind(output.media.as_ref().map(to_json))
            .bind(id.to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn files_removed(&self, id: Uuid) -> Result<(), StoreError> {
        sqlx::query("UPDATE jobs SET output_path = NULL WHERE id = ?").bind(id.to_string()).execute(&self.pool).await?;
        Ok(())
    }

    async fn whole_of(&self, tried: Uuid) -> Result<Option<Job>, StoreError> {
        let row: Option<JobRow> = sqlx::query_as(
            "SELECT * FROM jobs WHERE from_try = ? AND status IN ('queued', 'running', 'succeeded') ORDER BY seq DESC LIMIT 1",
        )
        .bind(tried.to_string())
        .fetch_optional(&self.pool)
        .await?;
        row.map(JobRow::into_job).transpose()
    }

    async fn jobs_with_id_prefix(&self, prefix: &IdPrefix, owner: Option<&str>, limit: i64) -> Result<PrefixMatches, StoreError> {
        let rows: Vec<JobRow> =
            sqlx::query_as(id_prefix::SQLITE_JOBS).bind(prefix.lower()).bind(prefix.upper()).bind(owner).bind(limit).fetch_all(&self.pool).await?;
        let jobs = rows.into_iter().map(JobRow::into_job).collect::<Result<Vec<Job>, StoreError>>()?;
        let total = match jobs.len() as i64 {
            shown if shown < limit => shown,
            _ => sqlx::query_scalar(id_prefix::SQLITE_COUNT).bind(prefix.lower()).bind(prefix.upper()).bind(owner).fetch_one(&self.pool).await?,
        };
        Ok(PrefixMatches { jobs, total })
    }

    async fn finished_before(&self, before: &str, limit: i64) -> Result<Vec<Uuid>, StoreError> {
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM jobs WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at < ? AND parent_id IS NULL ORDER BY finished_at LIMIT ?",
        )
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        parse_ids(ids)
    }

    async fn requeue_interrupted(&self, worker: &str, max_attempts: i64) -> Result<Expired, StoreError> {
        // Rows from before leases have no worker: they were this box's.
        let failed: Vec<String> = sqlx::query_scalar(
            "UPDATE jobs SET status = 'failed', finished_at = ?, error_code = ?,
                             error_message = 'the job was started ' || attempts || ' times and the server stopped while running it each time (a crash, kill -9 or power cut)',
                             progress = NULL, worker = NULL, lease_until = NULL
             WHERE status = 'running' AND (worker = ? OR (worker IS NULL AND split_state IS NULL)) AND cancel_requested = 0 AND attempts >= ?
             RETURNING id",
        )
        .bind(now_rfc3339())
        .bind(crate::error_codes::ATTEMPTS_EXHAUSTED)
        .bind(worker)
        .bind(max_attempts)
        .fetch_all(&self.pool)
        .await?;
        let requeued: Vec<String> = sqlx::query_scalar(
            "UPDATE jobs SET status = CASE WHEN cancel_requested = 1 THEN 'cancelled' ELSE 'queued' END,
                             finished_at = CASE WHEN cancel_requested = 1 THEN ? ELSE NULL END,
                             started_at = NULL, progress = NULL, worker = NULL, lease_until = NULL
             WHERE status = 'running' AND (worker = ? OR (worker IS NULL AND split_state IS NULL))
             RETURNING id",
        )
        .bind(now_rfc3339())
        .bind(worker)
        .fetch_all(&self.pool)
        .await?;
        Ok(Expired { requeued: parse_ids(requeued)?, failed: parse_ids(failed)? })
    }

    async fn fail_unanswered_calls(&self, answered_by: &str) -> Result<Vec<Uuid>, StoreError> {
        let ids: Vec<String> = sqlx::query_scalar(
            "UPDATE jobs SET status = 'failed', finished_at = ?, error_code = ?, error_message = ?,
                             progress = NULL, worker = NULL, lease_until = NULL
             WHERE answered_by = ? AND status IN ('queued', 'running')
             RETURNING id",
        )
        .bind(now_rfc3339())
        .bind(crate::error_codes::CALLER_GONE)
        .bind(CALLER_GONE_MESSAGE)
        .bind(answered_by)
        .fetch_all(&self.pool)
        .await?;
        parse_ids(ids)
    }

    async fn give_back(&self, lease: &Lease) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET status = CASE WHEN cancel_requested = 1 THEN 'cancelled' ELSE 'queued' END,
                             finished_at = CASE WHEN cancel_requested = 1 THEN ?1 ELSE NULL END,
                             attempts = MAX(attempts - 1, 0), worker = NULL, lease_until = NULL, queued_at = ?1
             WHERE id = ?2 AND worker = ?3 AND status = 'running'",
        )
        .bind(now_rfc3339())
        .bind(lease.id.to_string())
        .bind(&lease.worker)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn expire_leases(&self, max_attempts: i64) -> Result<Expired, StoreError> {
        let mut tx = self.write_transaction().await?;
        let now = now_rfc3339();
        let rows = sqlx::query(
            "SELECT id, worker, attempts, lease_until, lost_leases, cancel_requested FROM jobs
             WHERE status = 'running' AND lease_until IS NOT NULL AND lease_until < ?",
        )
        .bind(&now)
        .fetch_all(&mut *tx)
        .await?;
        let mut expired = Expired::default();
        for row in rows {
            let id: String = row.try_get("id")?;
            let lost = LostLease {
                worker: row.try_get("worker")?,
                attempts: row.try_get("attempts")?,
                lease_until: row.try_get("lease_until")?,
                earlier: row.try_get("lost_leases")?,
                cancel_requested: row.try_get::<i64, _>("cancel_requested")? != 0,
            };
            let verdict = lost.verdict(max_attempts);
            sqlx::query(
                "UPDATE jobs SET status = ?, finished_at = ?, error_code = ?, error_message = ?, lost_leases = ?,
                                 started_at = CASE WHEN ? = 'queued' THEN NULL ELSE started_at END,
                                 progress = NULL, worker = NULL, lease_until = NULL
                 WHERE id = ? AND status = 'running'",
            )
            .bind(verdict.status.as_str())
            .bind(verdict.status.is_terminal().then(|| now.clone()))
            .bind(verdict.error.as_ref().map(|e| e.code.clone()))
            .bind(verdict.error.as_ref().map(|e| e.message.clone()))
            .bind(&verdict.lost_leases)
            .bind(verdict.status.as_str())
            .bind(&id)
            .execute(&mut *tx)
            .await?;
            verdict.count(parse_id(id)?, &mut expired);
        }
        tx.commit().await?;
        Ok(expired)
    }

    async fn claim_callback(&self, worker: &str, hold: Duration, again: bool) -> Result<Option<Job>, StoreError> {
        // A read first: the claim below is a write, which would take SQLite's one write lock every poll.
        let due: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM jobs WHERE callback_state = 'pending' AND status IN ('succeeded', 'failed', 'cancelled')
               AND (callback_due IS NULL OR callback_due <= ?1) AND (callback_claimed_until IS NULL OR callback_claimed_until <= ?1)
               AND (?2 OR COALESCE(callback_deliveries, '[]') = '[]') LIMIT 1",
        )
        .bind(now_rfc3339())
        .bind(again)
        .fetch_optional(&self.pool)
        .await?;
        if due.is_none() {
            return Ok(None);
        }
        // As `claim_next`: the claim's commit is checked before the webhook is sent.
        let mut tx = self.write_transaction().await?;
        let claimed = sqlx::query(
            "UPDATE jobs SET callback_claimed_by = ?1, callback_claimed_until = ?2
             WHERE id = (SELECT id FROM jobs WHERE callback_state = 'pending' AND status IN ('succeeded', 'failed', 'cancelled')
                           AND (callback_due IS NULL OR callback_due <= ?3)
                           AND (callback_claimed_until IS NULL OR callback_claimed_until <= ?3)
                           AND (?4 OR COALESCE(callback_deliveries, '[]') = '[]')
                         ORDER BY COALESCE(callback_deliveries, '[]') <> '[]', seq ASC LIMIT 1)
               AND callback_state = 'pending' AND (callback_claimed_until IS NULL OR callback_claimed_until <= ?3)
             RETURNING id",
        )
        .bind(worker)
        .bind(rfc3339_in(hold, true))
        .bind(now_rfc3339())
        .bind(again)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        match claimed {
            Some(row) => self.fetch(parse_id(row.try_get("id")?)?).await,
            None => Ok(None),
        }
    }

    async fn record_delivery(&self, id: Uuid, worker: &str, deliveries: &[Delivery], next: &CallbackNext) -> Result<(), StoreError> {
        let (state, due) = next_columns(next);
        sqlx::query(
            "UPDATE jobs SET callback_deliveries = ?, callback_state = ?, callback_due = ?, callback_claimed_by = NULL,
                             callback_claimed_until = NULL
             WHERE id = ? AND callback_claimed_by = ?",
        )
        .bind(to_json(&deliveries))
        .bind(state)
        .bind(due)
        .bind(id.to_string())
        .bind(worker)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn api_listening(&self, addresses: &[String]) -> Result<(), StoreError> {
        super::api_listens::sqlite_record(&self.pool, addresses).await
    }

    async fn api_addresses(&self, within: Duration) -> Result<Vec<String>, StoreError> {
        super::api_listens::sqlite_read(&self.pool, within).await
    }

    async fn split(&self, lease: &Lease, parts: &[NewPart]) -> Result<bool, StoreError> {
        self.split_into(lease, parts).await
    }

    async fn parts_of(&self, id: Uuid) -> Result<Vec<Job>, StoreError> {
        self.parts_rows(id).await
    }

    async fn settle_split(&self, id: Uuid) -> Result<Option<Settled>, StoreError> {
        self.settle(id).await
    }

    async fn split_jobs(&self) -> Result<Vec<Uuid>, StoreError> {
        self.split_running().await
    }

    async fn watch_record(&self, file: &WatchedFile) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO watched_files (job_id, folder, file_name, state, output_name, created_at) VALUES (?, ?, ?, ?, ?, ?)")
            .bind(file.job_id.to_string())
            .bind(&file.folder)
            .bind(&file.file_name)
            .bind(file.state.as_str())
            .bind(&file.output_name)
            .bind(now_rfc3339())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn watch_open(&self, folder: &str) -> Result<Vec<WatchedFile>, StoreError> {
        let rows: Vec<WatchedRow> = sqlx::query_as(
            "SELECT job_id, folder, file_name, state, output_name FROM watched_files
             WHERE folder = ? AND state NOT IN ('done', 'failed') ORDER BY created_at",
        )
        .bind(folder)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(WatchedRow::into_file).collect()
    }

    async fn watch_set(&self, job_id: Uuid, state: WatchState, output_name: Option<&str>) -> Result<(), StoreError> {
        sqlx::query("UPDATE watched_files SET state = ?, output_name = COALESCE(?, output_name) WHERE job_id = ?")
            .bind(state.as_str())
            .bind(output_name)
            .bind(job_id.to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn worker_seen(&self, worker: &WorkerInfo) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO workers (name, device, current_job, started_at, last_heartbeat, device_memory_bytes)
             VALUES (?, ?, ?, ?, ?, ?)
             ON CONFLICT (name) DO UPDATE SET device = excluded.device, current_job = excluded.current_job,
                 started_at = excluded.started_at, last_heartbeat = excluded.last_heartbeat,
                 device_memory_bytes = excluded.device_memory_bytes",
        )
        .bind(&worker.name)
        .bind(&worker.device)
        .bind(worker.current_job.map(|id| id.to_string()))
        .bind(&worker.started_at)
        .bind(&worker.last_heartbeat)
        .bind(worker.device_memory_bytes.map(clamp_i64))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn workers(&self, within: Duration) -> Result<Vec<WorkerInfo>, StoreError> {
        let rows: Vec<WorkerRow> = sqlx::query_as("SELECT * FROM workers WHERE last_heartbeat >= ? ORDER BY name")
            .bind(rfc3339_in(within, false))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(WorkerRow::into_info).collect())
    }
}

#[cfg(test)]
#[path = "sqlite_tests.rs"]
mod tests;

