//! Where the box's API processes listen (`api_listens`), for both databases: each API records its addresses
//! and refreshes them while it runs; every process's webhook sender reads them (see
//! `queue::callbacks::api_listens`).
use std::time::Duration;

use sqlx::{PgPool, SqlitePool};

use super::row::rfc3339_in;
use super::StoreError;
use crate::jobs::now_rfc3339;

/// Rows not refreshed for this long are dropped (their API is long gone).
const FORGOTTEN_AFTER: Duration = Duration::from_secs(24 * 3600);

pub(super) async fn sqlite_record(pool: &SqlitePool, addresses: &[String]) -> Result<(), StoreError> {
    let now = now_rfc3339();
    for address in addresses {
        sqlx::query("INSERT INTO api_listens (address, seen_at) VALUES (?, ?) ON CONFLICT (address) DO UPDATE SET seen_at = excluded.seen_at")
            .bind(address)
            .bind(&now)
            .execute(pool)
            .await?;
    }
    sqlx::query("DELETE FROM api_listens WHERE seen_at < ?").bind(rfc3339_in(FORGOTTEN_AFTER, false)).execute(pool).await?;
    Ok(())
}

pub(super) async fn sqlite_read(pool: &SqlitePool, within: Duration) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar("SELECT address FROM api_listens WHERE seen_at >= ? ORDER BY address")
        .bind(rfc3339_in(within, false))
        .fetch_all(pool)
        .await?)
}

pub(super) async fn pg_record(pool: &PgPool, addresses: &[String]) -> Result<(), StoreError> {
    let now = now_rfc3339();
    for address in addresses {
        sqlx::query("INSERT INTO api_listens (address, seen_at) VALUES ($1, $2) ON CONFLICT (address) DO UPDATE SET seen_at = excluded.seen_at")
            .bind(address)
            .bind(&now)
            .execute(pool)
            .await?;
    }
    sqlx::query("DELETE FROM api_listens WHERE seen_at < $1").bind(rfc3339_in(FORGOTTEN_AFTER, false)).execute(pool).await?;
    Ok(())
}

pub(super) async fn pg_read(pool: &PgPool, within: Duration) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar("SELECT address FROM api_listens WHERE seen_at >= $1 ORDER BY address")
        .bind(rfc3339_in(within, false))
        .fetch_all(pool)
        .await?)
}
