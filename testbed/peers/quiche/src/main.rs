//! quiclab's perf peer for quiche (Cloudflare; BoringSSL).
//!
//! Protocol (draft-banks-quic-performance): the client opens bidirectional
//! stream 0, sends the number of bytes it wants as an 8-byte big-endian
//! integer with FIN; the server answers with that many bytes. Each side
//! prints one JSON line with quiche's `stats()` and `path_stats()`.
//!
//! quiche is sans-I/O: this peer owns the socket. It batches equal-sized
//! packets into one `sendmsg` with `UDP_SEGMENT` (GSO) and asks for `UDP_GRO`
//! on receive, each switchable; pacing hints are not honoured (packets leave
//! as soon as quiche hands them out), as in quiche's own example apps.
//! Arguments are `--name=value` (the same set for every quiclab peer).

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

// RFC 9000 §18.2: max_udp_payload_size is at most 65527 (s2n-quic refuses more).
const MAX_DATAGRAM: usize = 65527;
const GSO_MAX_SEGMENTS: usize = 64;

struct Opts(HashMap<String, String>);

impl Opts {
    fn parse() -> Opts {
        let mut map = HashMap::new();
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let Some(body) = arg.strip_prefix("--") else { fail(&format!("unexpected argument {arg}")) };
            if let Some((k, v)) = body.split_once('=') {
                map.insert(k.to_string(), v.to_string());
            } else {
                map.insert(body.to_string(), args.next().unwrap_or_else(|| "true".into()));
            }
        }
        Opts(map)
    }
    fn str(&self, k: &str, default: &str) -> String {
        self.0.get(k).cloned().unwrap_or_else(|| default.to_string())
    }
    fn num(&self, k: &str) -> u64 {
        self.0.get(k).map(|v| v.parse().unwrap_or_else(|_| fail(&format!("--{k}={v}: not a number")))).unwrap_or(0)
    }
    fn flag(&self, k: &str, default: bool) -> bool {
        match self.0.get(k).map(String::as_str) {
            None => default,
            Some("true" | "1" | "on") => true,
            Some("false" | "0" | "off") => false,
            Some(v) => fail(&format!("--{k}={v}: allowed true | false")),
        }
    }
}

/// The qlog file's buffered writer, shared with quiche's qlog streamer so that it can be
/// flushed before the process reports and exits (the connection is never dropped).
#[derive(Clone)]
struct QlogFile(std::sync::Arc<std::sync::Mutex<std::io::BufWriter<std::fs::File>>>);

impl std::io::Write for QlogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.lock().unwrap().flush()
    }
}

/// `--qlog=DIR` and the side's role, set once in main.
static QLOG_DIR: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
static QLOG: std::sync::OnceLock<QlogFile> = std::sync::OnceLock::new();

/// Attach a qlog writer (quiche's `qlog` feature: JSON-SEQ, recovery metrics, packets
/// sent, received and lost) to a new connection when `--qlog=DIR` was given.
fn attach_qlog(conn: &mut quiche::Connection) {
    let Some((dir, role)) = QLOG_DIR.get() else { return };
    if QLOG.get().is_some() {
        return;
    }
    let path = format!("{dir}/quiche-{role}-{}.sqlog", std::process::id());
    let file = std::fs::File::create(&path).unwrap_or_else(|e| fail(&format!("qlog {path}: {e}")));
    let shared = QLOG.get_or_init(|| {
        QlogFile(std::sync::Arc::new(std::sync::Mutex::new(std::io::BufWriter::with_capacity(1 << 20, file))))
    });
    conn.set_qlog(Box::new(shared.clone()), format!("quiche {role}"), "quiclab peer".into());
}

fn flush_qlog() {
    if let Some(f) = QLOG.get() {
        let _ = std::io::Write::flush(&mut f.clone());
    }
}

fn fail(msg: &str) -> ! {
    flush_qlog();
    println!("{}", json!({"stack": "quiche", "error": msg}));
    std::process::exit(1)
}

/// The socket with optional GSO batching and GRO splitting, counting system calls.
struct Socket {
    sock: UdpSocket,
    gso: bool,
    gro: bool,
    batch: Vec<u8>,
    segment: usize,
    segments: usize,
    batch_to: Option<SocketAddr>,
    send_calls: u64,
    recv_calls: u64,
    datagrams_sent: u64,
    datagrams_received: u64,
}

fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
            (storage, std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(_) => fail("IPv6 is not used by the testbed"),
    }
}

impl Socket {
    fn new(o: &Opts, addr: SocketAddr) -> Socket {
        let sock = UdpSocket::bind(addr).unwrap_or_else(|e| fail(&format!("bind {addr}: {e}")));
        let fd = sock.as_raw_fd();
        let set = |level: i32, name: i32, value: i32| unsafe {
            libc::setsockopt(fd, level, name, &value as *const i32 as *const libc::c_void, 4)
        };
        if o.num("rcvbuf") > 0 {
            set(libc::SOL_SOCKET, libc::SO_RCVBUF, o.num("rcvbuf") as i32);
        }
        if o.num("sndbuf") > 0 {
            set(libc::SOL_SOCKET, libc::SO_SNDBUF, o.num("sndbuf") as i32);
        }
        let gro = o.flag("gro", true) && set(libc::SOL_UDP, libc::UDP_GRO, 1) == 0;
        sock.set_nonblocking(true).unwrap();
        Socket { sock, gso: o.flag("gso", true), gro, batch: Vec::with_capacity(65536), segment: 0,
                 segments: 0, batch_to: None, send_calls: 0, recv_calls: 0, datagrams_sent: 0,
                 datagrams_received: 0 }
    }

    /// Queue one packet; flushes first when it cannot join the current GSO batch.
    fn send(&mut self, pkt: &[u8], to: SocketAddr) {
        if !self.gso {
            self.raw_send(pkt, to, 0);
            return;
        }
        let joins = self.segments > 0 && self.batch_to == Some(to) && pkt.len() <= self.segment
            && self.segments < GSO_MAX_SEGMENTS && self.batch.len() + pkt.len() <= 65000;
        if !joins {
            self.flush();
            self.segment = pkt.len();
            self.batch_to = Some(to);
        }
        self.batch.extend_from_slice(pkt);
        self.segments += 1;
        if pkt.len() < self.segment {
            self.flush(); // a shorter packet ends a GSO batch
        }
    }

    fn flush(&mut self) {
        if self.segments == 0 {
            return;
        }
        let to = self.batch_to.unwrap();
        let batch = std::mem::take(&mut self.batch);
        let seg = if self.segments > 1 { self.segment } else { 0 };
        self.raw_send(&batch, to, seg);
        self.datagrams_sent += self.segments as u64 - 1;
        self.batch = batch;
        self.batch.clear();
        self.segments = 0;
    }

    fn raw_send(&mut self, data: &[u8], to: SocketAddr, segment: usize) {
        let (mut addr, addr_len) = sockaddr(&to);
        let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
        let mut cmsg_buf = [0u8; 64];
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = &mut addr as *mut _ as *mut libc::c_void;
        msg.msg_namelen = addr_len;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if segment > 0 {
            unsafe {
                msg.msg_control = cmsg_buf.as_mut_ptr() as *mut libc::c_void;
                msg.msg_controllen = libc::CMSG_SPACE(2) as usize;
                let cmsg = libc::CMSG_FIRSTHDR(&msg);
                (*cmsg).cmsg_level = libc::SOL_UDP;
                (*cmsg).cmsg_type = libc::UDP_SEGMENT;
                (*cmsg).cmsg_len = libc::CMSG_LEN(2) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut u16, segment as u16);
            }
        }
        loop {
            self.send_calls += 1;
            let rc = unsafe { libc::sendmsg(self.sock.as_raw_fd(), &msg, 0) };
            if rc >= 0 {
                break;
            }
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EAGAIN) => {
                    let mut pfd = libc::pollfd { fd: self.sock.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                    unsafe { libc::poll(&mut pfd, 1, 10) };
                }
                Some(libc::EINTR) => {}
                _ => break, // e.g. ENOBUFS: the packet is lost, as on a real NIC
            }
        }
        self.datagrams_sent += 1;
    }

    /// Receive one datagram (or GRO batch); returns (len, segment size, from) or None.
    fn recv(&mut self, buf: &mut [u8]) -> Option<(usize, usize, SocketAddr)> {
        let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
        let mut cmsg_buf = [0u8; 64];
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = &mut from as *mut _ as *mut libc::c_void;
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg_buf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = cmsg_buf.len();
        self.recv_calls += 1;
        let n = unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            return None;
        }
        let n = n as usize;
        let mut segment = n;
        if self.gro {
            unsafe {
                let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
                while !cmsg.is_null() {
                    if (*cmsg).cmsg_level == libc::SOL_UDP && (*cmsg).cmsg_type == libc::UDP_GRO {
                        segment = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const i32) as usize;
                    }
                    cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
                }
            }
        }
        let sin = unsafe { *(&from as *const _ as *const libc::sockaddr_in) };
        let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        let addr = SocketAddr::from((ip, u16::from_be(sin.sin_port)));
        self.datagrams_received += n.div_ceil(segment.max(1)) as u64;
        Some((n, segment.max(1), addr))
    }

    fn wait_readable(&self, timeout: Option<Duration>) {
        let ms = timeout.map(|t| t.as_micros().div_ceil(1000).min(1000) as i32).unwrap_or(1000);
        let mut pfd = libc::pollfd { fd: self.sock.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        unsafe { libc::poll(&mut pfd, 1, ms) };
    }
}

fn config(o: &Opts, server: bool) -> quiche::Config {
    let mut c = quiche::Config::new(quiche::PROTOCOL_VERSION).unwrap();
    if server {
        c.load_cert_chain_from_pem_file(&o.str("cert", "cert.pem")).unwrap_or_else(|e| fail(&format!("cert: {e}")));
        c.load_priv_key_from_pem_file(&o.str("key", "key.pem")).unwrap_or_else(|e| fail(&format!("key: {e}")));
        c.verify_peer(false);
    } else if o.0.contains_key("ca") {
        c.load_verify_locations_from_file(&o.str("ca", "")).unwrap_or_else(|e| fail(&format!("ca: {e}")));
        c.verify_peer(true);
    } else {
        c.verify_peer(false);
    }
    c.set_application_protos(&[b"perf"]).unwrap();
    c.set_max_idle_timeout(30_000);
    let payload = match o.num("max-udp-payload") { 0 => 1472, p => p as usize };
    c.set_max_recv_udp_payload_size(MAX_DATAGRAM);
    c.set_max_send_udp_payload_size(payload);
    c.discover_pmtu(false);
    c.enable_pacing(false);
    let sw = match o.num("stream-window") { 0 => 16 << 20, v => v };
    let cw = match o.num("conn-window") { 0 => 24 << 20, v => v };
    c.set_initial_max_data(cw);
    c.set_max_connection_window(cw);
    c.set_initial_max_stream_data_bidi_local(sw);
    c.set_initial_max_stream_data_bidi_remote(sw);
    c.set_max_stream_window(sw);
    c.set_initial_max_streams_bidi(16);
    c.set_initial_max_streams_uni(16);
    let cc = match o.str("cc", "cubic").as_str() { "bbr" => "bbr2".to_string(), other => other.to_string() };
    c.set_cc_algorithm_name(&cc).unwrap_or_else(|_| fail(&format!("cc={cc} not supported: quiche offers cubic | reno | bbr")));
    c
}

fn stats(conn: &quiche::Connection, sock: &Socket) -> Map<String, Value> {
    let s = conn.stats();
    let mut m = Map::new();
    m.insert("packets_sent".into(), json!(s.sent));
    m.insert("packets_received".into(), json!(s.recv));
    m.insert("packets_lost".into(), json!(s.lost));
    m.insert("bytes_sent".into(), json!(s.sent_bytes));
    m.insert("bytes_received".into(), json!(s.recv_bytes));
    m.insert("bytes_lost".into(), json!(s.lost_bytes));
    if let Some(p) = conn.path_stats().next() {
        m.insert("rtt_ms".into(), json!(p.rtt.as_secs_f64() * 1e3));
        if let Some(min) = p.min_rtt {
            m.insert("min_rtt_ms".into(), json!(min.as_secs_f64() * 1e3));
        }
        m.insert("cwnd_bytes".into(), json!(p.cwnd));
        m.insert("udp_payload_bytes".into(), json!(p.pmtu));
    }
    m.insert("send_calls".into(), json!(sock.send_calls));
    m.insert("recv_calls".into(), json!(sock.recv_calls));
    m.insert("datagrams_sent".into(), json!(sock.datagrams_sent));
    m.insert("datagrams_received".into(), json!(sock.datagrams_received));
    m
}

fn emit(mut fields: Map<String, Value>) {
    flush_qlog();
    fields.insert("stack".into(), json!("quiche"));
    fields.insert("app".into(), json!("perf"));
    println!("{}", Value::Object(fields));
}

fn random_cid() -> Vec<u8> {
    let mut cid = vec![0u8; quiche::MAX_CONN_ID_LEN];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut cid).unwrap();
    cid
}

/// Feed every received datagram (GRO batches split into segments) to the connection.
fn receive(conn: &mut Option<quiche::Connection>, sock: &mut Socket, buf: &mut [u8], local: SocketAddr,
           cfg: &mut quiche::Config) {
    while let Some((n, segment, from)) = sock.recv(buf) {
        let mut offset = 0;
        while offset < n {
            let end = (offset + segment).min(n);
            let pkt = &mut buf[offset..end];
            if conn.is_none() {
                // Server: the first Initial creates the connection (no Retry).
                if let Ok(hdr) = quiche::Header::from_slice(pkt, quiche::MAX_CONN_ID_LEN) {
                    if hdr.ty == quiche::Type::Initial {
                        let scid = quiche::ConnectionId::from_vec(random_cid());
                        *conn = quiche::accept(&scid, None, local, from, cfg).ok();
                        if let Some(c) = conn.as_mut() {
                            attach_qlog(c);
                        }
                    }
                }
            }
            if let Some(c) = conn.as_mut() {
                let _ = c.recv(pkt, quiche::RecvInfo { from, to: local });
            }
            offset = end;
        }
    }
}

fn transmit(conn: &mut quiche::Connection, sock: &mut Socket, out: &mut [u8]) {
    loop {
        match conn.send(out) {
            Ok((n, info)) => sock.send(&out[..n], info.to),
            Err(quiche::Error::Done) => break,
            Err(e) => fail(&format!("send: {e}")),
        }
    }
    sock.flush();
}

fn main() {
    let o = Opts::parse();
    match o.str("cipher", "aes-ni").as_str() {
        "aes-ni" | "" => {}
        c => fail(&format!("cipher={c} not supported: quiche (BoringSSL) negotiates TLS 1.3 suites itself")),
    }
    let addr: SocketAddr = o.str("addr", "127.0.0.1:4433").parse().unwrap_or_else(|e| fail(&format!("addr: {e}")));
    let server = match o.str("role", "client").as_str() {
        "server" => true,
        "client" => false,
        r => fail(&format!("role={r}: allowed server | client")),
    };
    let qlog_dir = o.str("qlog", "");
    if !qlog_dir.is_empty() {
        let _ = QLOG_DIR.set((qlog_dir, o.str("role", "client")));
    }
    let mut cfg = config(&o, server);
    let mut sock = Socket::new(&o, if server { addr } else { "0.0.0.0:0".parse().unwrap() });
    let local = sock.sock.local_addr().unwrap();
    let local = if server { local } else { SocketAddr::from(([0, 0, 0, 0], local.port())) };
    let mut buf = vec![0u8; 65536 * 2];
    let mut out = vec![0u8; MAX_DATAGRAM];
    let zeros = vec![0u8; 256 * 1024];
    let want = o.num("bytes");
    let t0 = Instant::now();
    let mut conn: Option<quiche::Connection> = None;
    if !server {
        let scid = quiche::ConnectionId::from_vec(random_cid());
        let mut c = quiche::connect(Some(&o.str("server-name", "quiclab")), &scid, local, addr, &mut cfg)
            .unwrap_or_else(|e| fail(&format!("connect: {e}")));
        attach_qlog(&mut c);
        conn = Some(c);
    }
    let (mut handshake, mut requested, mut t_req, mut got) = (None::<Duration>, false, t0, 0u64);
    let (mut request, mut to_send, mut sent, mut stream, mut t_start, mut done_at) =
        (Vec::new(), 0u64, 0u64, None::<u64>, None::<Instant>, None::<f64>);
    loop {
        if let Some(c) = conn.as_mut() {
            transmit(c, &mut sock, &mut out);
            if c.is_closed() {
                break;
            }
        }
        sock.wait_readable(conn.as_ref().and_then(|c| c.timeout()));
        receive(&mut conn, &mut sock, &mut buf, local, &mut cfg);
        let Some(c) = conn.as_mut() else { continue };
        if c.timeout() == Some(Duration::ZERO) {
            c.on_timeout();
        }
        if c.is_established() && handshake.is_none() {
            handshake = Some(t0.elapsed());
        }
        if !server && c.is_established() && !requested {
            t_req = Instant::now();
            c.stream_send(0, &want.to_be_bytes(), true).unwrap_or_else(|e| fail(&format!("send request: {e}")));
            requested = true;
        }
        let readable: Vec<u64> = c.readable().collect();
        for id in readable {
            while let Ok((n, fin)) = c.stream_recv(id, &mut buf) {
                if server {
                    request.extend_from_slice(&buf[..n]);
                    if request.len() >= 8 && stream.is_none() {
                        to_send = u64::from_be_bytes(request[..8].try_into().unwrap());
                        stream = Some(id);
                        t_start = Some(Instant::now());
                    }
                } else {
                    got += n as u64;
                    if fin {
                        done_at = Some(t_req.elapsed().as_secs_f64());
                        let _ = c.close(true, 0, b"done");
                    }
                }
            }
        }
        if let Some(id) = stream {
            while sent < to_send {
                let n = (to_send - sent).min(zeros.len() as u64) as usize;
                match c.stream_send(id, &zeros[..n], sent + n as u64 == to_send) {
                    Ok(w) if w > 0 => sent += w as u64,
                    _ => break,
                }
            }
        }
    }
    let c = conn.as_ref().unwrap();
    let mut report = stats(c, &sock);
    if server {
        report.insert("role".into(), json!("server"));
        report.insert("bytes".into(), json!(sent));
        report.insert("transfer_s".into(), json!(t_start.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0)));
    } else {
        let transfer = done_at.unwrap_or_else(|| t_req.elapsed().as_secs_f64());
        report.insert("role".into(), json!("client"));
        report.insert("bytes".into(), json!(got));
        report.insert("handshake_ms".into(), json!(handshake.map(|h| h.as_secs_f64() * 1e3)));
        report.insert("transfer_s".into(), json!(transfer));
        report.insert("goodput_mbps".into(), json!(got as f64 * 8.0 / transfer / 1e6));
        if got != want || done_at.is_none() {
            let why = match (c.peer_error(), c.local_error()) {
                (Some(e), _) => format!(" (peer closed: code {:#x} {})", e.error_code, String::from_utf8_lossy(&e.reason)),
                (_, Some(e)) => format!(" (closed here: code {:#x} {})", e.error_code, String::from_utf8_lossy(&e.reason)),
                _ => String::new(),
            };
            report.insert("error".into(), json!(format!("received {got} of {want} bytes{why}")));
        }
    }
    emit(report);
}
