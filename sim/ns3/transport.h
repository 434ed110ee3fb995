// quiclab ns-3 engine: the QUIC-like transport of sim/TRANSPORT.md as an ns-3
// Application pair over UdpSockets. This header holds what both endpoints
// share: the run's parameters, the packet header, the ACK frame, the CPU
// server, the RTT estimator, congestion control and the statistics.
//
// The model (physics) lives in transport.h / congestion.cc / quic_sender.cc /
// quic_receiver.cc; the wiring (topology, command line, JSON) in path.cc and
// main.cc, as ns-3 separates model/ from helper/.
#ifndef QUICLAB_TRANSPORT_H
#define QUICLAB_TRANSPORT_H

#include "ns3/application.h"
#include "ns3/event-id.h"
#include "ns3/header.h"
#include "ns3/nstime.h"
#include "ns3/ptr.h"
#include "ns3/random-variable-stream.h"
#include "ns3/socket.h"

#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace quiclab
{

constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

// Everything a run needs, from quiclab.sim.resolve.Resolved (CPU costs in ns
// on the Scenario's CPU). Filled by ns-3's CommandLine in main.cc.
struct Params
{
    // path
    double linkBps = 10e9;
    uint32_t mtuBytes = 1500;
    double rttS = 50e-6;
    double lossProb = 0.0;
    double reorderProb = 0.0;
    uint64_t queueBytes = 65536;
    uint64_t rcvbufBytes = 212992;
    // packets and transfer
    uint32_t udpPayload = 1400;  // UDP payload of a full data packet
    uint32_t streamBytes = 1360; // goodput bytes in a full data packet
    uint64_t transferBytes = 10000000;
    uint32_t streams = 1;
    uint32_t chunks = 1;
    std::string cc = "cubic";
    // sender endpoint
    double sNsPacket = 1000; // ns_protocol + ns_crypto + ns_app + ns_segment
    double sNsCall = 0;
    double sNsAck = 0;
    uint32_t sSegments = 1;
    double sCores = 1;
    bool pacing = true;
    // the pacer's bucket: seconds of the pacing rate sent back to back, within
    // [min, max] full datagrams (max 0 = none); the defaults pace packet by packet
    double pacingBurstS = 0;
    uint32_t pacingBurstMin = 1;
    uint32_t pacingBurstMax = 1;
    double pacingMinDelayS = 0;
    // receiver endpoint
    double rNsPacket = 1000;
    double rNsCall = 0;
    double rNsAck = 0;
    uint32_t rSegments = 1;
    double rCores = 1;
    double ackEvery = 2;
    bool immediateAck = true;
    double maxAckDelayS = 0.025; // advertised: the sender's PTO and RTT adjustment
    double ackTimerS = 0.025;    // the receiver's own delayed-ACK timer
    double ackFloor = 2;         // the capped threshold never asks for fewer packets
    uint64_t fcWindowBytes = 0; // 0 = no flow control
    double stallRateHz = 0;
    double stallMinS = 0;
    double stallAlpha = 2;
    // pair interplay (TRANSPORT.md "Pair interplay")
    double interopBusy = 1.0;
    // Not TRANSPORT.md (off = 0): ACK at least every this fraction of the
    // sender's cwnd, as the ACK-frequency extension would request.
    double ackWindowFraction = 0.25;  // TRANSPORT.md: ACK threshold ≤ ¼ cwnd
    // RFC 9002 §7.8, TRANSPORT.md (the DES's cwnd_validation): 0 = grow unless the
    // sender was app-limited since the last ACK; 1 = only while bytes in flight
    // fill cwnd; 2 = on every ACK.
    uint32_t cwndValidation = 0;
    // CUBIC's Reno-friendly estimate grows with time over min RTT (RFC 8312 §4.2).
    bool cubicTimeFriendly = false;
    // ... over the smoothed RTT, growth ≤ one datagram per datagram acked (quinn).
    bool cubicTimeSmoothed = false;
    double renoBeta = 0.5; // NewReno's multiplicative decrease (RFC 9002; quic-go 0.7)
    // run control
    uint64_t seed = 0;
    uint64_t run = 0;
    uint64_t prefixBytes = 0; // stop after this many goodput bytes (0 = whole transfer)
    double warmFraction = 0.5;
    uint64_t minWindowEvents = 20; // congestion events a loss-driven window must hold
    double prefixExtend = 4.0;     // ... growing the prefix up to this many times
    double maxSimS = 600;
};

enum class PacketType : uint8_t
{
    Data = 1,
    Ack = 2,
};

// The bytes of a QUIC short-header packet that the simulation reads. The rest
// of the UDP payload is padding up to the modelled size (see path.cc for the
// wire overhead), so serialisation times and buffer sizes are right.
class QuicHeader : public ns3::Header
{
  public:
    static ns3::TypeId GetTypeId();
    ns3::TypeId GetInstanceTypeId() const override;
    uint32_t GetSerializedSize() const override;
    void Serialize(ns3::Buffer::Iterator start) const override;
    uint32_t Deserialize(ns3::Buffer::Iterator start) override;
    void Print(std::ostream& os) const override;

    PacketType type = PacketType::Data;
    uint64_t number = 0; // packet number (data) or ACK frame sequence (ack)
    uint32_t stream = 0;
    uint64_t offset = 0;
    uint32_t length = 0;
    // The receive skb the datagram is coalesced into (GRO; TRANSPORT.md "Receive
    // buffer"): the first packet number of its GSO batch, or kNoSkb.
    uint64_t skb = UINT64_MAX;
    uint32_t skbBytes = 0; // that skb's truesize (its UDP payloads + kGroSkbOverhead)
};

constexpr uint64_t kNoSkb = UINT64_MAX;
// Truesize of a GRO skb beyond its UDP payloads (sim/rcvbuf.py
// GRO_SKB_OVERHEAD_BYTES, measured with SO_MEMINFO).
constexpr uint32_t kGroSkbOverhead = 832;

// The skb truesize Linux charges the receive buffer per datagram (main.cc).
uint64_t SkbTruesize(uint64_t udpPayload);

// Frames carried by a receiver→sender packet (RFC 9000 §19.3 ACK, §19.9
// MAX_DATA, §19.10 MAX_STREAM_DATA) plus the client's requests. Their wire
// size is the fixed 50-byte ACK packet of TRANSPORT.md; the contents travel
// beside the packet in FrameQueue (the reverse path is loss-free and FIFO).
struct AckFrame
{
    uint64_t seq = 0;
    bool hasAck = false;
    uint64_t largest = 0;
    double ackDelayS = 0;
    // Packet numbers processed since the previous ACK, as [lo, hi] ranges.
    // Sending only the new ones is equivalent to full ACK ranges because
    // ACKs are never lost or reordered (TRANSPORT.md: "ACKs are not lost").
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    uint64_t maxData = kUnlimited;
    std::vector<std::pair<uint32_t, uint64_t>> maxStreamData;
    std::vector<uint32_t> openStreams;
};

class FrameQueue
{
  public:
    uint64_t Push(AckFrame frame);
    bool Pop(uint64_t seq, AckFrame& out);

  private:
    // Keyed by sequence: with several receiver cores, ACKs may leave out of order.
    std::map<uint64_t, AckFrame> m_frames;
    uint64_t m_next = 0;
};

// One endpoint's CPU: `cores` FIFO servers (TRANSPORT.md "Hosts"). A
// fractional core count c is n = ceil(c) servers each running at c/n speed.
class CpuServer
{
  public:
    void Configure(double cores);
    bool HasIdleCore(ns3::Time now) const;
    // Start an item of `ns` nanoseconds on a free core; returns its finish time.
    ns3::Time Start(ns3::Time now, double ns);
    // The item the last Start began (core and serial number).
    struct Item
    {
        uint32_t core = 0;
        uint64_t serial = 0;
    };
    Item LastItem() const { return m_last; }
    ns3::Time FreeAt(uint32_t core) const { return m_freeAt[core]; }
    // When `item` ends if it is still running at `now` (pushed back by
    // pre-emption), else a negative time.
    ns3::Time RunningUntil(Item item, ns3::Time now) const;
    // Items running at `now` are pre-empted for `by` (a receiver stall).
    void Preempt(ns3::Time now, ns3::Time by);
    double busyS = 0; // useful work, seconds
    ns3::Time stalledUntil; // receiver scheduling stall (no work before this)

  private:
    std::vector<ns3::Time> m_freeAt;
    std::vector<uint64_t> m_serial; // item running (or last run) on each core
    double m_slowdown = 1.0;
    size_t m_next = 0;
    Item m_last;
};

// RFC 9002 §5.3 smoothed RTT.
struct RttEstimator
{
    double latest = 0, smoothed = 0, var = 0, min = 0;
    void Init(double rtt);
    void Update(double sample, double ackDelay, double maxAckDelay);
};

// RFC 9002 §7 (NewReno) and RFC 9438 (CUBIC), windows in bytes.
class CongestionControl
{
  public:
    CongestionControl(bool cubic, uint32_t maxDatagram, bool timeFriendly = false,
                      double renoBeta = 0.5, bool timeSmoothed = false);
    void OnAck(uint64_t ackedBytes, double now, double srtt, bool cwndLimited, double minRtt);
    void OnCongestionEvent(double now);
    void OnPersistentCongestion();
    uint64_t Cwnd() const { return static_cast<uint64_t>(m_cwnd); }
    bool InSlowStart() const { return m_cwnd < m_ssthresh; }

  private:
    double WCubic(double t) const;
    bool m_cubic;
    bool m_timeFriendly; // W_est(t) of RFC 8312 §4.2 over min RTT, growth ≤ acked / 2
    double m_renoBeta;   // NewReno's multiplicative decrease
    bool m_timeSmoothed; // the time-driven W_est over the smoothed RTT, growth ≤ acked
    double m_mss;
    double m_cwnd;
    double m_ssthresh;
    double m_wMax = 0;     // segments
    double m_cwndPrior = 0; // segments, cwnd before the last reduction (RFC 9438 §4.3)
    double m_k = 0;        // seconds
    double m_epoch = -1;   // start of the current congestion-avoidance epoch
    double m_wEst = 0;     // segments, Reno-friendly estimate
};

enum class DropCause : uint8_t
{
    None = 0,
    Path = 1,
    Queue = 2,
    Rcvbuf = 3,
};

// Why the sender's send loop was not sending (TRANSPORT.md "Outputs").
enum SenderState
{
    kBusy = 0,
    kCwnd,
    kFlowControl,
    kInterop,
    kNoData,
    kStates
};

struct Stats
{
    double timeS = 0;
    uint64_t consumedBytes = 0;
    double senderBusyS = 0, receiverBusyS = 0, linkBusyS = 0;
    uint64_t dataSent = 0, retransmissions = 0, acksReceived = 0, senderCalls = 0;
    uint64_t dataProcessed = 0, acksSent = 0, receiverCalls = 0;
    uint64_t pathDrops = 0, queueDrops = 0, rcvbufDrops = 0;
    uint64_t declaredLost = 0, spurious = 0, ptoCount = 0;
    uint64_t congestionEvents = 0, congestionEventsRcvbuf = 0;
    uint64_t lostRcvbuf = 0;
    uint64_t stalls = 0; // receiver stalls (overlapping ones merged) and their time
    double stallS = 0;
    double stateS[kStates] = {0, 0, 0, 0, 0};
    double cwndBytesSum = 0; // cwnd and smoothed RTT sampled per ACK, for the means
    double srttSum = 0;
    uint64_t cwndSamples = 0;
};

class QuicSender;
class QuicReceiver;

// What the two applications and the trace sinks share (one per run).
struct Connection
{
    Params params;
    FrameQueue frames;
    Stats stats;
    Stats warm; // snapshot when the measurement window starts
    bool warmTaken = false;
    std::vector<Stats> snapshots; // along a prefix, to choose the window's start
    bool completed = false;
    bool prefixReached = false;
    double completionS = -1;
    QuicSender* sender = nullptr;
    QuicReceiver* receiver = nullptr;
    // Padding added to every UDP payload so that the ns-3 frame on the wire has
    // TRANSPORT.md's size (UDP payload + 28 IP/UDP + 38 Ethernet); set in path.cc.
    uint32_t padBytes = 0;
    // A GSO batch reaches the receiver as one skb (both ends batch, as the DES's
    // Receiver.coalesce): it is admitted to the socket buffer or dropped whole.
    bool coalesce = false;
    uint32_t Overhead() const { return params.udpPayload - params.streamBytes; }
};

// Copy the live statistics (flushing the sender's state timers) at `now`.
void TakeSnapshot(Connection* conn, Stats& out);

// One stream's share of the transfer: the chunk of TRANSPORT.md "Flow control".
struct Chunk
{
    uint32_t stream = 0;
    uint64_t offset = 0;
    uint32_t length = 0;
};

uint64_t ChunkSize(const Params& p, uint32_t stream);

class QuicSender : public ns3::Application
{
  public:
    QuicSender(Connection* conn, ns3::Ptr<ns3::Socket> socket);
    void MarkDropped(uint64_t pn, DropCause cause);
    uint64_t Cwnd() const { return m_cc.Cwnd(); }
    void FinishAccounting();

  private:
    struct SentPacket
    {
        ns3::Time sent = ns3::Time(-1); // negative until it left the host
        uint32_t bytes = 0;
        Chunk chunk;
        bool acked = false;
        bool lost = false;
        DropCause cause = DropCause::None;
        uint64_t skb = kNoSkb; // the GSO batch's first pn when GRO coalesces it
        uint32_t skbBytes = 0; // and the batch's skb truesize
    };
    struct TxStream
    {
        uint64_t size = 0, next = 0, maxData = 0;
        bool open = false;
    };

    void StartApplication() override;
    void StopApplication() override;
    void OnReadable(ns3::Ptr<ns3::Socket> socket);
    void Kick();
    bool NextPacket(Chunk& chunk, SenderState& why, bool probe);
    void OnAckProcessed(const AckFrame& frame);
    double PtoS() const;
    void OnBatchBuilt(uint64_t firstPn, uint32_t count, double cpuNs);
    void SendNow(uint64_t pn);
    void ApplyAck(const AckFrame& frame);
    void DetectLost();
    void DeclareLost(SentPacket& sp);
    void ArmTimer();
    void OnTimer();
    void SetState(SenderState state);
    SentPacket& At(uint64_t pn) { return m_sent[pn - m_base]; }

    Connection* m_conn;
    const Params& m_p;
    ns3::Ptr<ns3::Socket> m_socket;
    CpuServer m_cpu;
    RttEstimator m_rtt;
    CongestionControl m_cc;
    std::deque<SentPacket> m_sent;
    uint64_t m_base = 0, m_nextPn = 0;
    uint64_t m_inflight = 0, m_maxInflightSinceAck = 0;
    bool m_cwndBlockedSinceAck = false;
    bool m_appLimitedSinceAck = false; // idle with room in cwnd since the last ACK
    int64_t m_largestAcked = -1;
    double m_recoveryStart = -1;
    std::deque<Chunk> m_retx;
    std::vector<TxStream> m_streams;
    std::deque<uint32_t> m_roundRobin;
    uint64_t m_connSent = 0, m_maxData = kUnlimited;
    // loss detection (RFC 9002 §6)
    ns3::Time m_lossTime = ns3::Time(-1), m_lastAckElicitingSent, m_deadline = ns3::Time(-1);
    ns3::EventId m_timer;
    uint32_t m_ptoCount = 0, m_probes = 0;
    // pacing (RFC 9002 §7.7) and pair interplay
    ns3::Time m_nextRelease, m_holdUntil;
    ns3::Time m_paceLast{-1}; // the last paced packet's release (-1: none yet)
    ns3::EventId m_holdEvent;
    SenderState m_state = kNoData;
    ns3::Time m_stateSince;
};

class QuicReceiver : public ns3::Application
{
  public:
    QuicReceiver(Connection* conn, ns3::Ptr<ns3::Socket> socket,
                 ns3::Ptr<ns3::RandomVariableStream> uniform);

  private:
    struct RxStream
    {
        uint64_t size = 0, contiguous = 0, window = kUnlimited;
        std::map<uint64_t, uint64_t> outOfOrder; // offset -> end
        bool open = false, done = false;
    };

    void StartApplication() override;
    void StopApplication() override;
    void OnReadable(ns3::Ptr<ns3::Socket> socket);
    void SendRequests();
    void Kick();
    bool Preempted(CpuServer::Item item) const;
    void OnCallDone(CpuServer::Item item);
    void OnPacketProcessed(CpuServer::Item item, ns3::Ptr<ns3::Packet> packet);
    void OnAckBuilt(CpuServer::Item item, uint64_t seq);
    void SendAck(uint64_t seq);
    void OnAckTimer();
    void ScheduleStall();
    void OnStall();
    bool PrefixDone();
    void Deliver(RxStream& s, uint64_t offset, uint64_t end);
    AckFrame BuildFrame();
    void OpenStream(uint32_t id);

    Connection* m_conn;
    const Params& m_p;
    ns3::Ptr<ns3::Socket> m_socket;
    ns3::Ptr<ns3::RandomVariableStream> m_uniform;
    CpuServer m_cpu;
    // Datagrams taken by a receive call, with the time the call's work ends.
    std::deque<std::pair<ns3::Ptr<ns3::Packet>, ns3::Time>> m_pending;
    // GRO coalescing (Connection::coalesce): the socket buffer is kept here, one
    // admission decision per skb, each datagram with the bytes it is charged.
    std::deque<std::pair<ns3::Ptr<ns3::Packet>, double>> m_buffer;
    double m_occupancy = 0;
    uint64_t m_skb = kNoSkb;
    bool m_skbIn = false;
    std::vector<RxStream> m_streams;
    uint32_t m_nextRequest = 0;
    uint64_t m_nextSnapshotBytes = 0;
    std::vector<uint32_t> m_newRequests;
    std::vector<uint64_t> m_rangeLo, m_rangeHi; // packet numbers since the last ACK
    int64_t m_largest = -1;
    ns3::Time m_largestTime;
    double m_ackCredit = 0;
    bool m_ackDue = false;
    ns3::Time m_ackDeadline = ns3::Time(-1);
    ns3::EventId m_ackTimer;
};

} // namespace quiclab

#endif
