// Command xnet-quic-peer is quiclab's perf peer for Go's golang.org/x/net/quic.
//
// Protocol (draft-banks-quic-performance): the client opens one bidirectional
// stream, sends the number of bytes it wants as an 8-byte big-endian integer
// and closes its side; the server answers with that many bytes. Each side
// prints one JSON line. x/net/quic exposes no connection statistics, so the
// report has goodput and handshake time only. It sends 1200-byte packets (no
// PMTUD), uses NewReno, and has no GSO/GRO.
//
// Request mode, with --requests=N: one stream per request, as in
// the quic-go peer (--connections, --streams, --new-connection); the client
// reports requests/s and latency percentiles, the server exits after N requests.
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

	"golang.org/x/net/quic"
)

func fail(format string, args ...any) {
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{
		"stack": "x/net/quic", "error": fmt.Sprintf(format, args...)})
	os.Exit(1)
}

func emit(fields map[string]any) {
	fields["stack"] = "x/net/quic"
	fields["app"] = "perf"
	fields["udp_payload_bytes"] = 1200
	_ = json.NewEncoder(os.Stdout).Encode(fields)
}

func main() {
	role := flag.String("role", "client", "server or client")
	addr := flag.String("addr", "127.0.0.1:4433", "listen (server) or connect (client) address")
	want := flag.Uint64("bytes", 1<<20, "bytes the client requests")
	certFile := flag.String("cert", "", "PEM certificate (server)")
	keyFile := flag.String("key", "", "PEM private key (server)")
	caFile := flag.String("ca", "", "PEM certificate the client trusts (empty = skip verification)")
	serverName := flag.String("server-name", "quiclab", "TLS server name")
	streamWindow := flag.Int64("stream-window", 0, "stream read buffer = window, bytes (0 = default)")
	connWindow := flag.Int64("conn-window", 0, "connection read buffer = window, bytes (0 = default)")
	rcvbuf := flag.Int("rcvbuf", 0, "SO_RCVBUF in bytes")
	sndbuf := flag.Int("sndbuf", 0, "SO_SNDBUF in bytes")
	once := flag.Bool("once", false, "server: exit after one connection")
	requests := flag.Int("requests", 0, "request mode: requests to issue (client) or serve before exiting (server); 0 = one bulk transfer")
	connections := flag.Int("connections", 1, "client, request mode: concurrent connections")
	streams := flag.Int("streams", 1, "client, request mode: concurrent streams per connection")
	newConn := flag.Bool("new-connection", false, "client, request mode: a new connection per request")
	flag.Parse()

	// Concurrent streams the peer may open: 100, or the request mode's --streams.
	conf := &quic.Config{MaxIdleTimeout: 30 * time.Second, MaxBidiRemoteStreams: int64(max(100, *streams))}
	if *streamWindow > 0 {
		conf.MaxStreamReadBufferSize = *streamWindow
		conf.MaxStreamWriteBufferSize = *streamWindow
	}
	if *connWindow > 0 {
		conf.MaxConnReadBufferSize = *connWindow
	}
	listen := func(a string) *quic.Endpoint {
		udpAddr, err := net.ResolveUDPAddr("udp", a)
		if err != nil {
			fail("resolve %s: %v", a, err)
		}
		pc, err := net.ListenUDP("udp", udpAddr)
		if err != nil {
			fail("listen %s: %v", a, err)
		}
		if *rcvbuf > 0 {
			_ = pc.SetReadBuffer(*rcvbuf)
		}
		if *sndbuf > 0 {
			_ = pc.SetWriteBuffer(*sndbuf)
		}
		ep, err := quic.NewEndpoint(pc, conf)
		if err != nil {
			fail("endpoint: %v", err)
		}
		return ep
	}
	ctx := context.Background()
	if *role == "server" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			fail("load certificate: %v", err)
		}
		conf.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
			NextProtos: []string{"perf"}}
		ep := listen(*addr)
		if *requests > 0 {
			requestServer(ep, *requests)
			return
		}
		for {
			conn, err := ep.Accept(ctx)
			if err != nil {
				fail("accept: %v", err)
			}
			if *once {
				serve(conn)
				return
			}
			go serve(conn)
		}
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: *serverName, NextProtos: []string{"perf"}}
	if *caFile == "" {
		tlsConf.InsecureSkipVerify = true
	} else {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fail("read ca: %v", err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tlsConf.RootCAs = pool
	}
	conf.TLSConfig = tlsConf
	ep := listen("0.0.0.0:0")
	if *requests > 0 {
		requestClient(ep, conf, *addr, *requests, *connections, *streams, *newConn, *want)
		return
	}
	t0 := time.Now()
	conn, err := ep.Dial(ctx, "udp", *addr, conf)
	if err != nil {
		fail("dial: %v", err)
	}
	handshake := time.Since(t0)
	str, err := conn.NewStream(ctx)
	if err != nil {
		fail("open stream: %v", err)
	}
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], *want)
	tReq := time.Now()
	if _, err := str.Write(req[:]); err != nil {
		fail("send request: %v", err)
	}
	str.CloseWrite()
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
	out := map[string]any{"role": "client", "bytes": got, "handshake_ms": float64(handshake) / 1e6,
		"transfer_s": transfer, "goodput_mbps": float64(got) * 8 / transfer / 1e6}
	if got != *want {
		out["error"] = fmt.Sprintf("received %d of %d bytes", got, *want)
	}
	emit(out)
	conn.Abort(nil)
	closeCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_ = ep.Close(closeCtx)
}

func serve(conn *quic.Conn) {
	ctx := context.Background()
	out := map[string]any{"role": "server"}
	str, err := conn.AcceptStream(ctx)
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
	start := time.Now()
	buf := make([]byte, 64*1024)
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
	str.CloseWrite()
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	_ = conn.Wait(waitCtx)
	out["bytes"] = sent
	out["transfer_s"] = time.Since(start).Seconds()
	emit(out)
}

// ---------------------------------------------------------------- request mode

// answer serves one request stream: read the 8-byte size, send that many bytes.
func answer(str *quic.Stream, buf []byte) (uint64, error) {
	var req [8]byte
	if _, err := io.ReadFull(str, req[:]); err != nil {
		return 0, err
	}
	// Read the client's FIN and release the receive side: x/net/quic raises
	// MAX_STREAMS only once a stream's reads are closed, so without this a
	// connection stops after MaxBidiRemoteStreams requests.
	if _, err := io.Copy(io.Discard, str); err != nil {
		return 0, err
	}
	str.CloseRead()
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
	str.CloseWrite()
	return sent, nil
}

func requestServer(ep *quic.Endpoint, requests int) {
	ctx := context.Background()
	var served, bytes, conns, failed atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	start := time.Now()
	go func() {
		for {
			conn, err := ep.Accept(ctx)
			if err != nil {
				return
			}
			conns.Add(1)
			go func(conn *quic.Conn) {
				for {
					str, err := conn.AcceptStream(ctx)
					if err != nil {
						return
					}
					go func() {
						n, err := answer(str, make([]byte, 32*1024))
						bytes.Add(int64(n))
						if err != nil {
							failed.Add(1)
						}
						if served.Add(1) >= int64(requests) {
							once.Do(func() { close(done) })
						}
					}()
				}
			}(conn)
		}
	}()
	<-done
	time.Sleep(300 * time.Millisecond)
	out := map[string]any{"role": "server", "requests": served.Load(), "bytes": bytes.Load(),
		"connections": conns.Load(), "transfer_s": time.Since(start).Seconds()}
	if f := failed.Load(); f > 0 {
		out["error"] = fmt.Sprintf("%d of %d requests failed", f, served.Load())
	}
	emit(out)
}

// fetch issues one request on conn and reads the whole response.
func fetch(conn *quic.Conn, size uint64, buf []byte) (uint64, error) {
	str, err := conn.NewStream(context.Background())
	if err != nil {
		return 0, err
	}
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], size)
	if _, err := str.Write(req[:]); err != nil {
		return 0, err
	}
	str.CloseWrite()
	var got uint64
	for {
		n, err := str.Read(buf)
		got += uint64(n)
		if err == io.EOF {
			str.Close()
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

// requestClient: as the quic-go peer's (latency per request from opening its
// stream, or from dialing its connection with newConn, to the last byte).
func requestClient(ep *quic.Endpoint, conf *quic.Config, addr string, requests, connections,
	streams int, newConn bool, size uint64) {
	ctx := context.Background()
	var issued, ok, failures atomic.Int64
	var got atomic.Uint64
	var mu sync.Mutex
	var latencies, handshakes []float64
	var firstErr atomic.Value
	take := func() bool { return issued.Add(1) <= int64(requests) }
	keep := func(lat, hs []float64) {
		mu.Lock()
		latencies = append(latencies, lat...)
		handshakes = append(handshakes, hs...)
		mu.Unlock()
	}
	bad := func(err error) {
		failures.Add(1)
		firstErr.CompareAndSwap(nil, err.Error())
	}
	one := func(conn *quic.Conn, t0 time.Time, buf []byte, lat *[]float64) {
		n, err := fetch(conn, size, buf)
		got.Add(n)
		if err != nil || n != size {
			bad(fmt.Errorf("request: %v (%d of %d bytes)", err, n, size))
			return
		}
		ok.Add(1)
		*lat = append(*lat, float64(time.Since(t0))/1e6)
	}
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < connections; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64*1024)
			if newConn {
				var lat, hs []float64
				for take() {
					t0 := time.Now()
					conn, err := ep.Dial(ctx, "udp", addr, conf)
					if err != nil {
						bad(fmt.Errorf("dial: %v", err))
						continue
					}
					hs = append(hs, float64(time.Since(t0))/1e6)
					one(conn, t0, buf, &lat)
					conn.Abort(nil)
				}
				keep(lat, hs)
				return
			}
			t0 := time.Now()
			conn, err := ep.Dial(ctx, "udp", addr, conf)
			if err != nil {
				bad(fmt.Errorf("dial: %v", err))
				return
			}
			keep(nil, []float64{float64(time.Since(t0)) / 1e6})
			var inner sync.WaitGroup
			for k := 0; k < streams; k++ {
				inner.Add(1)
				go func() {
					defer inner.Done()
					buf := make([]byte, 64*1024)
					var lat []float64
					for take() {
						one(conn, time.Now(), buf, &lat)
					}
					keep(lat, nil)
				}()
			}
			inner.Wait()
			conn.Abort(nil)
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
	out := map[string]any{"role": "client", "requests": done, "bytes": got.Load(),
		"transfer_s": elapsed, "requests_per_s": float64(done) / elapsed,
		"goodput_mbps":   float64(got.Load()) * 8 / elapsed / 1e6,
		"latency_p50_ms": percentile(latencies, 0.50), "latency_p90_ms": percentile(latencies, 0.90),
		"latency_p99_ms": percentile(latencies, 0.99), "connections_opened": len(handshakes),
		"request_bytes": size, "new_connection": newConn}
	if len(handshakes) > 0 {
		out["handshake_ms"] = hsSum / float64(len(handshakes))
	}
	if f := failures.Load(); f > 0 {
		out["error"] = fmt.Sprintf("%d of %d requests failed: %v", f, requests, firstErr.Load())
	}
	emit(out)
	closeCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_ = ep.Close(closeCtx)
}
