//! quiclab's perf peer for s2n-quic.
//!
//! Protocol (draft-banks-quic-performance): the client opens one bidirectional
//! stream, sends the number of bytes it wants as an 8-byte big-endian integer
//! and finishes its side; the server answers with that many bytes. Each side
//! prints one JSON line; counters come from an s2n-quic event subscriber
//! (packets sent/lost, recovery metrics, platform send/receive system calls).
//!
//! Arguments are `--name=value` (the same set for every quiclab peer).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use s2n_quic::provider::congestion_controller::{bbr, cubic};
use s2n_quic::provider::event::{events, ConnectionInfo, ConnectionMeta, Subscriber};
use s2n_quic::provider::io::tokio::Builder as IoBuilder;
use s2n_quic::provider::limits::Limits;
use s2n_quic::{client::Connect, Client, Server};
use serde_json::{json, Map, Value};

static PACKETS_SENT: AtomicU64 = AtomicU64::new(0);
static PACKETS_RECEIVED: AtomicU64 = AtomicU64::new(0);
static PACKETS_LOST: AtomicU64 = AtomicU64::new(0);
static BYTES_LOST: AtomicU64 = AtomicU64::new(0);
static CWND: AtomicU64 = AtomicU64::new(0);
static SRTT_NS: AtomicU64 = AtomicU64::new(0);
static MIN_RTT_NS: AtomicU64 = AtomicU64::new(0);
static TX_DATAGRAMS: AtomicU64 = AtomicU64::new(0);
static TX_CALLS: AtomicU64 = AtomicU64::new(0);
static RX_DATAGRAMS: AtomicU64 = AtomicU64::new(0);
static RX_CALLS: AtomicU64 = AtomicU64::new(0);
static MTU: AtomicU64 = AtomicU64::new(0);

/// Counts what the harness wants into process-wide atomics (one connection per run).
struct Counters;

impl Subscriber for Counters {
    type ConnectionContext = ();
    fn create_connection_context(&mut self, _: &ConnectionMeta, _: &ConnectionInfo) {}
    fn on_packet_sent(&mut self, _: &mut (), _: &ConnectionMeta, _: &events::PacketSent) {
        PACKETS_SENT.fetch_add(1, Relaxed);
    }
    fn on_packet_received(&mut self, _: &mut (), _: &ConnectionMeta, _: &events::PacketReceived) {
        PACKETS_RECEIVED.fetch_add(1, Relaxed);
    }
    fn on_packet_lost(&mut self, _: &mut (), _: &ConnectionMeta, e: &events::PacketLost) {
        PACKETS_LOST.fetch_add(1, Relaxed);
        BYTES_LOST.fetch_add(e.bytes_lost as u64, Relaxed);
    }
    fn on_recovery_metrics(&mut self, _: &mut (), _: &ConnectionMeta, e: &events::RecoveryMetrics) {
        CWND.store(e.congestion_window as u64, Relaxed);
        SRTT_NS.store(e.smoothed_rtt.as_nanos() as u64, Relaxed);
        MIN_RTT_NS.store(e.min_rtt.as_nanos() as u64, Relaxed);
    }
    fn on_mtu_updated(&mut self, _: &mut (), _: &ConnectionMeta, e: &events::MtuUpdated) {
        MTU.store(e.mtu as u64, Relaxed);
    }
    fn on_platform_tx(&mut self, _: &events::EndpointMeta, e: &events::PlatformTx) {
        TX_DATAGRAMS.fetch_add(e.count as u64, Relaxed);
        TX_CALLS.fetch_add(e.syscalls as u64, Relaxed);
    }
    fn on_platform_rx(&mut self, _: &events::EndpointMeta, e: &events::PlatformRx) {
        RX_DATAGRAMS.fetch_add(e.count as u64, Relaxed);
        RX_CALLS.fetch_add(e.syscalls as u64, Relaxed);
    }
}

fn counters() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("packets_sent".into(), json!(PACKETS_SENT.load(Relaxed)));
    m.insert("packets_received".into(), json!(PACKETS_RECEIVED.load(Relaxed)));
    m.insert("packets_lost".into(), json!(PACKETS_LOST.load(Relaxed)));
    m.insert("bytes_lost".into(), json!(BYTES_LOST.load(Relaxed)));
    m.insert("cwnd_bytes".into(), json!(CWND.load(Relaxed)));
    m.insert("rtt_ms".into(), json!(SRTT_NS.load(Relaxed) as f64 / 1e6));
    m.insert("min_rtt_ms".into(), json!(MIN_RTT_NS.load(Relaxed) as f64 / 1e6));
    m.insert("datagrams_sent".into(), json!(TX_DATAGRAMS.load(Relaxed)));
    m.insert("send_calls".into(), json!(TX_CALLS.load(Relaxed)));
    m.insert("datagrams_received".into(), json!(RX_DATAGRAMS.load(Relaxed)));
    m.insert("recv_calls".into(), json!(RX_CALLS.load(Relaxed)));
    // MtuUpdated reports the largest QUIC datagram: the UDP payload.
    let mtu = MTU.load(Relaxed);
    if mtu > 0 {
        m.insert("udp_payload_bytes".into(), json!(mtu));
    }
    m
}

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

fn fail(msg: &str) -> ! {
    println!("{}", json!({"stack": "s2n-quic", "error": msg}));
    std::process::exit(1)
}

fn emit(mut fields: Map<String, Value>) {
    fields.insert("stack".into(), json!("s2n-quic"));
    fields.insert("app".into(), json!("perf"));
    println!("{}", Value::Object(fields));
}

fn io(o: &Opts, addr: SocketAddr) -> s2n_quic::provider::io::tokio::Provider {
    let mut b = IoBuilder::default().with_receive_address(addr).unwrap_or_else(|e| fail(&format!("addr: {e}")));
    b = b.with_gso(o.flag("gso", true)).unwrap();
    b = b.with_gro(o.flag("gro", true)).unwrap();
    let payload = o.num("max-udp-payload");
    if payload > 0 {
        // s2n-quic speaks IP MTU: UDP payload + 8 (UDP) + 20 (IPv4).
        let mtu = (payload + 28) as u16;
        b = b.with_max_mtu(mtu).unwrap_or_else(|e| fail(&format!("max-udp-payload: {e}")));
        b = b.with_initial_mtu(mtu).unwrap_or_else(|e| fail(&format!("max-udp-payload: {e}")));
    }
    let rb = o.num("rcvbuf");
    if rb > 0 {
        b = b.with_recv_buffer_size(rb as usize).unwrap();
    }
    let sb = o.num("sndbuf");
    if sb > 0 {
        b = b.with_send_buffer_size(sb as usize).unwrap();
    }
    b.build().unwrap_or_else(|e| fail(&format!("io: {e}")))
}

fn limits(o: &Opts) -> Limits {
    let mut l = Limits::new().with_max_idle_timeout(Duration::from_secs(30)).unwrap();
    let sw = o.num("stream-window");
    if sw > 0 {
        l = l
            .with_bidirectional_local_data_window(sw).unwrap_or_else(|e| fail(&format!("stream-window: {e}")))
            .with_bidirectional_remote_data_window(sw).unwrap_or_else(|e| fail(&format!("stream-window: {e}")));
    }
    let cw = o.num("conn-window");
    if cw > 0 {
        l = l.with_data_window(cw).unwrap_or_else(|e| fail(&format!("conn-window: {e}")));
    }
    l
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let o = Opts::parse();
    match o.str("cipher", "aes-ni").as_str() {
        "aes-ni" | "" => {}
        c => fail(&format!("cipher={c} not supported: this s2n-quic peer uses s2n-tls defaults (AES-GCM)")),
    }
    if o.0.contains_key("qlog") {
        fail("qlog not supported by s2n-quic");
    }
    let addr: SocketAddr = o.str("addr", "127.0.0.1:4433").parse().unwrap_or_else(|e| fail(&format!("addr: {e}")));
    let cc = o.str("cc", "cubic");
    if cc != "cubic" && cc != "bbr" {
        fail(&format!("cc={cc} not supported: s2n-quic offers cubic | bbr"));
    }
    match o.str("role", "client").as_str() {
        "server" => server(&o, addr, &cc).await,
        "client" => client(&o, addr, &cc).await,
        r => fail(&format!("role={r}: allowed server | client")),
    }
}

async fn server(o: &Opts, addr: SocketAddr, cc: &str) {
    let tls = s2n_quic::provider::tls::default::Server::builder()
        .with_certificate(Path::new(&o.str("cert", "cert.pem")), Path::new(&o.str("key", "key.pem")))
        .and_then(|b| b.with_application_protocols(["perf"]))
        .and_then(|b| b.build())
        .unwrap_or_else(|e| fail(&format!("tls: {e}")));
    let builder = Server::builder()
        .with_tls(tls).unwrap()
        .with_io(io(o, addr)).unwrap()
        .with_limits(limits(o)).unwrap()
        .with_event(Counters).unwrap();
    let mut server = if cc == "bbr" {
        builder.with_congestion_controller(bbr::Builder::default().build()).unwrap().start()
    } else {
        builder.with_congestion_controller(cubic::Builder::default().build()).unwrap().start()
    }
    .unwrap_or_else(|e| fail(&format!("start: {e}")));
    let once = o.flag("once", false);
    while let Some(conn) = server.accept().await {
        let h = tokio::spawn(serve(conn));
        if once {
            let _ = h.await;
            break;
        }
    }
}

async fn serve(mut conn: s2n_quic::Connection) {
    let mut out = Map::new();
    out.insert("role".into(), json!("server"));
    let start = Instant::now();
    let mut sent: u64 = 0;
    match conn.accept_bidirectional_stream().await {
        Ok(Some(mut stream)) => {
            let mut req = Vec::new();
            while req.len() < 8 {
                match stream.receive().await {
                    Ok(Some(chunk)) => req.extend_from_slice(&chunk),
                    Ok(None) => break,
                    Err(e) => {
                        out.insert("error".into(), json!(format!("read request: {e}")));
                        break;
                    }
                }
            }
            if req.len() >= 8 {
                let want = u64::from_be_bytes(req[..8].try_into().unwrap());
                let chunk = bytes::Bytes::from(vec![0u8; 64 * 1024]);
                while sent < want {
                    let n = std::cmp::min(chunk.len() as u64, want - sent) as usize;
                    if let Err(e) = stream.send(chunk.slice(..n)).await {
                        out.insert("error".into(), json!(format!("write: {e}")));
                        break;
                    }
                    sent += n as u64;
                }
                let _ = stream.finish();
                // Wait for the client to close the connection once it has every byte.
                let _ = tokio::time::timeout(Duration::from_secs(60), async {
                    while let Ok(Some(_)) = conn.accept_bidirectional_stream().await {}
                })
                .await;
            }
        }
        Ok(None) => {
            out.insert("error".into(), json!("connection closed before a stream"));
        }
        Err(e) => {
            out.insert("error".into(), json!(format!("accept stream: {e}")));
        }
    }
    out.extend(counters());
    out.insert("bytes".into(), json!(sent));
    out.insert("transfer_s".into(), json!(start.elapsed().as_secs_f64()));
    emit(out);
}

async fn client(o: &Opts, addr: SocketAddr, cc: &str) {
    let tls = s2n_quic::provider::tls::default::Client::builder()
        .with_certificate(Path::new(&o.str("ca", "cert.pem")))
        .and_then(|b| b.with_application_protocols(["perf"]))
        .and_then(|b| b.build())
        .unwrap_or_else(|e| fail(&format!("tls: {e}")));
    let bind: SocketAddr = if addr.is_ipv4() { "0.0.0.0:0".parse().unwrap() } else { "[::]:0".parse().unwrap() };
    let builder = Client::builder()
        .with_tls(tls).unwrap()
        .with_io(io(o, bind)).unwrap()
        .with_limits(limits(o)).unwrap()
        .with_event(Counters).unwrap();
    let client = if cc == "bbr" {
        builder.with_congestion_controller(bbr::Builder::default().build()).unwrap().start()
    } else {
        builder.with_congestion_controller(cubic::Builder::default().build()).unwrap().start()
    }
    .unwrap_or_else(|e| fail(&format!("start: {e}")));
    let want = o.num("bytes");
    let t0 = Instant::now();
    let connect = Connect::new(addr).with_server_name(o.str("server-name", "quiclab").as_str());
    let mut conn = client.connect(connect).await.unwrap_or_else(|e| fail(&format!("handshake: {e}")));
    let handshake = t0.elapsed();
    let mut stream = conn.open_bidirectional_stream().await.unwrap_or_else(|e| fail(&format!("open stream: {e}")));
    let t_req = Instant::now();
    stream
        .send(bytes::Bytes::copy_from_slice(&want.to_be_bytes()))
        .await
        .unwrap_or_else(|e| fail(&format!("send request: {e}")));
    let _ = stream.finish();
    let mut got: u64 = 0;
    loop {
        match stream.receive().await {
            Ok(Some(chunk)) => got += chunk.len() as u64,
            Ok(None) => break,
            Err(e) => fail(&format!("read after {got} bytes: {e}")),
        }
    }
    let transfer = t_req.elapsed().as_secs_f64();
    conn.close(0u32.into());
    let mut out = counters();
    out.insert("role".into(), json!("client"));
    out.insert("bytes".into(), json!(got));
    out.insert("handshake_ms".into(), json!(handshake.as_secs_f64() * 1e3));
    out.insert("transfer_s".into(), json!(transfer));
    out.insert("goodput_mbps".into(), json!(got as f64 * 8.0 / transfer / 1e6));
    if got != want {
        out.insert("error".into(), json!(format!("received {got} of {want} bytes")));
    }
    emit(out);
    // Let the CONNECTION_CLOSE leave before the process exits.
    tokio::time::sleep(Duration::from_millis(50)).await;
}
