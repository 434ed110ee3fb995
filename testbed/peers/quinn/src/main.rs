//! quiclab's perf peer for quinn.
//!
//! Protocol (draft-banks-quic-performance): the client opens one bidirectional
//! stream, sends the number of bytes it wants as an 8-byte big-endian integer
//! and finishes its side; the server answers with that many bytes. Each side
//! prints one JSON line with quinn's connection statistics.
//!
//! Arguments are `--name=value` (the same set for every quiclab peer); a knob
//! quinn cannot honour is refused with one JSON error line.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::congestion::{BbrConfig, CubicConfig, NewRenoConfig};
use quinn::{EndpointConfig, TransportConfig, VarInt};
use rustls::crypto::{ring as ring_provider, CryptoProvider};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Map, Value};

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
                let v = args.next().unwrap_or_else(|| "true".into());
                map.insert(body.to_string(), v);
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

/// The qlog file's buffered writer, shared with quinn's QlogStreamer so that it can be
/// flushed before the process reports and exits (the streamer is never dropped).
#[derive(Clone)]
struct QlogFile(Arc<std::sync::Mutex<std::io::BufWriter<std::fs::File>>>);

impl std::io::Write for QlogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.lock().unwrap().flush()
    }
}

static QLOG: std::sync::OnceLock<QlogFile> = std::sync::OnceLock::new();

fn flush_qlog() {
    if let Some(f) = QLOG.get() {
        let _ = std::io::Write::flush(&mut f.clone());
    }
}

fn fail(msg: &str) -> ! {
    flush_qlog();
    println!("{}", json!({"stack": "quinn", "error": msg}));
    std::process::exit(1)
}

fn emit(mut fields: Map<String, Value>) {
    flush_qlog();
    fields.insert("stack".into(), json!("quinn"));
    fields.insert("app".into(), json!("perf"));
    println!("{}", Value::Object(fields));
}

fn provider(cipher: &str) -> CryptoProvider {
    let mut p = ring_provider::default_provider();
    let wanted = match cipher {
        "aes-ni" | "aes128gcm" | "" => ring_provider::cipher_suite::TLS13_AES_128_GCM_SHA256,
        "aes256gcm" => ring_provider::cipher_suite::TLS13_AES_256_GCM_SHA384,
        "chacha20" => ring_provider::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        other => fail(&format!("cipher={other} not supported: quinn (ring) offers aes-ni, aes256gcm, chacha20")),
    };
    p.cipher_suites = vec![wanted];
    p
}

fn initial_suite() -> rustls::quic::Suite {
    ring_provider::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .and_then(|s| s.quic_suite())
        .expect("ring has AES-128-GCM for QUIC")
}

fn transport(o: &Opts) -> TransportConfig {
    let mut t = TransportConfig::default();
    t.max_idle_timeout(Some(VarInt::from_u32(30_000).into()));
    t.enable_segmentation_offload(o.flag("gso", true));
    let payload = o.num("max-udp-payload");
    if payload > 0 {
        // quinn needs both ends of its MTU range at the jumbo size, else PMTUD starts at 1200.
        t.initial_mtu(payload as u16);
        t.min_mtu(payload as u16);
        t.mtu_discovery_config(None);
    }
    let sw = o.num("stream-window");
    if sw > 0 {
        t.stream_receive_window(VarInt::from_u64(sw).unwrap());
    }
    let cw = o.num("conn-window");
    if cw > 0 {
        t.receive_window(VarInt::from_u64(cw).unwrap());
        t.send_window(cw);
    }
    match o.str("cc", "cubic").as_str() {
        "cubic" => { t.congestion_controller_factory(Arc::new(CubicConfig::default())); }
        "reno" => { t.congestion_controller_factory(Arc::new(NewRenoConfig::default())); }
        "bbr" => { t.congestion_controller_factory(Arc::new(BbrConfig::default())); }
        other => fail(&format!("cc={other}: allowed cubic | reno | bbr")),
    }
    let dir = o.str("qlog", "");
    if !dir.is_empty() {
        // quinn-proto's qlog feature (connection/qlog.rs): packet_sent/received/lost and
        // recovery metrics (cwnd, bytes in flight, RTTs) as JSON-SEQ, one file per side.
        let path = format!("{dir}/quinn-{}-{}.sqlog", o.str("role", "client"), std::process::id());
        let file = std::fs::File::create(&path).unwrap_or_else(|e| fail(&format!("qlog {path}: {e}")));
        let shared = QLOG.get_or_init(|| {
            QlogFile(Arc::new(std::sync::Mutex::new(std::io::BufWriter::with_capacity(1 << 20, file))))
        });
        let mut q = quinn::QlogConfig::default();
        q.writer(Box::new(shared.clone()))
            .title(Some(format!("quinn {}", o.str("role", "client"))));
        t.qlog_stream(q.into_stream());
    }
    t
}

fn socket(o: &Opts, addr: SocketAddr) -> std::net::UdpSocket {
    let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::DGRAM, None)
        .unwrap_or_else(|e| fail(&format!("socket: {e}")));
    let rb = o.num("rcvbuf");
    if rb > 0 {
        let _ = s.set_recv_buffer_size(rb as usize);
    }
    let sb = o.num("sndbuf");
    if sb > 0 {
        let _ = s.set_send_buffer_size(sb as usize);
    }
    s.bind(&addr.into()).unwrap_or_else(|e| fail(&format!("bind {addr}: {e}")));
    s.into()
}

fn endpoint_config(o: &Opts) -> EndpointConfig {
    let mut e = EndpointConfig::default();
    let payload = o.num("max-udp-payload");
    if payload > 0 {
        e.max_udp_payload_size(payload as u16).unwrap_or_else(|e| fail(&format!("max-udp-payload: {e}")));
    }
    e
}

fn stats(conn: &quinn::Connection) -> Map<String, Value> {
    let s = conn.stats();
    let mut m = Map::new();
    m.insert("rtt_ms".into(), json!(s.path.rtt.as_secs_f64() * 1e3));
    m.insert("cwnd_bytes".into(), json!(s.path.cwnd));
    m.insert("packets_sent".into(), json!(s.path.sent_packets));
    m.insert("packets_lost".into(), json!(s.path.lost_packets));
    m.insert("bytes_lost".into(), json!(s.path.lost_bytes));
    m.insert("congestion_events".into(), json!(s.path.congestion_events));
    m.insert("udp_payload_bytes".into(), json!(s.path.current_mtu));
    m.insert("datagrams_sent".into(), json!(s.udp_tx.datagrams));
    m.insert("datagrams_received".into(), json!(s.udp_rx.datagrams));
    m.insert("bytes_sent".into(), json!(s.udp_tx.bytes));
    m.insert("bytes_received".into(), json!(s.udp_rx.bytes));
    m.insert("send_calls".into(), json!(s.udp_tx.ios));
    m.insert("recv_calls".into(), json!(s.udp_rx.ios));
    m.insert("acks_sent".into(), json!(s.frame_tx.acks));
    m.insert("acks_received".into(), json!(s.frame_rx.acks));
    m
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let o = Opts::parse();
    if !o.flag("gro", true) {
        fail("gro=false not supported: quinn-udp always enables UDP_GRO where the kernel has it");
    }
    let addr: SocketAddr = o.str("addr", "127.0.0.1:4433").parse().unwrap_or_else(|e| fail(&format!("addr: {e}")));
    match o.str("role", "client").as_str() {
        "server" => server(&o, addr).await,
        "client" => client(&o, addr).await,
        r => fail(&format!("role={r}: allowed server | client")),
    }
}

async fn server(o: &Opts, addr: SocketAddr) {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(o.str("cert", "cert.pem"))
        .unwrap_or_else(|e| fail(&format!("cert: {e}")))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| fail(&format!("cert: {e}")));
    let key = PrivateKeyDer::from_pem_file(o.str("key", "key.pem")).unwrap_or_else(|e| fail(&format!("key: {e}")));
    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(provider(&o.str("cipher", ""))))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap_or_else(|e| fail(&format!("tls: {e}")));
    tls.alpn_protocols = vec![b"perf".to_vec()];
    tls.max_early_data_size = 0;
    let crypto = quinn::crypto::rustls::QuicServerConfig::with_initial(Arc::new(tls), initial_suite()).unwrap();
    let mut sc = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    sc.transport_config(Arc::new(transport(o)));
    let ep = quinn::Endpoint::new(endpoint_config(o), Some(sc), socket(o, addr), Arc::new(quinn::TokioRuntime))
        .unwrap_or_else(|e| fail(&format!("endpoint: {e}")));
    let once = o.flag("once", false);
    while let Some(incoming) = ep.accept().await {
        let h = tokio::spawn(serve(incoming));
        if once {
            let _ = h.await;
            break;
        }
    }
}

async fn serve(incoming: quinn::Incoming) {
    let mut out = Map::new();
    out.insert("role".into(), json!("server"));
    let conn = match incoming.await {
        Ok(c) => c,
        Err(e) => {
            out.insert("error".into(), json!(format!("handshake: {e}")));
            return emit(out);
        }
    };
    let start = Instant::now();
    let mut sent: u64 = 0;
    match conn.accept_bi().await {
        Ok((mut send, mut recv)) => {
            let mut req = [0u8; 8];
            if let Err(e) = recv.read_exact(&mut req).await {
                out.insert("error".into(), json!(format!("read request: {e}")));
            } else {
                let want = u64::from_be_bytes(req);
                let buf = vec![0u8; 64 * 1024];
                while sent < want {
                    let n = std::cmp::min(buf.len() as u64, want - sent) as usize;
                    match send.write(&buf[..n]).await {
                        Ok(w) => sent += w as u64,
                        Err(e) => {
                            out.insert("error".into(), json!(format!("write: {e}")));
                            break;
                        }
                    }
                }
                let _ = send.finish();
            }
        }
        Err(e) => {
            out.insert("error".into(), json!(format!("accept stream: {e}")));
        }
    }
    // The client closes the connection once it has every byte.
    let _ = tokio::time::timeout(Duration::from_secs(60), conn.closed()).await;
    out.extend(stats(&conn));
    out.insert("bytes".into(), json!(sent));
    out.insert("transfer_s".into(), json!(start.elapsed().as_secs_f64()));
    emit(out);
}

async fn client(o: &Opts, addr: SocketAddr) {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(o.str("ca", "cert.pem")).unwrap_or_else(|e| fail(&format!("ca: {e}"))) {
        roots.add(c.unwrap_or_else(|e| fail(&format!("ca: {e}")))).unwrap_or_else(|e| fail(&format!("ca: {e}")));
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(provider(&o.str("cipher", ""))))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"perf".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::with_initial(Arc::new(tls), initial_suite()).unwrap();
    let mut cc = quinn::ClientConfig::new(Arc::new(crypto));
    cc.transport_config(Arc::new(transport(o)));
    let bind: SocketAddr = if addr.is_ipv4() { "0.0.0.0:0".parse().unwrap() } else { "[::]:0".parse().unwrap() };
    let ep = quinn::Endpoint::new(endpoint_config(o), None, socket(o, bind), Arc::new(quinn::TokioRuntime))
        .unwrap_or_else(|e| fail(&format!("endpoint: {e}")));
    let want = o.num("bytes");
    let t0 = Instant::now();
    let conn = ep
        .connect_with(cc, addr, &o.str("server-name", "quiclab"))
        .unwrap_or_else(|e| fail(&format!("connect: {e}")))
        .await
        .unwrap_or_else(|e| fail(&format!("handshake: {e}")));
    let handshake = t0.elapsed();
    let (mut send, mut recv) = conn.open_bi().await.unwrap_or_else(|e| fail(&format!("open stream: {e}")));
    let t_req = Instant::now();
    send.write_all(&want.to_be_bytes()).await.unwrap_or_else(|e| fail(&format!("send request: {e}")));
    let _ = send.finish();
    let mut got: u64 = 0;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match recv.read(&mut buf).await {
            Ok(Some(n)) => got += n as u64,
            Ok(None) => break,
            Err(e) => fail(&format!("read after {got} bytes: {e}")),
        }
    }
    let transfer = t_req.elapsed().as_secs_f64();
    let mut out = stats(&conn);
    conn.close(VarInt::from_u32(0), b"done");
    out.insert("role".into(), json!("client"));
    out.insert("bytes".into(), json!(got));
    out.insert("handshake_ms".into(), json!(handshake.as_secs_f64() * 1e3));
    out.insert("transfer_s".into(), json!(transfer));
    out.insert("goodput_mbps".into(), json!(got as f64 * 8.0 / transfer / 1e6));
    if got != want {
        out.insert("error".into(), json!(format!("received {got} of {want} bytes")));
    }
    emit(out);
    ep.wait_idle().await;
}
