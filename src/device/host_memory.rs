//! What the host can give a CPU job now: the kernel's `MemAvailable`, or less where the box runs in a
//! cgroup (a container, a systemd slice) whose memory limit leaves less room than that.
use std::path::{Path, PathBuf};

/// Bytes a new allocation can take now without swapping or the OOM killer; `None` where the host does
/// not say (not Linux).
pub fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let available = mem_available(&meminfo)?;
    Some(match cgroup_room() {
        Some(room) => available.min(room),
        None => available,
    })
}

/// `MemAvailable:   123456 kB` → bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|line| line.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// The cgroup v2 limit less what the group uses (`memory.max` − `memory.current`); `None` without a
/// limit ("max") or without cgroup v2.
fn cgroup_room() -> Option<u64> {
    let dir = own_cgroup_dir()?;
    let max = read_number(&dir.join("memory.max"))?;
    let current = read_number(&dir.join("memory.current"))?;
    Some(max.saturating_sub(current))
}

/// `/proc/self/cgroup`'s v2 line is `0::/path`: the group's files are under `/sys/fs/cgroup/path`.
fn own_cgroup_dir() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|line| line.strip_prefix("0::"))?;
    Some(Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')))
}

fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_bytes() {
        let meminfo = "MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(mem_available(meminfo), Some(20_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn this_linux_host_says_what_it_has() {
        let bytes = available_bytes().expect("/proc/meminfo on Linux");
        assert!(bytes > 64 << 20, "{bytes} bytes available");
    }
}
