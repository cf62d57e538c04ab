//! A job's webhook as it is stored and served: the URL, each delivery tried, and where it stands; and the
//! back-off between tries (pure arithmetic, so the policy is tested here and nowhere else).
use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Between two tries there is at most an hour...
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(3600);
/// ...and after a day of tries the box gives up.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CallbackState {
    /// Not sent yet (the job runs), or to be tried again.
    Pending,
    /// A try was answered with a 2xx.
    Delivered,
    /// A day of tries failed; no more are made.
    GaveUp,
}

impl CallbackState {
    pub fn as_str(self) -> &'static str {
        match self {
            CallbackState::Pending => "pending",
            CallbackState::Delivered => "delivered",
            CallbackState::GaveUp => "gave-up",
        }
    }

    pub fn parse(text: &str) -> Option<CallbackState> {
        [CallbackState::Pending, CallbackState::Delivered, CallbackState::GaveUp].into_iter().find(|s| s.as_str() == text)
    }
}

/// One try to deliver the job's end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Delivery {
    /// When the try was made.
    #[schema(format = DateTime)]
    pub at: String,
    /// The receiver's HTTP status; null when none came (no connection, a timeout, a refused address).
    pub status: Option<u16>,
    /// Why the try failed; null when it was delivered.
    pub error: Option<String>,
    /// 1 for the first try.
    pub attempt: u32,
}

/// The job's webhook: `callback_url` and its deliveries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CallbackInfo {
    pub url: String,
    pub state: CallbackState,
    pub deliveries: Vec<Delivery>,
}

/// What follows a try.
#[derive(Debug, Clone, PartialEq)]
pub enum CallbackNext {
    Delivered,
    /// Try again at this instant (RFC 3339).
    RetryAt(String),
    GaveUp,
}

/// The wait after failed try number `attempt` (1-based): `first`, doubling, at most an hour.
pub fn retry_wait(first: Duration, attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(20);
    first.saturating_mul(1 << doublings).min(MAX_RETRY_WAIT)
}

/// After failed try `attempt`, made `since_first` after the first try: the wait before the next, or none
/// when the next would come more than a day after the first.
pub fn next_try(first: Duration, attempt: u32, since_first: Duration) -> Option<Duration> {
    let wait = retry_wait(first, attempt);
    (since_first + wait <= GIVE_UP_AFTER).then_some(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_up_to_an_hour_and_stops_after_a_day() {
        let first = Duration::from_secs(10);
        let waits: Vec<u64> = (1..=4).map(|attempt| retry_wait(first, attempt).as_secs()).collect();
        assert_eq!(waits, [10, 20, 40, 80]);
        assert_eq!(retry_wait(first, 9).as_secs(), 2560);
        assert_eq!(retry_wait(first, 10), MAX_RETRY_WAIT);
        assert_eq!(retry_wait(first, 400), MAX_RETRY_WAIT);
        assert_eq!(next_try(first, 1, Duration::ZERO), Some(first));
        assert_eq!(next_try(first, 30, GIVE_UP_AFTER - Duration::from_secs(60)), None);
        // Tries over a day: 10 s doubling to the hour cap, then hourly, about 32 in all.
        let (mut elapsed, mut attempt) = (Duration::ZERO, 1);
        while let Some(wait) = next_try(first, attempt, elapsed) {
            elapsed += wait;
            attempt += 1;
        }
        assert!((30..=35).contains(&attempt), "{attempt}");
    }

    #[test]
    fn states_round_trip() {
        for state in [CallbackState::Pending, CallbackState::Delivered, CallbackState::GaveUp] {
            assert_eq!(CallbackState::parse(state.as_str()), Some(state));
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
    }
}
