//! A fault-injecting HTTP/1.1 proxy on 127.0.0.1 between a client and an S3-compatible server:
//! it forwards each request and its answer, and can cut PUT bodies short (fixing the
//! Content-Length so the server accepts them) or drop an answer after the server acted.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// What the proxy does to the requests it forwards.
#[derive(Debug, Default)]
pub struct ProxyFaults {
    /// PUT bodies reach the server cut to half their length.
    pub truncate_puts: AtomicBool,
    /// This many of the next answers are dropped (the connection closed instead) after the
    /// server acted on the request.
    pub drop_answers: AtomicU64,
    /// Requests forwarded so far.
    pub forwarded: AtomicU64,
}

/// A running proxy: its endpoint and its faults.
pub struct Proxy {
    pub endpoint: String,
    pub faults: Arc<ProxyFaults>,
}

/// Starts a proxy to the server listening on `upstream` (`http://127.0.0.1:port`).
pub fn start(upstream: &str) -> Proxy {
    let target = upstream.trim_start_matches("http://").to_string();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
    let port = listener.local_addr().expect("proxy addr").port();
    let faults = Arc::new(ProxyFaults::default());
    let shared = faults.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let (target, faults) = (target.clone(), shared.clone());
            std::thread::spawn(move || {
                let _ = serve(client, &target, &faults);
            });
        }
    });
    Proxy {
        endpoint: format!("http://127.0.0.1:{port}"),
        faults,
    }
}

/// One HTTP message: its head lines and its body.
struct Message {
    head: Vec<String>,
    body: Vec<u8>,
}

/// How a message's body is framed.
#[derive(PartialEq)]
enum Framing {
    /// No body (an answer to HEAD, a 204 or 304).
    None,
    /// Content-Length, chunked, or (an answer) up to the end of the stream.
    Read,
}

impl Message {
    /// Reads one message (`None` at end of stream).
    fn read(from: &mut impl BufRead, framing: Framing) -> std::io::Result<Option<Message>> {
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            if from.read_line(&mut line)? == 0 {
                return Ok(None);
            }
            let line = line.trim_end_matches(['\r', '\n']).to_string();
            if line.is_empty() {
                break;
            }
            head.push(line);
        }
        let status = head.first().and_then(|l| l.split_whitespace().nth(1));
        let mut body = Vec::new();
        if framing == Framing::None || matches!(status, Some("204" | "304")) {
        } else if let Some(len) = header(&head, "content-length") {
            body = vec![0u8; len.parse().unwrap_or(0)];
            from.read_exact(&mut body)?;
        } else if header(&head, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            body = read_chunked(from)?;
        } else if head.first().is_some_and(|l| l.starts_with("HTTP/")) {
            from.read_to_end(&mut body)?;
        }
        Ok(Some(Message { head, body }))
    }

    /// Writes the message with a Content-Length framing its body (or, `as_is`, the head
    /// unchanged: an answer to HEAD names the object's length), asking the peer to `close`
    /// the connection after it.
    fn write(&self, to: &mut impl Write, as_is: bool, close: bool) -> std::io::Result<()> {
        let mut out = Vec::new();
        let framing = ["content-length", "transfer-encoding", "connection"];
        for line in &self.head {
            let name = line
                .split(':')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            if as_is || line.starts_with("HTTP/") || !framing.contains(&name.as_str()) {
                out.extend_from_slice(format!("{line}\r\n").as_bytes());
            }
        }
        if !as_is {
            out.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
        }
        if close {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        to.write_all(&out)?;
        to.flush()
    }
}

/// Reads a chunked body.
fn read_chunked(from: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        from.read_line(&mut size)?;
        let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
            .map_err(std::io::Error::other)?;
        let mut chunk = vec![0u8; size + 2];
        from.read_exact(&mut chunk)?;
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}

/// The value of header `name` among `head`'s lines.
fn header<'a>(head: &'a [String], name: &str) -> Option<&'a str> {
    head.iter().skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// Forwards the requests of one client connection, one at a time, each over its own
/// connection to the server.
fn serve(client: TcpStream, target: &str, faults: &ProxyFaults) -> std::io::Result<()> {
    let mut from_client = BufReader::new(client.try_clone()?);
    let mut to_client = client;
    while let Some(mut request) = Message::read(&mut from_client, Framing::Read)? {
        let line = request.head.first().cloned().unwrap_or_default();
        if line.starts_with("PUT ") && faults.truncate_puts.load(Ordering::SeqCst) {
            let half = request.body.len() / 2;
            request.body.truncate(half);
        }
        let server = TcpStream::connect(target)?;
        let mut from_server = BufReader::new(server.try_clone()?);
        let mut to_server = server;
        request.write(&mut to_server, false, true)?;
        let head = line.starts_with("HEAD ");
        let framing = if head { Framing::None } else { Framing::Read };
        let Some(answer) = Message::read(&mut from_server, framing)? else {
            return Ok(());
        };
        faults.forwarded.fetch_add(1, Ordering::SeqCst);
        let drop = faults
            .drop_answers
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if drop {
            return Ok(());
        }
        answer.write(&mut to_client, head, false)?;
    }
    Ok(())
}
