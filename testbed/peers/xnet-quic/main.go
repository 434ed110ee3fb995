// Command xnet-quic-peer is quiclab's perf peer for Go's golang.org/x/net/quic.
//
// Protocol (draft-banks-quic-performance): the client opens one bidirectional
// stream, sends the number of bytes it wants as an 8-byte big-endian integer
// and closes its side; the server answers with that many bytes. Each side
// prints one JSON line. x/net/quic exposes no connection statistics, so the
// report has goodput and handshake time only. It sends 1200-byte packets (no
// PMTUD), uses NewReno, and has no GSO/GRO.
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
	"net"
	"os"
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
	flag.Parse()

	conf := &quic.Config{MaxIdleTimeout: 30 * time.Second, MaxBidiRemoteStreams: 10}
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
