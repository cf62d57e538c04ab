//! The data dir's disk: how much is free, whether an error means it is full, and a reserve file that
//! is given back when it is. A job that fills the disk must still have its failure written to the
//! database, and a `DELETE` must still go through, or the job stays `running` and is run again at
//! the next start; the reserve is the room those last writes need.
use std::path::{Path, PathBuf};

/// What `ENOSPC` and `EDQUOT` read as, in io errors, ffmpeg's stderr and SQLite's messages.
const FULL_MESSAGES: &[&str] = &["no space left on device", "disk quota exceeded", "database or disk is full"];

/// Less free than this, and a failed write is taken to be the disk's fault.
const NEARLY_FULL_BYTES: u64 = 1 << 20;

/// Bytes available to this user on the file system holding `path`.
pub fn free_bytes(path: &Path) -> Option<u64> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a struct statvfs fills.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    Some(stat.f_bavail as u64 * stat.f_frsize as u64)
}

/// True when the error, or any error under it, says the disk is full. Errors reach here from
/// ffmpeg (as its stderr), from our own file writes and from SQLite, so the text is what they share.
pub fn is_full(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::StorageFull || io.raw_os_error() == Some(libc::EDQUOT) {
                return true;
            }
        }
        if says_full(&e.to_string()) {
            return true;
        }
        current = e.source();
    }
    false
}

pub fn says_full(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    FULL_MESSAGES.iter().any(|m| text.contains(m))
}

/// `bytes` of real (allocated, not sparse) blocks in the data dir, taken while there is room and
/// given back when the disk fills. It comes in two slices, given back one at a time: a job's failure
/// takes the first to be recorded, and a `DELETE` on the still full disk still finds the second.
pub struct DiskReserve {
    slices: Vec<PathBuf>,
    slice_bytes: u64,
    /// Set while a slice is missing for lack of room, so that is logged once, not at every poll.
    short_of_room: std::sync::atomic::AtomicBool,
}

impl DiskReserve {
    pub const FILE_PREFIX: &'static str = ".vaebox-disk-reserve";
    const SLICES: usize = 2;

    pub fn new(data_dir: &Path, bytes: u64) -> DiskReserve {
        let slices = (1..=Self::SLICES).map(|i| data_dir.join(format!("{}-{i}", Self::FILE_PREFIX))).collect();
        DiskReserve { slices, slice_bytes: bytes / Self::SLICES as u64, short_of_room: Default::default() }
    }

    /// Takes the slices that are missing while the disk has room for each twice over (the reserve
    /// must not be what fills the disk). Cheap when the reserve is in place: one `stat` per slice.
    pub fn ensure(&self) {
        for path in self.slices.iter().filter(|path| self.slice_bytes > 0 && !self.holds(path)) {
            let dir = path.parent().unwrap_or(Path::new("."));
            let free = free_bytes(dir);
            if free.is_none_or(|free| free < self.slice_bytes.saturating_mul(2)) {
                if !self.short_of_room.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!(
                        dir = %dir.display(),
                        free_mib = free.map(|free| free >> 20),
                        reserve_mib = (self.slice_bytes * Self::SLICES as u64) >> 20,
                        "the disk reserve is not in place: too little free space to take it; a full disk may then stop the box \
                         from recording what happened (free some space; it is taken once there is room)"
                    );
                }
                return;
            }
            self.short_of_room.store(false, std::sync::atomic::Ordering::Relaxed);
            match allocate(path, self.slice_bytes) {
                Ok(()) => tracing::info!(path = %path.display(), mib = self.slice_bytes >> 20, "disk reserve in place"),
                Err(error) => {
                    let _ = std::fs::remove_file(path);
                    tracing::warn!(path = %path.display(), %error, "cannot take the disk reserve");
                    return;
                }
            }
        }
    }

    /// Gives one slice of the reserve back; true when there was one to give.
    pub fn release(&self) -> bool {
        let Some(path) = self.slices.iter().find(|path| path.exists()) else {
            return false;
        };
        let released = std::fs::remove_file(path).is_ok();
        if released {
            tracing::warn!(mib = self.slice_bytes >> 20, "the data dir's disk is full: released part of the disk reserve to record what happened");
        }
        released
    }

    /// Gives a slice back if `error` (or the free space left) says the disk is full: SQLite may
    /// report a full disk under its write-ahead log as a plain I/O error.
    pub fn release_if_full(&self, error: &(dyn std::error::Error + 'static)) -> bool {
        let dir = self.slices[0].parent().unwrap_or(Path::new("."));
        let nearly_full = free_bytes(dir).is_some_and(|free| free < NEARLY_FULL_BYTES);
        (is_full(error) || nearly_full) && self.release()
    }

    /// True when every slice is in place (or no reserve is configured).
    pub fn is_held(&self) -> bool {
        self.slice_bytes == 0 || self.slices.iter().all(|path| self.holds(path))
    }

    fn holds(&self, path: &Path) -> bool {
        std::fs::metadata(path).is_ok_and(|m| m.len() == self.slice_bytes)
    }
}

/// Allocates the blocks for real: a file extended with `set_len` is sparse and reserves nothing.
fn allocate(path: &Path, bytes: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::create(path)?;
    let len = libc::off_t::try_from(bytes).map_err(|_| std::io::Error::other("reserve too large"))?;
    // SAFETY: a valid open file descriptor; posix_fallocate returns an errno instead of setting it.
    let status = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    if status != 0 {
        return Err(std::io::Error::from_raw_os_error(status));
    }
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_disk_is_recognised_in_io_errors_and_in_ffmpeg_and_sqlite_messages() {
        let enospc = std::io::Error::from_raw_os_error(libc::ENOSPC);
        assert!(is_full(&enospc));
        let wrapped = std::io::Error::other(std::io::Error::from_raw_os_error(libc::EDQUOT));
        assert!(is_full(&wrapped));
        assert!(says_full("[out#0/mp4 @ 0x55] Error writing trailer: No space left on device"));
        assert!(says_full("error returned from database: (code: 13) database or disk is full"));
        assert!(!is_full(&std::io::Error::from_raw_os_error(libc::EACCES)));
        assert!(!says_full("Invalid data found when processing input"));
    }

    #[test]
    fn the_reserve_takes_real_blocks_and_is_given_back() {
        let dir = std::env::temp_dir().join(format!("vaebox-reserve-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let reserve = DiskReserve::new(&dir, 1 << 20);
        reserve.ensure();
        assert!(reserve.is_held());
        use std::os::unix::fs::MetadataExt;
        let blocks: u64 = reserve.slices.iter().map(|path| std::fs::metadata(path).unwrap().blocks()).sum();
        assert!(blocks * 512 >= 1 << 20, "the reserve is sparse: {blocks} blocks");
        assert!(reserve.release());
        assert!(!reserve.is_held() && reserve.slices[1].exists(), "one slice at a time");
        assert!(reserve.release());
        assert!(!reserve.release());
        reserve.ensure();
        assert!(reserve.is_held(), "taken back once there is room");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
