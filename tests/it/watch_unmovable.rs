//! A watch-folder file that cannot be moved to `failed/` (here `failed` is a link, which is never followed)
//! was probed again and logged at every look, twice a second for good (issue 53). It is logged once and left
//! alone until it changes; then it is tried again, once.
use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const POLL_S: f64 = 0.25;

fn count(log: &Path, line: &str) -> usize {
    std::fs::read_to_string(log).unwrap_or_default().matches(line).count()
}

async fn wait_for(log: &Path, line: &str, times: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(log, line) < times {
        assert!(Instant::now() < deadline, "{line:?} not logged {times} times");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_cannot_be_moved_is_not_retried_until_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output, elsewhere) = (dir.path().join("in"), dir.path().join("out"), dir.path().join("elsewhere"));
    for folder in [&input, &output, &elsewhere] {
        std::fs::create_dir_all(folder).unwrap();
    }
    std::os::unix::fs::symlink(&elsewhere, input.join("failed")).unwrap();
    let config = format!(
        "watch_poll_s = {POLL_S}\nwatch_settle_s = 0\n[[watch]]\nfolder = {input:?}\noutput = {output:?}\nop = \"upscale\"\nscale = 2\ndtype = \"f32\"\n"
    );
    std::fs::write(dir.path().join("config.toml"), config).unwrap();
    let log = dir.path().join("server.log");
    let _server = Server::start_logged(dir.path(), &[], &log);
    std::fs::write(input.join("notes.txt"), b"not a video at all").unwrap();

    let (failed, unmovable) = ("watch folder: the file failed", "watch folder: cannot move the input to failed/");
    wait_for(&log, unmovable, 1).await;
    // Twenty looks more.
    tokio::time::sleep(Duration::from_secs_f64(POLL_S * 20.0)).await;
    assert_eq!((count(&log, failed), count(&log, unmovable)), (1, 1), "probed or logged again though nothing changed");
    assert!(input.join("notes.txt").is_file() && std::fs::read_dir(&elsewhere).unwrap().count() == 0);

    // Changed: tried once more.
    std::fs::write(input.join("notes.txt"), b"still not a video").unwrap();
    wait_for(&log, unmovable, 2).await;
    tokio::time::sleep(Duration::from_secs_f64(POLL_S * 20.0)).await;
    assert_eq!((count(&log, failed), count(&log, unmovable)), (2, 2), "once per change");
}
