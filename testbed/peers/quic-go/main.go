// Command quiclab-quic-go is quiclab's perf peer for quic-go.
//
// Protocol (draft-banks-quic-performance): the client opens one bidirectional
// stream, sends the number of bytes it wants as an 8-byte big-endian integer
// and closes its side; the server answers with that many bytes and closes.
// Each side prints one JSON line with what quic-go can tell about the
// connection (ConnectionStats: RTT, cwnd, packets, losses).
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
	flag.StringVar(&o.cc, "cc", "cubic", "congestion control (quic-go has only cubic)")
	flag.BoolVar(&o.once, "once", false, "server: exit after one connection")
	flag.Parse()
	if o.cc != "cubic" {
		fail("cc=%s not supported: quic-go implements cubic only", o.cc)
	}
	if !o.gso {
		// Read by quic-go when it first opens a socket.
		_ = os.Setenv("QUIC_GO_DISABLE_GSO", "true")
	}
	if o.qlogDir != "" {
		_ = os.Setenv("QLOGDIR", o.qlogDir)
	}
	switch o.role {
	case "server":
		server(o)
	case "client":
		client(o)
	default:
		fail("role=%q: allowed server | client", o.role)
	}
}

func config(o options) *quic.Config {
	c := &quic.Config{MaxIdleTimeout: 30 * time.Second}
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
