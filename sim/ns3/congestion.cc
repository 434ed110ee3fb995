// quiclab ns-3 engine: the pieces of the transport that are plain arithmetic:
// packet header, ACK frame queue, CPU server, RTT estimator, NewReno and CUBIC.
#include "transport.h"

#include <algorithm>
#include <cmath>

namespace quiclab
{

using ns3::Time;

// --- QuicHeader ---------------------------------------------------------------

ns3::TypeId
QuicHeader::GetTypeId()
{
    static ns3::TypeId tid = ns3::TypeId("quiclab::QuicHeader")
                                 .SetParent<ns3::Header>()
                                 .SetGroupName("quiclab")
                                 .AddConstructor<QuicHeader>();
    return tid;
}

ns3::TypeId
QuicHeader::GetInstanceTypeId() const
{
    return GetTypeId();
}

uint32_t
QuicHeader::GetSerializedSize() const
{
    return 1 + 8 + 4 + 8 + 4 + 8 + 4;
}

void
QuicHeader::Serialize(ns3::Buffer::Iterator it) const
{
    it.WriteU8(static_cast<uint8_t>(type));
    it.WriteHtonU64(number);
    it.WriteHtonU32(stream);
    it.WriteHtonU64(offset);
    it.WriteHtonU32(length);
    it.WriteHtonU64(skb);
    it.WriteHtonU32(skbBytes);
}

uint32_t
QuicHeader::Deserialize(ns3::Buffer::Iterator it)
{
    type = static_cast<PacketType>(it.ReadU8());
    number = it.ReadNtohU64();
    stream = it.ReadNtohU32();
    offset = it.ReadNtohU64();
    length = it.ReadNtohU32();
    skb = it.ReadNtohU64();
    skbBytes = it.ReadNtohU32();
    return GetSerializedSize();
}

void
QuicHeader::Print(std::ostream& os) const
{
    os << (type == PacketType::Data ? "DATA pn=" : "ACK seq=") << number << " stream=" << stream
       << " off=" << offset << " len=" << length;
}

// --- FrameQueue -----------------------------------------------------------------

uint64_t
FrameQueue::Push(AckFrame frame)
{
    frame.seq = m_next++;
    uint64_t seq = frame.seq;
    m_frames.emplace(seq, std::move(frame));
    return seq;
}

bool
FrameQueue::Pop(uint64_t seq, AckFrame& out)
{
    auto it = m_frames.find(seq);
    if (it == m_frames.end())
    {
        return false;
    }
    out = std::move(it->second);
    m_frames.erase(it);
    return true;
}

uint64_t
ChunkSize(const Params& p, uint32_t stream)
{
    // TRANSPORT.md "Flow control": consecutive requests of transfer/chunks
    // bytes; the last one carries the remainder.
    uint64_t base = p.transferBytes / p.chunks;
    return stream + 1 == p.chunks ? p.transferBytes - base * (p.chunks - 1) : base;
}

// --- CpuServer ------------------------------------------------------------------

void
CpuServer::Configure(double cores)
{
    auto n = static_cast<size_t>(std::max(1.0, std::ceil(cores - 1e-9)));
    m_slowdown = static_cast<double>(n) / std::max(cores, 1e-9);
    m_freeAt.assign(n, Time(0));
    m_serial.assign(n, 0);
    stalledUntil = Time(0);
}

bool
CpuServer::HasIdleCore(Time now) const
{
    if (now < stalledUntil)
    {
        return false;
    }
    return std::any_of(m_freeAt.begin(), m_freeAt.end(), [now](Time t) { return t <= now; });
}

Time
CpuServer::Start(Time now, double ns)
{
    // Round-robin over the cores that are free now (TRANSPORT.md: "work items
    // are spread round-robin, each item still runs on one core").
    size_t n = m_freeAt.size();
    size_t core = m_next;
    for (size_t i = 0; i < n; ++i)
    {
        core = (m_next + i) % n;
        if (m_freeAt[core] <= now)
        {
            break;
        }
    }
    m_next = (core + 1) % n;
    m_last = Item{static_cast<uint32_t>(core), m_last.serial + 1};
    m_serial[core] = m_last.serial;
    Time finish = now + Time::FromDouble(ns * m_slowdown, Time::NS);
    m_freeAt[core] = finish;
    busyS += ns * 1e-9; // core-seconds of useful work
    return finish;
}

Time
CpuServer::RunningUntil(Item item, Time now) const
{
    // A core runs one item at a time: if it still holds `item` and is busy
    // past now, the item was pre-empted.
    if (m_serial[item.core] == item.serial && m_freeAt[item.core] > now)
    {
        return m_freeAt[item.core];
    }
    return Time(-1);
}

void
CpuServer::Preempt(Time now, Time by)
{
    for (Time& t : m_freeAt)
    {
        if (t > now)
        {
            t += by;
        }
    }
}

// --- RTT (RFC 9002 §5.3) ------------------------------------------------------------

void
RttEstimator::Init(double rtt)
{
    // The handshake's first sample (RFC 9002 §5.3: smoothed_rtt = sample,
    // rttvar = sample/2); the handshake itself is not simulated packet by packet.
    latest = smoothed = min = rtt;
    var = rtt / 2;
}

void
RttEstimator::Update(double sample, double ackDelay, double maxAckDelay)
{
    latest = sample;
    min = std::min(min, sample);
    // RFC 9002 §5.3: ack_delay is capped by max_ack_delay once the handshake is
    // confirmed, and only subtracted if the result stays above min_rtt.
    ackDelay = std::min(ackDelay, maxAckDelay);
    double adjusted = sample >= min + ackDelay ? sample - ackDelay : sample;
    var = 0.75 * var + 0.25 * std::fabs(smoothed - adjusted);
    smoothed = 0.875 * smoothed + 0.125 * adjusted;
}

// --- Congestion control ----------------------------------------------------------

namespace
{
constexpr double kCubicC = 0.4;     // RFC 9438 §5.1
constexpr double kCubicBeta = 0.7;  // RFC 9438 §4.6
constexpr double kInitialPackets = 10; // TRANSPORT.md: initial window 10 packets
constexpr double kMinimumPackets = 2;  // RFC 9002 §7.2 kMinimumWindow
} // namespace

CongestionControl::CongestionControl(bool cubic, uint32_t maxDatagram, bool timeFriendly,
                                     double renoBeta, bool timeSmoothed)
    : m_cubic(cubic),
      m_timeFriendly(timeFriendly),
      m_renoBeta(renoBeta), // RFC 9002 §7.3.2 kLossReductionFactor 0.5, or the model's
      m_timeSmoothed(timeSmoothed),
      m_mss(maxDatagram),
      m_cwnd(kInitialPackets * maxDatagram),
      m_ssthresh(std::numeric_limits<double>::infinity())
{
}

double
CongestionControl::WCubic(double t) const
{
    // RFC 9438 §4.2, Figure 1: W_cubic(t) = C·(t − K)³ + W_max (segments).
    double d = t - m_k;
    return kCubicC * d * d * d + m_wMax;
}

void
CongestionControl::OnAck(uint64_t ackedBytes, double now, double srtt, bool cwndLimited,
                         double minRtt)
{
    // RFC 9002 §7.8 / RFC 9438 §5.8: no growth while the window is not the limit.
    if (!cwndLimited || ackedBytes == 0)
    {
        return;
    }
    if (InSlowStart())
    {
        m_cwnd += static_cast<double>(ackedBytes); // RFC 9002 §7.3.1
        return;
    }
    if (!m_cubic)
    {
        m_cwnd += m_mss * static_cast<double>(ackedBytes) / m_cwnd; // RFC 9002 §7.3.3
        return;
    }
    double segs = m_cwnd / m_mss;
    double acked = static_cast<double>(ackedBytes) / m_mss;
    if (m_epoch < 0)
    {
        // Congestion avoidance entered without a congestion event (RFC 9438 §4.2:
        // W_max = cwnd at the start of the epoch, so K = 0).
        m_epoch = now;
        m_wMax = segs;
        m_cwndPrior = segs;
        m_k = 0;
        m_wEst = segs;
    }
    double t = now - m_epoch;
    if (m_timeFriendly)
    {
        // RFC 8312 §4.2, eq. 4: W_est(t) = β·W_max + α_cubic·t/RTT with the minimum
        // RTT (s2n-quic, Linux); one ACK raises cwnd by at most half what it acks.
        // Over the smoothed RTT, at most all of it (quinn).
        double rtt = m_timeSmoothed ? srtt : minRtt;
        double wEst = m_wMax * kCubicBeta +
                      3.0 * (1.0 - kCubicBeta) / (1.0 + kCubicBeta) * t / rtt;
        double cap = segs + (m_timeSmoothed ? acked : acked / 2.0);
        double next = segs;
        if (WCubic(t) < wEst)
        {
            next = std::max(segs, wEst);
        }
        else
        {
            double target = std::clamp(WCubic(t + rtt), segs, 1.5 * segs);
            next = segs + (target - segs) / segs * acked;
        }
        m_cwnd = std::min(next, cap) * m_mss;
        return;
    }
    // RFC 9438 §4.3: Reno-friendly estimate with α_cubic = 3(1−β)/(1+β), and
    // α = 1 once W_est has reached cwnd_prior (the window before the last
    // reduction; not W_max, which fast convergence may have lowered).
    double alpha = m_wEst >= m_cwndPrior ? 1.0 : 3.0 * (1.0 - kCubicBeta) / (1.0 + kCubicBeta);
    m_wEst += alpha * acked / segs;
    if (WCubic(t) < m_wEst)
    {
        m_cwnd = std::max(m_cwnd, m_wEst * m_mss); // Reno-friendly region
        return;
    }
    // RFC 9438 §4.4–4.5: target = W_cubic(t + RTT), clamped to [cwnd, 1.5·cwnd].
    double target = std::clamp(WCubic(t + srtt), segs, 1.5 * segs);
    m_cwnd += (target - segs) / segs * acked * m_mss;
}

void
CongestionControl::OnPersistentCongestion()
{
    // RFC 9002 §7.6.2 / RFC 9438 §4.8: collapse to the minimum window; CUBIC
    // starts a new epoch when congestion avoidance resumes.
    m_cwnd = kMinimumPackets * m_mss;
    m_epoch = -1;
}

void
CongestionControl::OnCongestionEvent(double now)
{
    double segs = m_cwnd / m_mss;
    if (!m_cubic)
    {
        m_ssthresh = std::max(m_cwnd * m_renoBeta, kMinimumPackets * m_mss);
        m_cwnd = m_ssthresh;
        return;
    }
    // RFC 9438 §4.7 fast convergence, §4.6 multiplicative decrease.
    m_cwndPrior = segs;
    m_wMax = segs < m_wMax ? segs * (1.0 + kCubicBeta) / 2.0 : segs;
    m_cwnd = std::max(m_cwnd * kCubicBeta, kMinimumPackets * m_mss);
    m_ssthresh = m_cwnd;
    double epochSegs = m_cwnd / m_mss;
    m_k = std::cbrt(std::max(m_wMax - epochSegs, 0.0) / kCubicC); // RFC 9438 §4.2, Eq. 2
    m_epoch = now;
    m_wEst = epochSegs;
}

} // namespace quiclab
