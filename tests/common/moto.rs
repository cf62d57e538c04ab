//! A throwaway S3-compatible server for a test: moto's server (PyPI `moto[server]`, installed into the
//! project's venv by `scripts/setup.sh --test`) on a free loopback port, killed on drop. It takes any
//! credentials; buckets are made and listed with plain HTTP.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::postgres::free_port;

pub struct MotoServer {
    child: Child,
    pub port: u16,
}

impl MotoServer {
    pub fn start(log_dir: &Path) -> MotoServer {
        let port = free_port();
        let log = std::fs::File::create(log_dir.join("moto.log")).unwrap();
        let child = Command::new(super::python())
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start moto (scripts/setup.sh --test installs moto[server] into .venv)");
        let server = MotoServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto did not start: {}", std::fs::read_to_string(log_dir.join("moto.log")).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn create_bucket(&self, bucket: &str) {
        let response = self.request("PUT", &format!("/{bucket}"));
        assert!(response.starts_with("HTTP/1.1 200"), "create bucket {bucket}: {response}");
    }

    /// The keys under `prefix` in `bucket`.
    pub fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let response = self.request("GET", &format!("/{bucket}?list-type=2&prefix={prefix}"));
        assert!(response.starts_with("HTTP/1.1 200"), "list {bucket}: {response}");
        response.split("<Key>").skip(1).filter_map(|rest| rest.split_once("</Key>")).map(|(key, _)| key.to_string()).collect()
    }

    /// The `VAEBOX_*` settings for processes that keep their files in `bucket` under `prefix`.
    pub fn storage_env(&self, bucket: &str, prefix: &str) -> Vec<(String, String)> {
        vec![
            ("VAEBOX_STORAGE".into(), format!("s3://{bucket}/{prefix}")),
            ("AWS_ENDPOINT".into(), self.endpoint()),
            ("AWS_ALLOW_HTTP".into(), "true".into()),
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID".into(), "vaebox-test".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "vaebox-test-secret".into()),
        ]
    }

    /// One request without a body; the whole response as text.
    fn request(&self, method: &str, target: &str) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let head = format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", self.port);
        stream.write_all(head.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
