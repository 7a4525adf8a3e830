//! A stand-in InfluxDB on a free loopback port, for Slurm's `acct_gather_profile/influxdb`.
//!
//! That plugin POSTs InfluxDB 1.x line protocol with libcurl to
//! `<host>/write?db=<db>&rp=<policy>&precision=s`; InfluxDB answers `204 No Content`. This
//! answers the same way and keeps every request line and every line of data.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Default)]
struct Received {
    /// "POST /write?db=... HTTP/1.1"
    requests: Vec<String>,
    lines: Vec<String>,
}

pub struct FakeInfluxDb {
    port: u16,
    received: Arc<Mutex<Received>>,
    stop: Arc<AtomicBool>,
    server: Option<JoinHandle<()>>,
}

impl FakeInfluxDb {
    pub fn start() -> FakeInfluxDb {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake InfluxDB");
        let port = listener.local_addr().expect("local addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let received = Arc::new(Mutex::new(Received::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let (received, stop) = (Arc::clone(&received), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => serve(stream, &received),
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
        };
        FakeInfluxDb {
            port,
            received,
            stop,
            server: Some(server),
        }
    }

    /// For `ProfileInfluxDBHost`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<String> {
        self.lock().requests.clone()
    }

    pub fn lines(&self) -> Vec<String> {
        self.lock().lines.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Received> {
        self.received.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for FakeInfluxDb {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

/// One HTTP/1.1 request: headers, `Expect: 100-continue` as libcurl may send it, a
/// Content-Length body, then 204.
fn serve(stream: TcpStream, received: &Mutex<Received>) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut reader = BufReader::new(stream);
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    let (mut length, mut expect_continue) = (0usize, false);
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').unwrap_or((&header, ""));
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap_or(0),
            "expect" => expect_continue = value.trim().eq_ignore_ascii_case("100-continue"),
            _ => {}
        }
    }
    if expect_continue {
        let _ = writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    {
        let mut received = received.lock().unwrap_or_else(PoisonError::into_inner);
        received.requests.push(request.trim().to_string());
        received.lines.extend(
            String::from_utf8_lossy(&body)
                .lines()
                .filter(|l| !l.is_empty())
                .map(str::to_string),
        );
    }
    let _ = writer
        .write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
}
