//! `Vaebox-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` (Stripe's scheme): the
//! receiver recomputes it with the shared secret, and refuses an old `t` so a captured delivery cannot be
//! replayed later.
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header's value for `body` sent at `unix_seconds`.
pub fn header(secret: &str, unix_seconds: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(unix_seconds.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let hex: String = mac.finalize().into_bytes().iter().map(|byte| format!("{byte:02x}")).collect();
    format!("t={unix_seconds},v1={hex}")
}
