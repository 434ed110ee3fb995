// Command udp-relay adds delay and reordering to one UDP flow, for quiclab's
// testbed on a kernel without netem. It runs in a namespace between client
// and server: datagrams from the client arrive on -listen and leave towards
// -server from a second socket; the server's answers go back to the last
// client address. Each direction holds datagrams for -delay (one-way; half
// the added RTT) in a FIFO bounded by -queue-bytes: a datagram that does not
// fit is dropped, like a tail-drop router queue, so the relay cannot become a
// hidden bottleneck buffer. With -reorder-pct a datagram is held -reorder-extra
// longer and so overtaken by later ones.
//
// Limits, measured on a 2-core VM: about 1.3-1.5 Gbit/s and roughly one core
// per Gbit/s (one recvfrom/sendto per datagram). Delays are timed with
// clock_nanosleep on a thread with 1 ns timer slack (25-40 us late, median):
// Go's time.Sleep rounds every wait below a millisecond up to ~1.09 ms here,
// which released each direction's datagrams in 1 ms clumps (86 datagrams at
// 1 Gbit/s, a 208 KiB receive buffer's worth). A datagram's due time counts
// from the kernel's receive stamp (SO_TIMESTAMPNS), not from when the reading
// goroutine ran, and the runtime gets 8 Ps: with one per core the four drain
// threads asleep in clock_nanosleep could hold both, and the readers and the
// drains' sends waited for them (quiche at +10 ms: 128-131 Mbit/s before,
// 148-211 after, 3 runs each). On SIGTERM it prints one JSON line of counters.
package main

import (
	"encoding/json"
	"flag"
	"math/rand"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

type packet struct {
	due  time.Time
	data []byte
}

type direction struct {
	name       string
	delay      time.Duration
	reorderPct float64
	extra      time.Duration
	queueBytes int64
	queued     atomic.Int64
	forwarded  atomic.Uint64
	dropped    atomic.Uint64
	reordered  atomic.Uint64
	queue      chan packet
	late       chan packet
	rng        *rand.Rand
}

func newDirection(name string, delay, extra time.Duration, reorderPct float64, queueBytes int64, seed int64) *direction {
	return &direction{name: name, delay: delay, extra: extra, reorderPct: reorderPct,
		queueBytes: queueBytes, queue: make(chan packet, 1<<16), late: make(chan packet, 1<<16),
		rng: rand.New(rand.NewSource(seed))}
}

// offer queues a datagram that the kernel received at `arrived`, or drops it
// when the queue is full (tail drop).
func (d *direction) offer(data []byte, arrived time.Time) {
	size := int64(len(data))
	if d.queued.Load()+size > d.queueBytes {
		d.dropped.Add(1)
		return
	}
	d.queued.Add(size)
	p := packet{due: arrived.Add(d.delay), data: data}
	if d.reorderPct > 0 && d.rng.Float64()*100 < d.reorderPct {
		p.due = p.due.Add(d.extra)
		d.reordered.Add(1)
		select {
		case d.late <- p:
		default:
			d.queued.Add(-size)
			d.dropped.Add(1)
		}
		return
	}
	select {
	case d.queue <- p:
	default:
		d.queued.Add(-size)
		d.dropped.Add(1)
	}
}

// Waits shorter than this are not slept: the datagram leaves at once.
const minSleep = 20 * time.Microsecond

// Linux constants for the precise sleep (see sleepFor).
const (
	clockMonotonic  = 1
	timerAbstime    = 1
	prSetTimerslack = 29
)

// preciseTimers makes this OS thread's sleeps end on time: 1 ns timer slack
// instead of the default 50 us. The calling goroutine stays on the thread.
func preciseTimers() {
	runtime.LockOSThread()
	_, _, _ = syscall.Syscall(syscall.SYS_PRCTL, prSetTimerslack, 1, 0)
}

// sleepFor blocks the thread for d with clock_nanosleep on CLOCK_MONOTONIC (an
// absolute deadline, so a signal does not stretch it), not Go's timer heap.
func sleepFor(d time.Duration) {
	var now syscall.Timespec
	_, _, _ = syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&now)), 0)
	deadline := syscall.NsecToTimespec(now.Nano() + int64(d))
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_CLOCK_NANOSLEEP, clockMonotonic, timerAbstime,
			uintptr(unsafe.Pointer(&deadline)), 0, 0, 0)
		if errno != syscall.EINTR {
			return
		}
	}
}

// drain sends queued datagrams when they are due, in FIFO order per channel.
func (d *direction) drain(q chan packet, send func([]byte)) {
	preciseTimers()
	for p := range q {
		if wait := time.Until(p.due); wait > minSleep {
			sleepFor(wait)
		}
		send(p.data)
		d.queued.Add(-int64(len(p.data)))
		d.forwarded.Add(1)
	}
}

func (d *direction) stats() map[string]any {
	return map[string]any{"forwarded": d.forwarded.Load(), "dropped": d.dropped.Load(),
		"reordered": d.reordered.Load()}
}

func main() {
	listen := flag.String("listen", "0.0.0.0:4433", "address the client sends to")
	server := flag.String("server", "", "server address")
	delay := flag.Duration("delay", 0, "one-way delay added in each direction")
	reorder := flag.Float64("reorder-pct", 0, "percent of datagrams held back by -reorder-extra")
	extra := flag.Duration("reorder-extra", time.Millisecond, "extra hold of a reordered datagram")
	queueBytes := flag.Int64("queue-bytes", 1<<20, "bound of each direction's queue in bytes")
	seed := flag.Int64("seed", 1, "random seed for reordering")
	flag.Parse()
	// Four drain goroutines sit on locked threads in clock_nanosleep; with one P
	// per core (2 here) the readers and the drains' sends waited for a P that a
	// sleeping thread still held, and released datagrams late and together.
	if runtime.GOMAXPROCS(0) < 8 {
		runtime.GOMAXPROCS(8)
	}

	front, err := net.ListenPacket("udp", *listen)
	if err != nil {
		fail(err)
	}
	back, err := net.ListenPacket("udp", ":0")
	if err != nil {
		fail(err)
	}
	serverAddr, err := net.ResolveUDPAddr("udp", *server)
	if err != nil {
		fail(err)
	}
	for _, c := range []net.PacketConn{front, back} {
		forceBuffers(c, 8<<20)
		kernelTimestamps(c)
	}
	up := newDirection("client_to_server", *delay, *extra, *reorder, *queueBytes, *seed)
	down := newDirection("server_to_client", *delay, *extra, *reorder, *queueBytes, *seed+1)
	var client atomic.Pointer[net.Addr]

	go func() {
		buf, oob := make([]byte, 65536), make([]byte, 128)
		for {
			n, addr, arrived, err := readStamped(front, buf, oob)
			if err != nil {
				return
			}
			var a net.Addr = addr
			client.Store(&a)
			up.offer(append([]byte(nil), buf[:n]...), arrived)
		}
	}()
	go func() {
		buf, oob := make([]byte, 65536), make([]byte, 128)
		for {
			n, _, arrived, err := readStamped(back, buf, oob)
			if err != nil {
				return
			}
			down.offer(append([]byte(nil), buf[:n]...), arrived)
		}
	}()
	toServer := func(b []byte) { _, _ = back.WriteTo(b, serverAddr) }
	toClient := func(b []byte) {
		if a := client.Load(); a != nil {
			_, _ = front.WriteTo(b, *a)
		}
	}
	var wg sync.WaitGroup
	for _, job := range []struct {
		d    *direction
		q    chan packet
		send func([]byte)
	}{{up, up.queue, toServer}, {up, up.late, toServer}, {down, down.queue, toClient}, {down, down.late, toClient}} {
		wg.Add(1)
		go func() { defer wg.Done(); job.d.drain(job.q, job.send) }()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{
		"relay": map[string]any{up.name: up.stats(), down.name: down.stats(),
			"delay_ms": float64(*delay) / 1e6, "queue_bytes": *queueBytes}})
}

// forceBuffers sets 8 MiB socket buffers with SO_{RCV,SND}BUFFORCE (root), so the
// relay is not limited by the run's net.core.rmem_max, which is the peers' knob.
func forceBuffers(c net.PacketConn, size int) {
	onSocket(c, func(fd int) {
		_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, size)
		_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, size)
	})
}

// onSocket runs set on the UDP socket's descriptor (best effort: errors are ignored).
func onSocket(c net.PacketConn, set func(fd int)) {
	u, ok := c.(*net.UDPConn)
	if !ok {
		return
	}
	raw, err := u.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) { set(int(fd)) })
}

// kernelTimestamps asks the kernel to stamp each datagram with its receive time
// (SO_TIMESTAMPNS), so that a datagram's due time does not depend on when the
// reading goroutine got to run.
func kernelTimestamps(c net.PacketConn) {
	onSocket(c, func(fd int) {
		_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	})
}

// readStamped reads one datagram and the kernel's receive time (now if the
// kernel sent none).
func readStamped(c net.PacketConn, buf, oob []byte) (int, *net.UDPAddr, time.Time, error) {
	u := c.(*net.UDPConn)
	n, oobn, _, addr, err := u.ReadMsgUDP(buf, oob)
	if err != nil {
		return 0, nil, time.Time{}, err
	}
	arrived := time.Now()
	if msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SCM_TIMESTAMPNS &&
				len(m.Data) >= int(unsafe.Sizeof(syscall.Timespec{})) {
				ts := (*syscall.Timespec)(unsafe.Pointer(&m.Data[0]))
				stamp := time.Unix(ts.Sec, ts.Nsec)
				// Keep the monotonic reading of now, moved back by the kernel's lead.
				if lead := time.Since(stamp); lead > 0 && lead < time.Second {
					arrived = arrived.Add(-lead)
				}
			}
		}
	}
	return n, addr, arrived, nil
}

func fail(err error) {
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"error": err.Error()})
	os.Exit(1)
}
