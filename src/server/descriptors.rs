//! File descriptors: every open connection holds one, and so does every pipe and file a job opens. 20,000
//! idle event streams once took them all, and a job submitted meanwhile failed spawning ffmpeg ("Too many
//! open files"). The soft limit is raised to the hard one at start, and connections may use all but
//! [`RESERVED`] of it.

/// Descriptors no connection may take: a job's ffmpeg pipes (three per process, a decoder and an encoder),
/// its input, output and checkpoint files, the database's, libtorch's, the watch folders', with room to
/// spare.
pub const RESERVED: u64 = 256;

/// Raises the soft descriptor limit to the hard one (Linux's default soft limit is 1024, far below what a
/// box with many clients needs); returns the limit now in force.
pub fn raise_soft_limit() -> std::io::Result<u64> {
    let mut limit = current()?;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: setrlimit reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(limit.rlim_cur)
}

/// The soft descriptor limit now (read at each new connection: `prlimit` may change it while the box runs).
pub fn soft_limit() -> u64 {
    current().map_or(u64::MAX, |limit| limit.rlim_cur)
}

fn current() -> std::io::Result<libc::rlimit> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(limit)
}
