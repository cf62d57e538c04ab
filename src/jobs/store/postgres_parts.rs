//! PostgreSQL's side of jobs run in parts (`jobs::parts`), as `sqlite_parts`: the job's row is locked while
//! its parts are cut or read to move it on, so two processes settling it at once act one after the other.
use sqlx::Row;
use uuid::Uuid;

use super::postgres::PgStore;
use super::row::{parse_ids, to_json, JobRow};
use super::sqlite_parts::part_state;
use super::{Lease, NewPart, StoreError};
use crate::jobs::model::{now_rfc3339, Job};
use crate::jobs::parts::{self, Settled, SplitState};

impl PgStore {
    pub(super) async fn split_into(&self, lease: &Lease, new_parts: &[NewPart]) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        let held = sqlx::query(
            "UPDATE jobs SET split_state = 'parts', worker = NULL, lease_until = NULL, attempts = GREATEST(attempts - 1, 0)
             WHERE id = $1 AND worker = $2 AND status = 'running' AND split_state IS NULL",
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
                 SELECT $1, 'queued', op, model, priority, params, input_name, input_path, input_bytes, input_media,
                        $2, owner, device_bytes_needed, $3, id, $4, seq
                 FROM jobs WHERE id = $5",
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
        let rows: Vec<JobRow> = sqlx::query_as("SELECT * FROM jobs WHERE parent_id = $1 ORDER BY seq").bind(id.to_string()).fetch_all(&self.pool).await?;
        rows.into_iter().map(JobRow::into_job).collect()
    }

    pub(super) async fn settle(&self, id: Uuid) -> Result<Option<Settled>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query("SELECT cancel_requested FROM jobs WHERE id = $1 AND status = 'running' AND split_state = 'parts' FOR UPDATE")
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let cancel_requested: bool = row.try_get("cancel_requested")?;
        let rows: Vec<JobRow> = sqlx::query_as("SELECT * FROM jobs WHERE parent_id = $1 ORDER BY seq").bind(id.to_string()).fetch_all(&mut *tx).await?;
        let states = rows.into_iter().map(JobRow::into_job).map(|job| job.map(part_state)).collect::<Result<Vec<_>, _>>()?;
        let settled = parts::settle(&states.into_iter().flatten().collect::<Vec<_>>(), cancel_requested);
        let now = now_rfc3339();
        let id_text = id.to_string();
        match &settled {
            Settled::Running => return Ok(None),
            Settled::Join => {
                sqlx::query("UPDATE jobs SET status = 'queued', split_state = $1, queued_at = $2, worker = NULL, lease_until = NULL WHERE id = $3")
                    .bind(SplitState::Join.as_str())
                    .bind(&now)
                    .bind(&id_text)
                    .execute(&mut *tx)
                    .await?;
            }
            Settled::Failed(_) | Settled::Cancelled { .. } => {
                sqlx::query("UPDATE jobs SET status = 'cancelled', finished_at = $1 WHERE parent_id = $2 AND status = 'queued'").bind(&now).bind(&id_text).execute(&mut *tx).await?;
                sqlx::query("UPDATE jobs SET cancel_requested = TRUE WHERE parent_id = $1 AND status = 'running'").bind(&id_text).execute(&mut *tx).await?;
                let (status, error) = settled.job_status().expect("a failed or cancelled job's status");
                let status = status.as_str();
                sqlx::query(
                    "UPDATE jobs SET status = $1, finished_at = CASE WHEN $1 = 'running' THEN NULL ELSE $2 END, cancel_requested = TRUE,
                                     error_code = COALESCE($3, error_code), error_message = COALESCE($4, error_message)
                     WHERE id = $5",
                )
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
