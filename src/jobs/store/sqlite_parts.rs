//! SQLite's side of jobs run in parts (`jobs::parts`): cutting a job, reading its parts, and moving it on as
//! they end.
use sqlx::Row;
use uuid::Uuid;

use super::row::{parse_ids, to_json, JobRow};
use super::sqlite::SqliteStore;
use super::{Lease, NewPart, StoreError};
use crate::jobs::model::{now_rfc3339, Job};
use crate::jobs::parts::{self, PartState, Settled, SplitState};

impl SqliteStore {
    pub(super) async fn split_into(&self, lease: &Lease, new_parts: &[NewPart]) -> Result<bool, StoreError> {
        let mut tx = self.write_transaction().await?;
        // The claim that cut it is not one of its runs: its join will be.
        let held = sqlx::query(
            "UPDATE jobs SET split_state = 'parts', worker = NULL, lease_until = NULL, attempts = MAX(attempts - 1, 0)
             WHERE id = ? AND worker = ? AND status = 'running' AND split_state IS NULL",
        )
        .bind(lease.id.to_string())
        .bind(&lease.worker)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if held == 0 {
            return Ok(false);
        }
        let now = now_rfc3339();
        for part in new_parts {
            sqlx::query(
                "INSERT INTO jobs (id, status, op, model, priority, params, input_name, input_path, input_bytes, input_media,
                                   created_at, owner, device_bytes_needed, estimate, parent_id, part, queue_seq)
                 SELECT ?1, 'queued', op, model, priority, params, input_name, input_path, input_bytes, input_media,
                        ?2, owner, device_bytes_needed, ?3, id, ?4, seq
                 FROM jobs WHERE id = ?5",
            )
            .bind(part.id.to_string())
            .bind(&now)
            .bind(part.estimate.as_ref().map(to_json))
            .bind(to_json(&part.part))
            .bind(lease.id.to_string())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    pub(super) async fn parts_rows(&self, id: Uuid) -> Result<Vec<Job>, StoreError> {
        let rows: Vec<JobRow> = sqlx::query_as("SELECT * FROM jobs WHERE parent_id = ? ORDER BY seq").bind(id.to_string()).fetch_all(&self.pool).await?;
        rows.into_iter().map(JobRow::into_job).collect()
    }

    pub(super) async fn settle(&self, id: Uuid) -> Result<Option<Settled>, StoreError> {
        let mut tx = self.write_transaction().await?;
        let row = sqlx::query("SELECT cancel_requested FROM jobs WHERE id = ? AND status = 'running' AND split_state = 'parts'")
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let cancel_requested = row.try_get::<i64, _>("cancel_requested")? != 0;
        let rows: Vec<JobRow> = sqlx::query_as("SELECT * FROM jobs WHERE parent_id = ? ORDER BY seq").bind(id.to_string()).fetch_all(&mut *tx).await?;
        let states = rows.into_iter().map(JobRow::into_job).map(|job| job.map(part_state)).collect::<Result<Vec<_>, _>>()?;
        let settled = parts::settle(&states.into_iter().flatten().collect::<Vec<_>>(), cancel_requested);
        let now = now_rfc3339();
        let id_text = id.to_string();
        match &settled {
            Settled::Running => return Ok(None),
            Settled::Join => {
                sqlx::query("UPDATE jobs SET status = 'queued', split_state = ?, queued_at = ?, worker = NULL, lease_until = NULL WHERE id = ?")
                    .bind(SplitState::Join.as_str())
                    .bind(&now)
                    .bind(&id_text)
                    .execute(&mut *tx)
                    .await?;
            }
            Settled::Failed(_) | Settled::Cancelled { .. } => {
                sqlx::query("UPDATE jobs SET status = 'cancelled', finished_at = ? WHERE parent_id = ? AND status = 'queued'").bind(&now).bind(&id_text).execute(&mut *tx).await?;
                sqlx::query("UPDATE jobs SET cancel_requested = 1 WHERE parent_id = ? AND status = 'running'").bind(&id_text).execute(&mut *tx).await?;
                let (status, error) = settled.job_status().expect("a failed or cancelled job's status");
                let status = status.as_str();
                sqlx::query(
                    "UPDATE jobs SET status = ?, finished_at = CASE WHEN ? = 'running' THEN NULL ELSE ? END, cancel_requested = 1,
                                     error_code = COALESCE(?, error_code), error_message = COALESCE(?, error_message)
                     WHERE id = ?",
                )
                .bind(status)
                .bind(status)
                .bind(&now)
                .bind(error.map(|e| e.code.clone()))
                .bind(error.map(|e| e.message.clone()))
                .bind(&id_text)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(Some(settled))
    }

    pub(super) async fn split_running(&self) -> Result<Vec<Uuid>, StoreError> {
        let ids: Vec<String> = sqlx::query_scalar("SELECT id FROM jobs WHERE status = 'running' AND split_state = 'parts'").fetch_all(&self.pool).await?;
        parse_ids(ids)
    }
}

/// A part's row as `parts::settle` reads it; none for a row that is not a part.
pub(super) fn part_state(job: Job) -> Option<PartState> {
    Some(PartState { id: job.id, part: job.part?, status: job.status, error: job.error })
}
