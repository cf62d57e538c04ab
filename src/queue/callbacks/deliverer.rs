//! The webhook sender each process runs: it polls the store for a webhook whose job has ended and whose
//! try is due, holds it (so one process of several sends it), tries once, records the try and the next.
//! The store is the truth, so a try due while the box was down is made after start-up. A receiver that
//! hangs holds a try for `callback_timeout_s` and no other webhook behind it: first tries go before tries
//! again, and a host's share of tries in flight is bounded (issue 53: 16 hanging tries held a webhook to
//! their host for 3 min).
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use uuid::Uuid;

use super::api_listens;
use super::host_slots::HostSlots;
use super::post::{self, Post};
use super::signature;
use crate::config::{CallbackHosts, Config};
use crate::jobs::callback::next_try;
use crate::jobs::{now_rfc3339, CallbackNext, Delivery, Job, JobStore};
use crate::queue::scheduler::JobEvents;

/// How often the store is asked for webhooks due: the delay between a job's end and its first try.
const POLL: Duration = Duration::from_secs(1);
/// Webhook tries in flight at once, and the share of them at one receiver host: a hanging host holds at
/// most its share, each try for `callback_timeout_s`.
const IN_FLIGHT: usize = 64;
const FRESH_PER_HOST: usize = 32;
/// Tries again (after a failed one) in flight at once, and at one host: only while fewer than this many
/// tries of any kind are in flight there.
const RETRIES_IN_FLIGHT: usize = 16;
const RETRY_PER_HOST: usize = 2;
/// A webhook claimed while its host has its share in flight is due again after this.
const PUT_BACK: Duration = Duration::from_secs(2);
/// Looking the receiver's name up.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Deliverer {
    pub store: Arc<dyn JobStore>,
    /// Holds webhooks under this name.
    pub holder: String,
    pub secret: String,
    pub hosts: CallbackHosts,
    pub retry_first: Duration,
    /// One try's exchange with the receiver, at most (`callback_timeout_s`).
    pub timeout: Duration,
    /// Followers of a job hear of its new try.
    pub events: JobEvents,
}

impl Deliverer {
    pub fn new(config: &Config, store: Arc<dyn JobStore>, events: JobEvents) -> Deliverer {
        Deliverer {
            store,
            // One holder per process: a restarted process must not take over the holds of the one before.
            holder: format!("{}/{}", config.worker_name(), Uuid::new_v4()),
            secret: config.callback_secret.clone(),
            hosts: config.callback_hosts(),
            retry_first: Duration::from_secs(config.callback_retry_first_s),
            timeout: Duration::from_secs_f64(config.callback_timeout_s),
            events,
        }
    }

    /// Tries side by side. A webhook's first try goes at once (`IN_FLIGHT` at most, `FRESH_PER_HOST` at one
    /// host); tries again go after first tries (claimed first), `RETRIES_IN_FLIGHT` at most and only while
    /// fewer than `RETRY_PER_HOST` tries are in flight at their host. A webhook that finds its host's share in
    /// flight is put back, due again shortly: never held behind tries that keep hanging.
    pub async fn run(self) {
        let deliverer = Arc::new(self);
        let places = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
        let retry_places = Arc::new(tokio::sync::Semaphore::new(RETRIES_IN_FLIGHT));
        let hosts = HostSlots::default();
        loop {
            let place = places.clone().acquire_owned().await.expect("the semaphore is never closed");
            let retry_place = retry_places.clone().try_acquire_owned().ok();
            match deliverer.store.claim_callback(&deliverer.holder, deliverer.hold(), retry_place.is_some()).await {
                Ok(Some(job)) => {
                    let Some(callback) = &job.callback else { continue };
                    let again = !callback.deliveries.is_empty();
                    let host = url::Url::parse(&callback.url).ok().and_then(|url| url.host_str().map(str::to_string)).unwrap_or_default();
                    let share = if again { RETRY_PER_HOST } else { FRESH_PER_HOST };
                    let Some(slot) = hosts.take(&host, share) else {
                        deliverer.put_back(&job).await;
                        continue;
                    };
                    // A first try takes no place of the tries again.
                    let retry_place = retry_place.filter(|_| again);
                    let deliverer = deliverer.clone();
                    tokio::spawn(async move {
                        deliverer.deliver(job).await;
                        drop((slot, place, retry_place));
                    });
                }
                Ok(None) => tokio::time::sleep(POLL).await,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the webhooks due; trying again");
                    tokio::time::sleep(POLL * 5).await;
                }
            }
        }
    }

    /// A webhook is held for a minute, or past twice the longest try (the look-up, then the exchange).
    fn hold(&self) -> Duration {
        Duration::from_secs(60).max((RESOLVE_TIMEOUT + self.timeout) * 2)
    }

    /// A webhook whose host has its share of tries in flight goes back to the store, due again after
    /// `PUT_BACK` and with no try counted; others are claimed meanwhile.
    async fn put_back(&self, job: &Job) {
        let Some(callback) = &job.callback else { return };
        tracing::debug!(id = %job.id, url = %callback.url, "webhook: its host has its share of tries in flight; put back");
        if let Err(e) = self.store.record_delivery(job.id, &self.holder, &callback.deliveries, &CallbackNext::RetryAt(in_rfc3339(PUT_BACK))).await {
            // The hold runs out instead.
            tracing::warn!(id = %job.id, error = %e, "cannot put a webhook back");
        }
    }

    async fn deliver(&self, job: Job) {
        let Some(callback) = job.callback.clone() else { return };
        let attempt = callback.deliveries.len() as u32 + 1;
        let at = now_rfc3339();
        let event = format!("job.{}", job.status.as_str());
        let outcome = match serde_json::to_vec(&job) {
            Ok(body) => self.try_once(&callback.url, &event, job.id, attempt, Bytes::from(body)).await,
            Err(e) => Err(format!("cannot write the job's JSON: {e}")),
        };
        let (status, error) = match outcome {
            Ok(status) if (200..300).contains(&status) => (Some(status), None),
            Ok(status) => (Some(status), Some(format!("the receiver answered {status}"))),
            Err(why) => (None, Some(why)),
        };
        let next = match &error {
            None => CallbackNext::Delivered,
            Some(_) => {
                let first_at = callback.deliveries.first().map(|d| d.at.as_str()).unwrap_or(&at);
                let since_first = crate::jobs::seconds_between(first_at, &at).unwrap_or(0.0).max(0.0);
                match next_try(self.retry_first, attempt, Duration::from_secs_f64(since_first)) {
                    Some(wait) => CallbackNext::RetryAt(in_rfc3339(wait)),
                    None => CallbackNext::GaveUp,
                }
            }
        };
        tracing::info!(id = %job.id, url = %callback.url, attempt, ?status, error = error.as_deref().unwrap_or(""), ?next, "webhook try");
        let mut deliveries = callback.deliveries;
        deliveries.push(Delivery { at, status, error, attempt });
        if let Err(e) = self.store.record_delivery(job.id, &self.holder, &deliveries, &next).await {
            // The hold runs out and the try is made again: a receiver may see a delivery twice, never none.
            tracing::warn!(id = %job.id, error = %e, "cannot record a webhook try");
        }
        let _ = self.events.send(job.id);
    }

    /// One POST of the job's JSON; the receiver's status, or why there was none.
    async fn try_once(&self, url: &str, event: &str, id: Uuid, attempt: u32, body: Bytes) -> Result<u16, String> {
        let url = url::Url::parse(url).map_err(|e| format!("the stored URL is unreadable: {e}"))?;
        let address = self.address_of(&url).await?;
        // Where every API process of the box listens, read now: one started a moment ago counts.
        let apis = api_listens::known(self.store.as_ref()).await.map_err(|e| format!("cannot read where the box's API listens: {e}"))?;
        if let Some(api) = api_listens::api_at(address, &apis) {
            return Err(format!("{address} is this box's own API (it listens on {api}): a webhook may not call into it"));
        }
        let host = match url.port() {
            Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
            None => url.host_str().unwrap_or_default().to_string(),
        };
        let target = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_string(),
        };
        let headers = vec![
            ("vaebox-signature", signature::header(&self.secret, chrono::Utc::now().timestamp(), &body)),
            ("vaebox-event", event.to_string()),
            // The same for every try of one job's webhook, so a receiver can drop repeats.
            ("vaebox-delivery", id.to_string()),
            ("vaebox-attempt", attempt.to_string()),
        ];
        post::send(Post { address, host: &host, target: &target, headers, body, timeout: self.timeout }).await
    }

    /// The receiver's address: the URL's own, or its name looked up now and checked, so that a listed name
    /// cannot be pointed at this box or at link-local services.
    async fn address_of(&self, url: &url::Url) -> Result<SocketAddr, String> {
        let port = url.port_or_known_default().unwrap_or(80);
        // Checked at submission; checked again, as the config may have changed since.
        if !url.host().is_some_and(|host| self.hosts.allows_host(&host)) {
            return Err(format!("host `{}` is not in callback_hosts (any more)", url.host_str().unwrap_or_default()));
        }
        let name = match url.host() {
            Some(url::Host::Ipv4(ip)) => return Ok(SocketAddr::new(IpAddr::V4(ip), port)),
            Some(url::Host::Ipv6(ip)) => return Ok(SocketAddr::new(IpAddr::V6(ip), port)),
            Some(url::Host::Domain(name)) => name.to_string(),
            None => return Err("the URL names no host".into()),
        };
        let resolve_timeout = RESOLVE_TIMEOUT.min(self.timeout);
        let found: Vec<SocketAddr> = tokio::time::timeout(resolve_timeout, tokio::net::lookup_host((name.as_str(), port)))
            .await
            .map_err(|_| format!("looking `{name}` up took over {:.1} s", resolve_timeout.as_secs_f64()))?
            .map_err(|e| format!("cannot look `{name}` up: {e}"))?
            .collect();
        if let Some(forbidden) = found.iter().find(|address| !self.hosts.allows_resolved(address.ip())) {
            return Err(format!("`{name}` resolves to {}, which callback_hosts does not allow (this box, link-local)", forbidden.ip()));
        }
        found.first().copied().ok_or_else(|| format!("`{name}` has no address"))
    }
}

fn in_rfc3339(wait: Duration) -> String {
    let at = chrono::Utc::now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX);
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
