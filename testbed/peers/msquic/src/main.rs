//! quiclab's perf peer for MsQuic (Microsoft; the crates.io `msquic` crate builds the C library).
//!
//! Protocol (draft-banks-quic-performance): the client opens one bidirectional
//! stream, sends the number of bytes it wants as an 8-byte big-endian integer
//! with FIN; the server answers with that many bytes. Each side prints one
//! JSON line from `QUIC_STATISTICS_V2`. MsQuic segments with GSO and receives
//! with GRO on its own (no switch), caps its path MTU at 1500 B, and offers
//! cubic and BBR. The server keeps a bounded number of sends in flight, all
//! pointing at one static zero buffer (MsQuic sends without copying).

use std::collections::HashMap;
use std::ffi::c_void;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use msquic::{Credential, CredentialFlags};
use msquic::{
    Addr, BufferRef, CertificateFile, Configuration, Connection, ConnectionEvent, ConnectionRef,
    ConnectionShutdownFlags, CredentialConfig, Listener, ListenerEvent, Registration,
    RegistrationConfig, SendFlags, Settings, Stream, StreamEvent, StreamOpenFlags, StreamRef,
    StreamStartFlags,
};
use serde_json::{json, Map, Value};

const CHUNK: usize = 256 * 1024;
const IN_FLIGHT: u64 = 16;
static ZEROS: [u8; CHUNK] = [0u8; CHUNK];
static RECEIVED: AtomicU64 = AtomicU64::new(0);

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
}

extern "C" {
    fn _exit(status: i32) -> !;
}

fn fail(msg: &str) -> ! {
    println!("{}", json!({"stack": "msquic", "error": msg}));
    let _ = std::io::Write::flush(&mut std::io::stdout());
    // _exit, not exit: with a connection still open (a failed handshake) MsQuic's
    // library destructor waits for it, and the peer hung until the harness killed it.
    unsafe { _exit(1) }
}

fn emit(mut fields: Map<String, Value>) {
    fields.insert("stack".into(), json!("msquic"));
    fields.insert("app".into(), json!("perf"));
    println!("{}", Value::Object(fields));
}

fn settings(o: &Opts) -> Settings {
    let mut s = Settings::new().set_IdleTimeoutMs(30_000).set_PeerBidiStreamCount(16);
    match o.str("cc", "cubic").as_str() {
        "cubic" => {}
        "bbr" => s = s.set_CongestionControlAlgorithm(1),
        other => fail(&format!("cc={other} not supported: MsQuic offers cubic | bbr")),
    }
    if o.num("max-udp-payload") > 0 {
        // MsQuic speaks IP MTU (payload + 28), at most 1500.
        let mtu = (o.num("max-udp-payload") + 28).min(1500) as u16;
        s = s.set_MaximumMtu(mtu).set_MinimumMtu(mtu.min(1280));
    }
    if o.num("stream-window") > 0 {
        s = s.set_StreamRecvWindowDefault(o.num("stream-window") as u32);
    }
    if o.num("conn-window") > 0 {
        s = s.set_ConnFlowControlWindow(o.num("conn-window") as u32);
    }
    s
}

fn stats(conn: &Connection) -> Map<String, Value> {
    let mut m = Map::new();
    if let Ok(s) = conn.get_stats_v2() {
        m.insert("rtt_ms".into(), json!(s.Rtt as f64 / 1e3));
        m.insert("min_rtt_ms".into(), json!(s.MinRtt as f64 / 1e3));
        m.insert("cwnd_bytes".into(), json!(s.SendCongestionWindow));
        m.insert("packets_sent".into(), json!(s.SendTotalPackets));
        m.insert("packets_received".into(), json!(s.RecvTotalPackets));
        m.insert("packets_lost".into(), json!(s.SendSuspectedLostPackets));
        m.insert("bytes_sent".into(), json!(s.SendTotalBytes));
        m.insert("bytes_received".into(), json!(s.RecvTotalBytes));
        m.insert("congestion_events".into(), json!(s.SendCongestionCount));
        m.insert("udp_payload_bytes".into(), json!(s.SendPathMtu.saturating_sub(28)));
    }
    m
}

/// One zero-copy send of `n` bytes from the static buffer; freed on SendComplete.
fn send_chunk(stream: &StreamRef, n: usize, fin: bool) -> bool {
    let bufs: Box<[BufferRef; 1]> = Box::new([BufferRef::from(&ZEROS[..n])]);
    let flags = if fin { SendFlags::FIN } else { SendFlags::NONE };
    let ok = unsafe { stream.send(bufs.as_slice(), flags, bufs.as_ref() as *const _ as *const c_void) }.is_ok();
    if ok {
        let _ = Box::into_raw(bufs);
    }
    ok
}

struct Sender {
    want: u64,
    queued: u64,
    in_flight: u64,
    request: Vec<u8>,
    started: Option<Instant>,
}

impl Sender {
    fn pump(&mut self, stream: &StreamRef) {
        while self.queued < self.want && self.in_flight < IN_FLIGHT {
            let n = (self.want - self.queued).min(CHUNK as u64) as usize;
            let fin = self.queued + n as u64 == self.want;
            if !send_chunk(stream, n, fin) {
                break;
            }
            self.queued += n as u64;
            self.in_flight += 1;
        }
    }
}

fn server(o: &Opts, reg: Registration, addr: SocketAddr, alpn: [BufferRef; 1]) {
    let config = Configuration::open(&reg, &alpn, Some(&settings(o))).unwrap_or_else(|e| fail(&format!("config: {e:?}")));
    let cred = CredentialConfig::new().set_credential(Credential::CertificateFile(CertificateFile::new(
        o.str("key", "key.pem"),
        o.str("cert", "cert.pem"),
    )));
    config.load_credential(&cred).unwrap_or_else(|e| fail(&format!("credential: {e:?}")));
    let config = Arc::new(config);
    let (done_tx, done_rx) = mpsc::channel::<Map<String, Value>>();
    let listener = Listener::open(&reg, move |_, ev| {
        if let ListenerEvent::NewConnection { connection, .. } = ev {
            let sender = Arc::new(Mutex::new(Sender { want: 0, queued: 0, in_flight: 0, request: Vec::new(), started: None }));
            let done_tx = done_tx.clone();
            let s2 = sender.clone();
            let stream_handler = move |stream: StreamRef, ev: StreamEvent| {
                let mut s = s2.lock().unwrap();
                match ev {
                    StreamEvent::Receive { buffers, .. } => {
                        for b in buffers {
                            s.request.extend_from_slice(b.as_bytes());
                        }
                        if s.request.len() >= 8 && s.started.is_none() {
                            s.want = u64::from_be_bytes(s.request[..8].try_into().unwrap());
                            s.started = Some(Instant::now());
                            s.pump(&stream);
                        }
                    }
                    StreamEvent::SendComplete { client_context, .. } => {
                        unsafe { drop(Box::from_raw(client_context as *mut [BufferRef; 1])) };
                        s.in_flight -= 1;
                        s.pump(&stream);
                    }
                    StreamEvent::ShutdownComplete { .. } => unsafe { drop(Stream::from_raw(stream.as_raw())) },
                    _ => {}
                }
                Ok(())
            };
            let conn_handler = move |conn: ConnectionRef, ev: ConnectionEvent| {
                match ev {
                    ConnectionEvent::PeerStreamStarted { stream, .. } => stream.set_callback_handler(stream_handler.clone()),
                    ConnectionEvent::ShutdownInitiatedByPeer { .. } | ConnectionEvent::ShutdownInitiatedByTransport { .. } => {
                        let s = sender.lock().unwrap();
                        let mut out = stats(&conn);
                        out.insert("role".into(), json!("server"));
                        out.insert("bytes".into(), json!(s.queued));
                        out.insert("transfer_s".into(), json!(s.started.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0)));
                        let _ = done_tx.send(out);
                    }
                    ConnectionEvent::ShutdownComplete { .. } => unsafe { drop(Connection::from_raw(conn.as_raw())) },
                    _ => {}
                }
                Ok(())
            };
            connection.set_callback_handler(conn_handler);
            connection.set_configuration(&config)?;
        }
        Ok(())
    })
    .unwrap_or_else(|e| fail(&format!("listener: {e:?}")));
    listener.start(&alpn, Some(&Addr::from(addr))).unwrap_or_else(|e| fail(&format!("listen {addr}: {e:?}")));
    let once = o.str("once", "false") == "true";
    while let Ok(out) = done_rx.recv() {
        emit(out);
        if once {
            break;
        }
    }
    listener.stop();
}

fn client(o: &Opts, reg: Registration, addr: SocketAddr, alpn: [BufferRef; 1]) {
    let config = Configuration::open(&reg, &alpn, Some(&settings(o))).unwrap_or_else(|e| fail(&format!("config: {e:?}")));
    // The self-signed test certificate is not validated (MsQuic's OpenSSL trust store
    // would need it installed); the other peers verify it.
    let cred = CredentialConfig::new_client().set_credential_flags(CredentialFlags::NO_CERTIFICATE_VALIDATION);
    config.load_credential(&cred).unwrap_or_else(|e| fail(&format!("credential: {e:?}")));
    let want = o.num("bytes");
    let (tx, rx) = mpsc::channel::<(&'static str, Instant)>();
    let tx2 = tx.clone();
    let stream_handler = move |stream: StreamRef, ev: StreamEvent| {
        match ev {
            StreamEvent::Receive { total_buffer_length, .. } => {
                RECEIVED.fetch_add(*total_buffer_length, Relaxed);
            }
            StreamEvent::PeerSendShutdown => {
                let _ = tx2.send(("fin", Instant::now()));
            }
            StreamEvent::SendComplete { client_context, .. } => unsafe {
                drop(Box::from_raw(client_context as *mut (Vec<u8>, Box<[BufferRef; 1]>)));
            },
            StreamEvent::ShutdownComplete { .. } => unsafe { drop(Stream::from_raw(stream.as_raw())) },
            _ => {}
        }
        Ok(())
    };
    let conn_handler = move |conn: ConnectionRef, ev: ConnectionEvent| {
        match ev {
            ConnectionEvent::Connected { .. } => {
                let _ = tx.send(("connected", Instant::now()));
                let s = Stream::open(&conn, StreamOpenFlags::NONE, stream_handler.clone())?;
                s.start(StreamStartFlags::NONE)?;
                let b = want.to_be_bytes().to_vec();
                let b_ref = Box::new([BufferRef::from(b.as_slice())]);
                let ctx = Box::new((b, b_ref));
                unsafe { s.send(ctx.1.as_slice(), SendFlags::FIN, ctx.as_ref() as *const _ as *const c_void) }?;
                let _ = Box::into_raw(ctx);
                unsafe { s.into_raw() };
            }
            ConnectionEvent::ShutdownInitiatedByTransport { .. }
            | ConnectionEvent::ShutdownInitiatedByPeer { .. } => {
                let _ = tx.send(("closed", Instant::now()));
            }
            _ => {}
        }
        Ok(())
    };
    let conn = Connection::open(&reg, conn_handler).unwrap_or_else(|e| fail(&format!("connection: {e:?}")));
    let t0 = Instant::now();
    conn.start(&config, &addr.ip().to_string(), addr.port()).unwrap_or_else(|e| fail(&format!("start: {e:?}")));
    let (event, t_conn) = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| fail("handshake timed out"));
    if event != "connected" {
        fail("connection closed during the handshake");
    }
    let (event, t_fin) = rx.recv().unwrap_or_else(|_| fail("connection ended"));
    let got = RECEIVED.load(Relaxed);
    let transfer = (t_fin - t_conn).as_secs_f64();
    let mut out = stats(&conn);
    out.insert("role".into(), json!("client"));
    out.insert("bytes".into(), json!(got));
    out.insert("handshake_ms".into(), json!((t_conn - t0).as_secs_f64() * 1e3));
    out.insert("transfer_s".into(), json!(transfer));
    out.insert("goodput_mbps".into(), json!(got as f64 * 8.0 / transfer / 1e6));
    if event != "fin" || got != want {
        out.insert("error".into(), json!(format!("received {got} of {want} bytes")));
    }
    emit(out);
    conn.shutdown(ConnectionShutdownFlags::NONE, 0);
    std::thread::sleep(Duration::from_millis(50));
}

fn main() {
    let o = Opts::parse();
    for (knob, default) in [("gso", "true"), ("gro", "true")] {
        if o.str(knob, default) != "true" {
            fail(&format!("{knob}=false not supported: MsQuic always uses it on Linux"));
        }
    }
    if o.str("cipher", "aes-ni") != "aes-ni" {
        fail("cipher: this MsQuic peer negotiates the TLS default (AES-GCM)");
    }
    let addr: SocketAddr = o.str("addr", "127.0.0.1:4433").parse().unwrap_or_else(|e| fail(&format!("addr: {e}")));
    let reg = Registration::new(&RegistrationConfig::default()).unwrap_or_else(|e| fail(&format!("registration: {e:?}")));
    let alpn = [BufferRef::from("perf")];
    match o.str("role", "client").as_str() {
        "server" => server(&o, reg, addr, alpn),
        "client" => client(&o, reg, addr, alpn),
        r => fail(&format!("role={r}: allowed server | client")),
    }
    // MsQuic's worker threads can hang at teardown; the result is printed, so leave now.
    std::process::exit(0);
}
