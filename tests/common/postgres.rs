//! A throwaway PostgreSQL cluster for a test: Debian's own server binaries, a cluster made by `initdb` in a
//! temporary folder, listening on a free loopback port; stopped (immediately) and removed on drop.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub struct PgCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub port: u16,
}

/// The server binaries of the newest PostgreSQL Debian's `postgresql` package installed.
fn bin_dir() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's server is missing: run scripts/setup.sh --test (it installs Debian's postgresql)")
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    versions.sort_by_key(|bin| bin.parent().and_then(|v| v.file_name()).and_then(|v| v.to_str()).and_then(|v| v.parse::<u32>().ok()));
    versions.pop().expect("no /usr/lib/postgresql/*/bin/initdb")
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl PgCluster {
    pub fn start() -> PgCluster {
        let dir = tempfile::tempdir().unwrap();
        let cluster = PgCluster { bin: bin_dir(), dir, port: free_port() };
        // PostgreSQL refuses to run as root: as root, the cluster belongs to Debian's `postgres` user.
        if is_root() {
            let status = Command::new("chown").args(["-R", "postgres:postgres"]).arg(cluster.dir.path()).status().unwrap();
            assert!(status.success(), "chown the cluster's folder to postgres");
        }
        cluster.run("initdb", &["-D", &cluster.data(), "-A", "trust", "-U", "vaebox", "--no-sync", "-E", "UTF8"]);
        cluster.start_server();
        cluster
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    pub fn url(&self) -> String {
        format!("postgres://vaebox@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server (again, after `stop`) and waits until it takes connections.
    pub fn start_server(&self) {
        let options = format!("-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60", self.port, self.dir.path().display());
        let log = self.dir.path().join("server.log").display().to_string();
        self.run("pg_ctl", &["-D", &self.data(), "-l", &log, "-o", &options, "-w", "-t", "60", "start"]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "PostgreSQL did not open its port");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the server at once (an outage as clients see it: connections cut, nothing answers).
    pub fn stop_server(&self) {
        self.run("pg_ctl", &["-D", &self.data(), "-m", "immediate", "-w", "stop"]);
    }

    fn run(&self, program: &str, args: &[&str]) {
        let binary = self.bin.join(program);
        let mut command = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&binary);
            c
        } else {
            Command::new(&binary)
        };
        let output = command.args(args).current_dir(self.dir.path()).output().unwrap_or_else(|e| panic!("run {program}: {e}"));
        assert!(
            output.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let binary = self.bin.join("pg_ctl");
        let data = self.data();
        let args = ["-D", data.as_str(), "-m", "immediate", "stop"];
        let _ = if is_root() {
            Command::new("runuser").args(["-u", "postgres", "--"]).arg(&binary).args(args).output()
        } else {
            Command::new(&binary).args(args).output()
        };
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc_geteuid() == 0 }
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}
