//! A real S3-compatible server on loopback for the cold-tier tests: moto's `moto_server`,
//! started by the test on 127.0.0.1 and a free port, killed when the handle drops.
//!
//! The server binary is `$STRATA_MOTO_SERVER`, else `moto_server` on PATH, else a virtualenv
//! under the cargo target dir that this harness creates once (`python3 -m venv` and
//! `pip install 'moto[server]'`, about a minute, from PyPI).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A running moto server.
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

static INSTALL: Mutex<()> = Mutex::new(());

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

fn server_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("STRATA_MOTO_SERVER") {
        return PathBuf::from(path);
    }
    if let Some(path) = on_path("moto_server") {
        return path;
    }
    let _guard = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("moto-venv");
    let binary = venv.join("bin").join("moto_server");
    if !binary.is_file() {
        let status = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 is needed to install moto for the S3 tests");
        assert!(status.success(), "python3 -m venv failed");
        let status = Command::new(venv.join("bin").join("pip"))
            .args(["install", "--quiet", "moto[server]"])
            .status()
            .expect("pip runs");
        assert!(status.success(), "pip install 'moto[server]' failed");
    }
    binary
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// One raw HTTP/1.1 request; returns the status code.
fn http(port: u16, method: &str, path: &str) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad response {response:?}")))
}

/// Starts moto on 127.0.0.1 and creates `bucket`.
pub fn start(bucket: &str) -> Moto {
    let binary = server_binary();
    let port = free_port();
    let child = Command::new(&binary)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
    let moto = Moto {
        child,
        endpoint: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match http(port, "PUT", &format!("/{bucket}")) {
            Ok(200) => return moto,
            Ok(code) => panic!("creating bucket {bucket} answered {code}"),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("moto did not come up on port {port}: {e}"),
        }
    }
}
