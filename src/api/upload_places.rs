//! Who may send a body now, and how slowly. `max_concurrent_uploads` places in all, and, while
//! `max_uploads_per_client` is above 0, three rules per address so that a few addresses cannot hold them all:
//!
//! - its share: at most `max_uploads_per_client` places at once (8 clients trickling a byte every 2 s once
//!   held every place for a whole test);
//! - the reserve: an address that holds a place already may not take one of the last [`reserve_for`] free
//!   places; those are kept for addresses that hold none (8 reconnecting clients from 2 addresses, each
//!   within its share of 4, once held all 8 places, and 114 uploads from a third address got 503 in a minute);
//! - the cool-down: an address whose body was just cut as too slow may start no upload for
//!   [`SLOW_UPLOAD_COOL_DOWN`] (503 with `Retry-After`), so a trickling client that reconnects at once
//!   cannot keep taking back the place it lost.
//!
//! - its network's share: the addresses of one /24 (IPv4) or /64 (IPv6) together hold at most all the places
//!   but the reserve (40 trickling addresses of one network once held 82% of the places).
//!
//! A body slower than `min_upload_rate_kib_s` over a window of [`RATE_WINDOW`] is cut (408
//! `upload-too-slow`): the idle timeout alone cuts only silence. And when an upload is refused a place, the
//! slowest body held, if it has run [`CUT_AFTER`] at under [`CUT_BELOW_MIN_RATES`] times the minimum, is cut
//! (408 at its next bytes) so that the refused client's retry finds the place free. With `max_uploads_per_client` 0 (a box
//! behind a proxy, where every client has the proxy's address) only the total holds.
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::address_counts::AddressCounts;

/// The client's address, put on every request by the connection loop (`server::listen`).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub IpAddr);

/// A body must carry `min_upload_rate_kib_s` KiB per second, averaged over this long.
pub const RATE_WINDOW: Duration = Duration::from_secs(10);

/// How long an address whose upload was cut as too slow may start no other. Three rate windows: a client
/// that trickles, is cut and reconnects holds a place for at most a quarter of the time; an honest client on
/// a slow link learns from the 408 and the `Retry-After` that it must send less at once, not try again.
pub const SLOW_UPLOAD_COOL_DOWN: Duration = Duration::from_secs(3 * RATE_WINDOW.as_secs());

/// The free places an address that holds one already may not take: a quarter of them, at least one. Enough
/// that two addresses each at their share (4 of the default 8) leave room for a third; small enough that one
/// client alone still gets its whole share.
pub fn reserve_for(total: u32) -> u32 {
    (total / 4).max(1)
}

/// A body held this long may be cut for a refused upload (younger ones have not shown their rate yet).
pub const CUT_AFTER: Duration = Duration::from_secs(5);
/// A body may be cut for a refused upload while its average rate is under this many times the minimum.
pub const CUT_BELOW_MIN_RATES: u64 = 4;

/// The network an address counts in for its network's share: its /24, or its /64.
pub fn network_of(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            IpAddr::from([a, b, c, 0])
        }
        IpAddr::V6(v6) => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
    }
}

/// What a held body has carried: read by `take` to find the slowest, and raised to cut it.
struct BodyMeter {
    addr: IpAddr,
    since: Instant,
    bytes: AtomicU64,
    cut: AtomicBool,
}

impl BodyMeter {
    fn kib_s(&self, now: Instant) -> f64 {
        self.bytes.load(Ordering::Relaxed) as f64 / 1024.0 / (now - self.since).as_secs_f64().max(1e-3)
    }
}

#[derive(Clone)]
pub struct UploadPlaces {
    all: Arc<Semaphore>,
    ledger: SharedLedger,
    total: u32,
    per_client_limit: u32,
    reserve: u32,
    /// `min_upload_rate_kib_s`: a body held under [`CUT_BELOW_MIN_RATES`] times it may be cut for a refused
    /// upload (0: none is).
    min_kib_s: u64,
}

/// Why no place was given.
#[derive(Debug, PartialEq)]
pub enum NoPlace {
    /// Every place is taken.
    Full,
    /// This address holds its share already.
    ClientShare { limit: u32 },
    /// This address holds a place, and the free ones left (`reserve` or fewer) are kept for other addresses.
    Reserved { reserve: u32 },
    /// The addresses of this one's /24 (or /64) hold all the places but the reserve.
    NetworkShare { limit: u32 },
    /// An upload from this address was just cut as too slow; it may start another after `retry_after`.
    CoolingDown { retry_after: Duration },
}

/// What the places know of each address.
#[derive(Default)]
struct Ledger {
    /// Places held per address.
    held: AddressCounts,
    /// Places held per network (`network_of`).
    held_by_network: AddressCounts,
    /// The bodies being received, to find the slowest; dropped ones are swept at each refusal.
    bodies: Vec<Weak<BodyMeter>>,
    /// Addresses whose upload was cut as too slow, until when they may start no other; past ones are
    /// dropped at each `take`, so the map holds only the addresses cut in the last cool-down.
    cooling_until: HashMap<IpAddr, Instant>,
}

type SharedLedger = Arc<Mutex<Ledger>>;

fn lock(ledger: &SharedLedger) -> MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The address a place is held for, with the ledger that counts it.
#[derive(Clone)]
struct Holder {
    addr: IpAddr,
    ledger: SharedLedger,
}

/// A place, given back when dropped.
pub struct UploadPlace {
    _permit: OwnedSemaphorePermit,
    holder: Option<Holder>,
    meter: Option<Arc<BodyMeter>>,
}

impl Drop for UploadPlace {
    fn drop(&mut self) {
        if let Some(holder) = &self.holder {
            let mut ledger = lock(&holder.ledger);
            ledger.held.release(holder.addr);
            ledger.held_by_network.release(network_of(holder.addr));
        }
    }
}

impl UploadPlace {
    /// The rate check of the body this place receives: when it cuts the body, the address cools down.
    pub fn rate_check(&self, min_kib_s: u64) -> RateCheck {
        RateCheck { cut_cools: self.holder.clone(), meter: self.meter.clone(), ..RateCheck::new(min_kib_s) }
    }
}

impl UploadPlaces {
    /// `per_client_limit` 0: no rule per address, only the total.
    pub fn new(total: u32, per_client_limit: u32, min_kib_s: u64) -> UploadPlaces {
        let total = total.max(1);
        UploadPlaces {
            all: Arc::new(Semaphore::new(total as usize)),
            ledger: Arc::default(),
            total,
            per_client_limit,
            reserve: reserve_for(total),
            min_kib_s,
        }
    }

    /// A place for an upload from `client`; refused, the slowest body held may be cut for its retry.
    pub fn take(&self, client: Option<IpAddr>) -> Result<UploadPlace, NoPlace> {
        let Some(addr) = client.filter(|_| self.per_client_limit > 0) else {
            return Ok(UploadPlace { _permit: self.any_free()?, holder: None, meter: None });
        };
        let mut ledger = lock(&self.ledger);
        let taken = self.take_for(&mut ledger, addr);
        if matches!(taken, Err(NoPlace::Full | NoPlace::Reserved { .. } | NoPlace::NetworkShare { .. })) {
            self.cut_slowest(&mut ledger);
        }
        taken
    }

    fn take_for(&self, ledger: &mut Ledger, addr: IpAddr) -> Result<UploadPlace, NoPlace> {
        let now = Instant::now();
        ledger.cooling_until.retain(|_, until| *until > now);
        if let Some(until) = ledger.cooling_until.get(&addr) {
            return Err(NoPlace::CoolingDown { retry_after: *until - now });
        }
        let held = ledger.held.held(addr);
        if held >= u64::from(self.per_client_limit) {
            return Err(NoPlace::ClientShare { limit: self.per_client_limit });
        }
        // With none free the answer is that the box is full, not that the rest is reserved.
        let free = self.all.available_permits();
        if held > 0 && free > 0 && free <= self.reserve as usize {
            return Err(NoPlace::Reserved { reserve: self.reserve });
        }
        let network = network_of(addr);
        let network_limit = (self.total - self.reserve).max(self.per_client_limit);
        if ledger.held_by_network.held(network) >= u64::from(network_limit) {
            return Err(NoPlace::NetworkShare { limit: network_limit });
        }
        let permit = self.any_free()?;
        ledger.held.add(addr);
        ledger.held_by_network.add(network);
        let meter = Arc::new(BodyMeter { addr, since: Instant::now(), bytes: AtomicU64::new(0), cut: AtomicBool::new(false) });
        ledger.bodies.push(Arc::downgrade(&meter));
        Ok(UploadPlace { _permit: permit, holder: Some(Holder { addr, ledger: self.ledger.clone() }), meter: Some(meter) })
    }

    /// Cuts the slowest body that has run [`CUT_AFTER`] under [`CUT_BELOW_MIN_RATES`] times the minimum rate
    /// (at its next bytes), and cools its address down; none while the minimum is 0.
    fn cut_slowest(&self, ledger: &mut Ledger) {
        ledger.bodies.retain(|body| body.strong_count() > 0);
        if self.min_kib_s == 0 {
            return;
        }
        let now = Instant::now();
        let threshold = (self.min_kib_s * CUT_BELOW_MIN_RATES) as f64;
        let slowest = ledger
            .bodies
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|body| !body.cut.load(Ordering::Relaxed) && now - body.since >= CUT_AFTER)
            .map(|body| (body.kib_s(now), body))
            .filter(|(rate, _)| *rate < threshold)
            .min_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((rate, body)) = slowest {
            tracing::info!(client = %body.addr, kib_s = rate, "an upload was refused a place: the slowest body held is cut for it");
            body.cut.store(true, Ordering::Relaxed);
            ledger.cooling_until.insert(body.addr, now + SLOW_UPLOAD_COOL_DOWN);
        }
    }

    fn any_free(&self) -> Result<OwnedSemaphorePermit, NoPlace> {
        self.all.clone().try_acquire_owned().map_err(|_| NoPlace::Full)
    }
}

/// The body went on too slowly (`RateCheck`).
#[derive(Debug, thiserror::Error)]
#[error("{}", self.describe())]
pub struct TooSlow {
    pub got_kib_s: f64,
    pub min_kib_s: u64,
    /// Cut for an upload that was refused a place, being the slowest held (under `CUT_BELOW_MIN_RATES` × the minimum).
    pub for_another: bool,
}

impl TooSlow {
    fn describe(&self) -> String {
        match self.for_another {
            false => format!("the upload came in at {:.1} KiB/s, under the box's minimum of {} KiB/s", self.got_kib_s, self.min_kib_s),
            true => format!(
                "the upload came in at {:.1} KiB/s, the slowest of the box's uploads and under {} KiB/s, while another waited for a place",
                self.got_kib_s,
                self.min_kib_s * CUT_BELOW_MIN_RATES
            ),
        }
    }
}

/// The rate a body arrives at, checked by the readers as each chunk comes in: once a whole
/// [`RATE_WINDOW`] carried less than the minimum, the upload is cut (and its address cools down).
pub struct RateCheck {
    min_kib_s: u64,
    window_start: Instant,
    window_bytes: u64,
    /// The address that cools down when this body is cut; none for a place not held per address.
    cut_cools: Option<Holder>,
    /// What the places see of this body (its bytes), and how they cut it for a refused upload.
    meter: Option<Arc<BodyMeter>>,
}

impl RateCheck {
    /// `min_kib_s` 0: no minimum.
    fn new(min_kib_s: u64) -> RateCheck {
        RateCheck { min_kib_s, window_start: Instant::now(), window_bytes: 0, cut_cools: None, meter: None }
    }

    pub fn add(&mut self, bytes: usize) -> Result<(), TooSlow> {
        self.window_bytes += bytes as u64;
        if let Some(meter) = &self.meter {
            meter.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
            if meter.cut.load(Ordering::Relaxed) {
                // Its address cools down already (`cut_slowest`).
                return Err(TooSlow { got_kib_s: meter.kib_s(Instant::now()), min_kib_s: self.min_kib_s, for_another: true });
            }
        }
        let elapsed = self.window_start.elapsed();
        if self.min_kib_s == 0 || elapsed < RATE_WINDOW {
            return Ok(());
        }
        let got_kib_s = self.window_bytes as f64 / 1024.0 / elapsed.as_secs_f64();
        if got_kib_s < self.min_kib_s as f64 {
            if let Some(holder) = &self.cut_cools {
                lock(&holder.ledger).cooling_until.insert(holder.addr, Instant::now() + SLOW_UPLOAD_COOL_DOWN);
            }
            return Err(TooSlow { got_kib_s, min_kib_s: self.min_kib_s, for_another: false });
        }
        self.window_start = Instant::now();
        self.window_bytes = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address of a network of its own (the rules per address, apart from the network's share).
    fn addr(n: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, n, 1]))
    }

    /// Address `n` of one /24.
    fn neighbour(n: u8) -> Option<IpAddr> {
        Some(IpAddr::from([192, 168, 1, n]))
    }

    fn refusal(places: &UploadPlaces, client: Option<IpAddr>) -> NoPlace {
        places.take(client).err().expect("a refusal")
    }

    #[test]
    fn two_addresses_at_their_share_leave_places_for_a_third() {
        // The defaults: 8 places, 4 per address, 2 of them kept for addresses that hold none.
        let places = UploadPlaces::new(8, 4, 16);
        let first: Vec<_> = (0..4).map(|_| places.take(addr(2)).ok().expect("its share")).collect();
        assert_eq!(refusal(&places, addr(2)), NoPlace::ClientShare { limit: 4 });
        let second: Vec<_> = (0..2).map(|_| places.take(addr(3)).ok().expect("outside the reserve")).collect();
        assert_eq!(refusal(&places, addr(3)), NoPlace::Reserved { reserve: 2 });
        // Addresses that hold none take the reserve, one place each.
        let third = places.take(addr(1)).ok().expect("a place for a third address");
        assert_eq!(refusal(&places, addr(1)), NoPlace::Reserved { reserve: 2 });
        let fourth = places.take(addr(4)).ok().expect("the last place, for a fourth address");
        assert_eq!(refusal(&places, addr(5)), NoPlace::Full);
        // A place given back is taken again, by any address that holds none.
        drop(third);
        assert!(places.take(addr(5)).is_ok());
        drop((first, second, fourth));
    }

    #[test]
    fn one_address_alone_gets_its_whole_share() {
        let places = UploadPlaces::new(8, 4, 16);
        let held: Vec<_> = (0..4).filter_map(|_| places.take(addr(1)).ok()).collect();
        assert_eq!(held.len(), 4);
    }

    #[test]
    fn the_reserve_is_a_quarter_and_never_hides_a_full_box() {
        assert_eq!((reserve_for(1), reserve_for(2), reserve_for(4), reserve_for(8), reserve_for(20)), (1, 1, 1, 2, 5));
        let places = UploadPlaces::new(1, 4, 16);
        let _only = places.take(addr(1)).ok().unwrap();
        assert_eq!(refusal(&places, addr(1)), NoPlace::Full);
        assert_eq!(refusal(&places, addr(2)), NoPlace::Full);
    }

    #[test]
    fn without_a_share_per_address_only_the_total_holds() {
        let places = UploadPlaces::new(2, 0, 16);
        let held: Vec<_> = (0..2).filter_map(|_| places.take(addr(1)).ok()).collect();
        assert_eq!(held.len(), 2, "no reserve, as every client may have one proxy's address");
        assert_eq!(refusal(&places, addr(2)), NoPlace::Full);
    }

    #[test]
    fn an_address_cut_as_too_slow_cools_down_and_others_do_not() {
        let places = UploadPlaces::new(8, 4, 16);
        let place = places.take(addr(2)).ok().unwrap();
        let mut rate = place.rate_check(16);
        // A window that began long ago and carried one byte.
        rate.window_start = Instant::now() - RATE_WINDOW;
        assert!(rate.add(1).is_err());
        drop(place);
        match refusal(&places, addr(2)) {
            NoPlace::CoolingDown { retry_after } => {
                assert!(retry_after > SLOW_UPLOAD_COOL_DOWN - Duration::from_secs(5) && retry_after <= SLOW_UPLOAD_COOL_DOWN, "{retry_after:?}")
            }
            other => panic!("{other:?}"),
        }
        assert!(places.take(addr(3)).is_ok(), "another address is not held back");
        // Once the cool-down is over the address takes places again.
        lock(&places.ledger).cooling_until.insert(addr(2).unwrap(), Instant::now());
        assert!(places.take(addr(2)).is_ok());
        assert!(lock(&places.ledger).cooling_until.is_empty(), "past cool-downs are forgotten");
    }

    #[test]
    fn a_fast_enough_body_is_not_cut() {
        let places = UploadPlaces::new(8, 4, 16);
        let place = places.take(addr(2)).ok().unwrap();
        let mut rate = place.rate_check(16);
        rate.window_start = Instant::now() - RATE_WINDOW;
        assert!(rate.add(1 << 20).is_ok());
        assert!(places.take(addr(2)).is_ok());
        let mut unlimited = place.rate_check(0);
        unlimited.window_start = Instant::now() - RATE_WINDOW;
        assert!(unlimited.add(0).is_ok());
    }

    #[test]
    fn the_addresses_of_one_network_leave_the_reserve_to_other_networks() {
        let places = UploadPlaces::new(8, 4, 16);
        let held: Vec<_> = (1..=40).filter_map(|n| places.take(neighbour(n)).ok()).collect();
        assert_eq!(held.len(), 6, "one /24 holds all but the reserve of 2");
        assert_eq!(refusal(&places, neighbour(41)), NoPlace::NetworkShare { limit: 6 });
        assert!(places.take(addr(9)).is_ok(), "another network gets a reserved place");
        let v6 = |tail: u16| Some(IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, tail]));
        assert_eq!(network_of(v6(1).unwrap()), network_of(v6(2).unwrap()));
        assert_ne!(network_of(v6(1).unwrap()), network_of(IpAddr::from([0x2001, 0xdb8, 0, 2, 0, 0, 0, 1])));
    }

    #[test]
    fn a_refused_upload_cuts_the_slowest_body_held_for_its_retry() {
        let places = UploadPlaces::new(2, 4, 16);
        let (mut slow, mut fast) = (places.take(addr(1)).ok().unwrap(), places.take(addr(2)).ok().unwrap());
        // Both held past CUT_AFTER (their meters as the ledger sees them, started that long ago): the slow
        // one carried 20 KiB/s, the fast one 1 MiB/s.
        let held_for = CUT_AFTER + Duration::from_secs(1);
        let mut backdated = Vec::new();
        for (place, kib_s, n) in [(&mut slow, 20u64, 1), (&mut fast, 1024, 2)] {
            let meter = Arc::new(BodyMeter {
                addr: addr(n).unwrap(),
                since: Instant::now() - held_for,
                bytes: AtomicU64::new(kib_s * 1024 * held_for.as_secs()),
                cut: AtomicBool::new(false),
            });
            backdated.push(Arc::downgrade(&meter));
            place.meter = Some(meter);
        }
        lock(&places.ledger).bodies = backdated;
        let (mut slow_rate, mut fast_rate) = (slow.rate_check(16), fast.rate_check(16));
        assert_eq!(refusal(&places, addr(3)), NoPlace::Full);
        let cut = slow_rate.add(1).unwrap_err();
        assert!(cut.for_another && cut.to_string().contains("while another waited"), "{cut}");
        assert!(fast_rate.add(1).is_ok(), "the faster body goes on");
        drop(slow);
        assert!(places.take(addr(3)).is_ok(), "the refused upload's retry finds the place");
        assert!(matches!(refusal(&places, addr(1)), NoPlace::CoolingDown { .. }));
    }
}
