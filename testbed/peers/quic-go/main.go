// Command quiclab-quic-go is quiclab's perf peer for quic-go.
//
// Protocol (draft-banks-quic-performance): the client opens one bidirectional
// stream, sends the number of bytes it wants as an 8-byte big-endian integer
// and closes its side; the server answers with that many bytes and closes.
// Each side prints one JSON line with what quic-go can tell about the
// connection (ConnectionStats: RTT, cwnd, packets, losses).
//
// Request mode, with --requests=N: a request is one stream of the
// same protocol (8-byte size, then that many bytes). The client issues N
// requests of --bytes each over --connections connections with --streams
// concurrent streams each, or, with --new-connection=true, opens a new
// connection per request (--connections of them at a time); it reports
// requests/s and latency percentiles. The server answers every stream of every
// connection and exits after N requests.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"
)

type options struct {
	role          string
	addr          string
	bytes         uint64
	cert, key     string
	ca            string
	serverName    string
	gso           bool
	maxUDPPayload int
	streamWindow  uint64
	connWindow    uint64
	rcvbuf        int
	sndbuf        int
	qlogDir       string
	cc            string
	once          bool
	requests      int
	connections   int
	streams       int
	newConn       bool
}

func fail(format string, args ...any) {
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{
		"stack": "quic-go", "error": fmt.Sprintf(format, args...)})
	os.Exit(1)
}

func main() {
	var o options
	flag.StringVar(&o.role, "role", "client", "server or client")
	flag.StringVar(&o.addr, "addr", "127.0.0.1:4433", "listen (server) or connect (client) address")
	flag.Uint64Var(&o.bytes, "bytes", 1<<20, "bytes the client requests")
	flag.StringVar(&o.cert, "cert", "", "PEM certificate (server)")
	flag.StringVar(&o.key, "key", "", "PEM private key (server)")
	flag.StringVar(&o.ca, "ca", "", "PEM certificate the client trusts (empty = skip verification)")
	flag.StringVar(&o.serverName, "server-name", "quiclab", "TLS server name the client asks for")
	flag.BoolVar(&o.gso, "gso", true, "use UDP GSO (QUIC_GO_DISABLE_GSO when false)")
	flag.IntVar(&o.maxUDPPayload, "max-udp-payload", 0, "initial UDP payload in bytes, PMTUD off (0 = stack default)")
	flag.Uint64Var(&o.streamWindow, "stream-window", 0, "max stream receive window in bytes (0 = default)")
	flag.Uint64Var(&o.connWindow, "conn-window", 0, "max connection receive window in bytes (0 = default)")
	flag.IntVar(&o.rcvbuf, "rcvbuf", 0, "SO_RCVBUF in bytes (0 = let quic-go choose)")
	flag.IntVar(&o.sndbuf, "sndbuf", 0, "SO_SNDBUF in bytes (0 = let quic-go choose)")
	flag.StringVar(&o.qlogDir, "qlog", "", "write qlog files to this directory")
	flag.StringVar(&o.cc, "cc", "reno", "congestion control (quic-go runs Reno only, with beta 0.7)")
	flag.BoolVar(&o.once, "once", false, "server: exit after one connection")
	flag.IntVar(&o.requests, "requests", 0, "request mode: requests to issue (client) or serve before exiting (server); 0 = one bulk transfer")
	flag.IntVar(&o.connections, "connections", 1, "client, request mode: concurrent connections")
	flag.IntVar(&o.streams, "streams", 1, "client, request mode: concurrent streams per connection")
	flag.BoolVar(&o.newConn, "new-connection", false, "client, request mode: a new connection per request")
	flag.Parse()
	if o.cc != "reno" {
		// internal/ackhandler/sent_packet_handler.go: NewCubicSender(..., true /* use Reno */).
		fail("cc=%s not supported: quic-go runs Reno (its sent-packet handler hard-codes it, beta 0.7)", o.cc)
	}
	if !o.gso {
		// Read by quic-go when it first opens a socket.
		_ = os.Setenv("QUIC_GO_DISABLE_GSO", "true")
	}
	if o.qlogDir != "" {
		_ = os.Setenv("QLOGDIR", o.qlogDir)
	}
	switch {
	case o.role == "server" && o.requests > 0:
		requestServer(o)
	case o.role == "client" && o.requests > 0:
		requestClient(o)
	case o.role == "server":
		server(o)
	case o.role == "client":
		client(o)
	default:
		fail("role=%q: allowed server | client", o.role)
	}
}

func config(o options) *quic.Config {
	c := &quic.Config{MaxIdleTimeout: 30 * time.Second}
	if o.streams > 100 {
		c.MaxIncomingStreams = int64(o.streams)
	}
	if o.maxUDPPayload > 0 {
		c.InitialPacketSize = uint16(o.maxUDPPayload)
		c.DisablePathMTUDiscovery = true
	}
	if o.streamWindow > 0 {
		c.InitialStreamReceiveWindow = o.streamWindow
		c.MaxStreamReceiveWindow = o.streamWindow
	}
	if o.connWindow > 0 {
		c.InitialConnectionReceiveWindow = o.connWindow
		c.MaxConnectionReceiveWindow = o.connWindow
	}
	if o.qlogDir != "" {
		c.Tracer = qlog.DefaultConnectionTracer
	}
	return c
}

func transport(o options, addr string) *quic.Transport {
	udpAddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		fail("resolve %s: %v", addr, err)
	}
	conn, err := net.ListenUDP("udp", udpAddr)
	if err != nil {
		fail("listen %s: %v", addr, err)
	}
	if o.rcvbuf > 0 {
		_ = conn.SetReadBuffer(o.rcvbuf)
	}
	if o.sndbuf > 0 {
		_ = conn.SetWriteBuffer(o.sndbuf)
	}
	return &quic.Transport{Conn: conn}
}

func stats(c *quic.Conn) map[string]any {
	s := c.ConnectionStats()
	return map[string]any{
		"rtt_ms":           float64(s.SmoothedRTT) / 1e6,
		"min_rtt_ms":       float64(s.MinRTT) / 1e6,
		"cwnd_bytes":       s.CongestionWindow,
		"packets_sent":     s.PacketsSent,
		"packets_received": s.PacketsReceived,
		"packets_lost":     s.PacketsLost,
		"bytes_sent":       s.BytesSent,
		"bytes_received":   s.BytesReceived,
		"bytes_lost":       s.BytesLost,
	}
}

func emit(fields map[string]any) {
	fields["stack"] = "quic-go"
	fields["app"] = "perf"
	_ = json.NewEncoder(os.Stdout).Encode(fields)
}

func server(o options) {
	cert, err := tls.LoadX509KeyPair(o.cert, o.key)
	if err != nil {
		fail("load certificate: %v", err)
	}
	tlsConf := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"perf"}}
	ln, err := transport(o, o.addr).Listen(tlsConf, config(o))
	if err != nil {
		fail("listen: %v", err)
	}
	for {
		conn, err := ln.Accept(context.Background())
		if err != nil {
			fail("accept: %v", err)
		}
		if o.once {
			serve(conn)
			return
		}
		go serve(conn)
	}
}

func serve(conn *quic.Conn) {
	out := map[string]any{"role": "server"}
	str, err := conn.AcceptStream(context.Background())
	if err != nil {
		out["error"] = fmt.Sprintf("accept stream: %v", err)
		emit(out)
		return
	}
	var req [8]byte
	if _, err := io.ReadFull(str, req[:]); err != nil {
		out["error"] = fmt.Sprintf("read request: %v", err)
		emit(out)
		return
	}
	want := binary.BigEndian.Uint64(req[:])
	buf := make([]byte, 64*1024)
	start := time.Now()
	var sent uint64
	for sent < want {
		n := uint64(len(buf))
		if want-sent < n {
			n = want - sent
		}
		w, err := str.Write(buf[:n])
		sent += uint64(w)
		if err != nil {
			out["error"] = fmt.Sprintf("write: %v", err)
			break
		}
	}
	_ = str.Close()
	// The client closes the connection once it has every byte.
	select {
	case <-conn.Context().Done():
	case <-time.After(60 * time.Second):
	}
	elapsed := time.Since(start).Seconds()
	for k, v := range stats(conn) {
		out[k] = v
	}
	out["bytes"] = sent
	out["transfer_s"] = elapsed
	out["max_udp_payload_bytes"] = 1452
	emit(out)
}

func client(o options) {
	tlsConf := &tls.Config{ServerName: o.serverName, NextProtos: []string{"perf"}}
	if o.ca == "" {
		tlsConf.InsecureSkipVerify = true
	} else {
		pem, err := os.ReadFile(o.ca)
		if err != nil {
			fail("read ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fail("ca %s: no PEM certificate", o.ca)
		}
		tlsConf.RootCAs = pool
	}
	tr := transport(o, "0.0.0.0:0")
	remote, err := net.ResolveUDPAddr("udp", o.addr)
	if err != nil {
		fail("resolve %s: %v", o.addr, err)
	}
	t0 := time.Now()
	conn, err := tr.Dial(context.Background(), remote, tlsConf, config(o))
	if err != nil {
		fail("dial %s: %v", o.addr, err)
	}
	handshake := time.Since(t0)
	str, err := conn.OpenStreamSync(context.Background())
	if err != nil {
		fail("open stream: %v", err)
	}
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], o.bytes)
	tReq := time.Now()
	if _, err := str.Write(req[:]); err != nil {
		fail("send request: %v", err)
	}
	_ = str.Close()
	buf := make([]byte, 64*1024)
	var got uint64
	for {
		n, err := str.Read(buf)
		got += uint64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			fail("read after %d bytes: %v", got, err)
		}
	}
	transfer := time.Since(tReq).Seconds()
	out := stats(conn)
	_ = conn.CloseWithError(0, "done")
	out["role"] = "client"
	out["bytes"] = got
	out["handshake_ms"] = float64(handshake) / 1e6
	out["transfer_s"] = transfer
	out["goodput_mbps"] = float64(got) * 8 / transfer / 1e6
	if got != o.bytes {
		out["error"] = fmt.Sprintf("received %d of %d bytes", got, o.bytes)
	}
	emit(out)
	// Let the CONNECTION_CLOSE leave before the process exits.
	time.Sleep(50 * time.Millisecond)
}

// ---------------------------------------------------------------- request mode

func serverTLS(o options) *tls.Config {
	cert, err := tls.LoadX509KeyPair(o.cert, o.key)
	if err != nil {
		fail("load certificate: %v", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"perf"}}
}

func clientTLS(o options) *tls.Config {
	conf := &tls.Config{ServerName: o.serverName, NextProtos: []string{"perf"}}
	if o.ca == "" {
		conf.InsecureSkipVerify = true
		return conf
	}
	pem, err := os.ReadFile(o.ca)
	if err != nil {
		fail("read ca: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		fail("ca %s: no PEM certificate", o.ca)
	}
	conf.RootCAs = pool
	return conf
}

// answer serves one request stream: read the 8-byte size, send that many bytes.
func answer(str *quic.Stream, buf []byte) (uint64, error) {
	var req [8]byte
	if _, err := io.ReadFull(str, req[:]); err != nil {
		return 0, err
	}
	// The client ends its side after the size: read up to that FIN so the stream
	// is complete in both directions once the response is sent, and its credit
	// (MAX_STREAMS) returns to the client.
	if _, err := io.Copy(io.Discard, str); err != nil {
		return 0, err
	}
	want := binary.BigEndian.Uint64(req[:])
	var sent uint64
	for sent < want {
		n := uint64(len(buf))
		if want-sent < n {
			n = want - sent
		}
		w, err := str.Write(buf[:n])
		sent += uint64(w)
		if err != nil {
			return sent, err
		}
	}
	return sent, str.Close()
}

// sumStats adds up the packet counters of several connections (request mode).
func sumStats(conns []*quic.Conn) map[string]any {
	var sent, received, lost, bytesLost uint64
	for _, c := range conns {
		s := c.ConnectionStats()
		sent += s.PacketsSent
		received += s.PacketsReceived
		lost += s.PacketsLost
		bytesLost += s.BytesLost
	}
	return map[string]any{"packets_sent": sent, "packets_received": received,
		"packets_lost": lost, "bytes_lost": bytesLost}
}

func requestServer(o options) {
	ln, err := transport(o, o.addr).Listen(serverTLS(o), config(o))
	if err != nil {
		fail("listen: %v", err)
	}
	var served, bytes, failed atomic.Int64
	var mu sync.Mutex
	var conns []*quic.Conn
	done := make(chan struct{})
	var once sync.Once
	start := time.Now()
	go func() {
		for {
			conn, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			go func(conn *quic.Conn) {
				for {
					str, err := conn.AcceptStream(context.Background())
					if err != nil {
						return
					}
					go func() {
						n, err := answer(str, make([]byte, 32*1024))
						bytes.Add(int64(n))
						if err != nil {
							failed.Add(1)
						}
						if served.Add(1) >= int64(o.requests) {
							once.Do(func() { close(done) })
						}
					}()
				}
			}(conn)
		}
	}()
	<-done
	// Let the last responses and the clients' CONNECTION_CLOSEs arrive.
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	out := sumStats(conns)
	out["connections"] = len(conns)
	mu.Unlock()
	out["role"] = "server"
	out["requests"] = served.Load()
	out["bytes"] = bytes.Load()
	out["transfer_s"] = time.Since(start).Seconds()
	out["max_udp_payload_bytes"] = 1452
	if f := failed.Load(); f > 0 {
		out["error"] = fmt.Sprintf("%d of %d requests failed", f, served.Load())
	}
	emit(out)
}

// fetch issues one request on conn and reads the whole response.
func fetch(conn *quic.Conn, size uint64, buf []byte) (uint64, error) {
	str, err := conn.OpenStreamSync(context.Background())
	if err != nil {
		return 0, err
	}
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], size)
	if _, err := str.Write(req[:]); err != nil {
		return 0, err
	}
	_ = str.Close()
	var got uint64
	for {
		n, err := str.Read(buf)
		got += uint64(n)
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, err
		}
	}
}

// percentile is the nearest-rank percentile (q in 0..1) of sorted latencies.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// requestClient issues o.requests requests of o.bytes: on o.connections connections
// with o.streams streams each, or (o.newConn) one new connection per request with
// o.connections of them at a time. Latency is per request, from opening its stream
// (or dialing its connection) to the response's last byte.
func requestClient(o options) {
	tr := transport(o, "0.0.0.0:0")
	remote, err := net.ResolveUDPAddr("udp", o.addr)
	if err != nil {
		fail("resolve %s: %v", o.addr, err)
	}
	tlsConf := clientTLS(o)
	var issued, ok, failures atomic.Int64
	var got atomic.Uint64
	var mu sync.Mutex
	var latencies, handshakes []float64
	var conns []*quic.Conn
	var firstErr atomic.Value
	take := func() bool { return issued.Add(1) <= int64(o.requests) }
	keep := func(lat, hs []float64, conn *quic.Conn) {
		mu.Lock()
		latencies = append(latencies, lat...)
		handshakes = append(handshakes, hs...)
		if conn != nil {
			conns = append(conns, conn)
		}
		mu.Unlock()
	}
	bad := func(err error) {
		failures.Add(1)
		firstErr.CompareAndSwap(nil, err.Error())
	}
	// one runs a request on conn and records its latency since t0.
	one := func(conn *quic.Conn, t0 time.Time, buf []byte, lat *[]float64) {
		n, err := fetch(conn, o.bytes, buf)
		got.Add(n)
		if err != nil || n != o.bytes {
			bad(fmt.Errorf("request: %v (%d of %d bytes)", err, n, o.bytes))
			return
		}
		ok.Add(1)
		*lat = append(*lat, float64(time.Since(t0))/1e6)
	}
	dial := func() (*quic.Conn, float64, error) {
		t0 := time.Now()
		conn, err := tr.Dial(context.Background(), remote, tlsConf, config(o))
		return conn, float64(time.Since(t0)) / 1e6, err
	}
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < o.connections; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64*1024)
			if o.newConn {
				var lat, hs []float64
				for take() {
					t0 := time.Now()
					conn, ms, err := dial()
					if err != nil {
						bad(fmt.Errorf("dial: %v", err))
						continue
					}
					hs = append(hs, ms)
					one(conn, t0, buf, &lat)
					_ = conn.CloseWithError(0, "done")
					keep(nil, nil, conn)
				}
				keep(lat, hs, nil)
				return
			}
			conn, ms, err := dial()
			if err != nil {
				bad(fmt.Errorf("dial: %v", err))
				return
			}
			keep(nil, []float64{ms}, conn)
			var inner sync.WaitGroup
			for k := 0; k < o.streams; k++ {
				inner.Add(1)
				go func() {
					defer inner.Done()
					buf := make([]byte, 64*1024)
					var lat []float64
					for take() {
						one(conn, time.Now(), buf, &lat)
					}
					keep(lat, nil, nil)
				}()
			}
			inner.Wait()
			_ = conn.CloseWithError(0, "done")
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	sort.Float64s(latencies)
	var hsSum float64
	for _, h := range handshakes {
		hsSum += h
	}
	done := ok.Load()
	out := sumStats(conns)
	for k, v := range map[string]any{"role": "client", "requests": done, "bytes": got.Load(),
		"transfer_s": elapsed, "requests_per_s": float64(done) / elapsed,
		"goodput_mbps":   float64(got.Load()) * 8 / elapsed / 1e6,
		"latency_p50_ms": percentile(latencies, 0.50), "latency_p90_ms": percentile(latencies, 0.90),
		"latency_p99_ms": percentile(latencies, 0.99), "connections_opened": len(handshakes),
		"request_bytes": o.bytes, "new_connection": o.newConn} {
		out[k] = v
	}
	if len(handshakes) > 0 {
		out["handshake_ms"] = hsSum / float64(len(handshakes))
	}
	if f := failures.Load(); f > 0 {
		out["error"] = fmt.Sprintf("%d of %d requests failed: %v", f, o.requests, firstErr.Load())
	}
	emit(out)
	time.Sleep(50 * time.Millisecond)
}
