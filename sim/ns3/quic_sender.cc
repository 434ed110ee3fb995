// quiclab ns-3 engine: the sending endpoint (the server of a download).
//
// A send loop on a CPU server (TRANSPORT.md "Hosts"): whenever a core is free
// it first processes an ACK waiting in the UDP socket, else builds one send
// call of up to `sSegments` packets that the congestion window and the
// flow-control credit allow. Packets leave the host when the call's CPU work is
// done, paced at 1.25·cwnd/srtt (RFC 9002 §7.7). Loss detection and the PTO
// follow RFC 9002 §6, congestion control RFC 9002 §7 / RFC 9438.
#include "transport.h"

#include "ns3/packet.h"
#include "ns3/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace quiclab
{

using ns3::Ptr;
using ns3::Seconds;
using ns3::Simulator;
using ns3::Time;

namespace
{
constexpr uint64_t kPacketThreshold = 3;  // RFC 9002 §6.1.1
constexpr double kTimeThreshold = 9.0 / 8; // RFC 9002 §6.1.2
constexpr double kGranularityS = 1e-3;     // RFC 9002 §6.1.2 kGranularity
constexpr double kPacingGain = 1.25;       // RFC 9002 §7.7 N
constexpr double kPersistentCongestion = 3; // RFC 9002 §7.6.1
} // namespace

QuicSender::QuicSender(Connection* conn, Ptr<ns3::Socket> socket)
    : m_conn(conn),
      m_p(conn->params),
      m_socket(socket),
      m_cc(conn->params.cc != "reno", conn->params.udpPayload, conn->params.cubicTimeFriendly,
           conn->params.renoBeta, conn->params.cubicTimeSmoothed)
{
    m_streams.resize(m_p.chunks);
    for (uint32_t i = 0; i < m_p.chunks; ++i)
    {
        m_streams[i].size = ChunkSize(m_p, i);
    }
}

void
QuicSender::StartApplication()
{
    m_cpu.Configure(m_p.sCores);
    m_rtt.Init(m_p.rttS);
    m_stateSince = Simulator::Now();
    m_socket->SetRecvCallback(MakeCallback(&QuicSender::OnReadable, this));
}

void
QuicSender::StopApplication()
{
    m_timer.Cancel();
    m_holdEvent.Cancel();
}

void
QuicSender::OnReadable(Ptr<ns3::Socket>)
{
    Kick();
}

void
QuicSender::SetState(SenderState state)
{
    Time now = Simulator::Now();
    m_conn->stats.stateS[m_state] += (now - m_stateSince).GetSeconds();
    m_state = state;
    m_stateSince = now;
}

void
QuicSender::FinishAccounting()
{
    SetState(m_state);
}

void
QuicSender::Kick()
{
    Time now = Simulator::Now();
    Stats& st = m_conn->stats;
    SenderState why = kNoData;
    while (m_cpu.HasIdleCore(now))
    {
        // ACKs waiting in the socket are read first (one item each).
        if (m_socket->GetRxAvailable() > 0)
        {
            Ptr<ns3::Packet> packet = m_socket->Recv();
            QuicHeader header;
            packet->PeekHeader(header);
            AckFrame frame;
            if (!m_conn->frames.Pop(header.number, frame))
            {
                continue;
            }
            // The client's first requests ride on its handshake flight: no ACK work.
            Time finish = m_cpu.Start(now, frame.hasAck ? m_p.sNsAck : 0.0);
            st.senderBusyS = m_cpu.busyS;
            st.acksReceived += frame.hasAck ? 1 : 0;
            Simulator::Schedule(finish - now, &QuicSender::OnAckProcessed, this, frame);
            continue;
        }
        if (now < m_holdUntil)
        {
            // TRANSPORT.md "Pair interplay": the send loop waits, the CPU is free.
            why = kInterop;
            if (!m_holdEvent.IsPending())
            {
                m_holdEvent = Simulator::Schedule(m_holdUntil - now, &QuicSender::Kick, this);
            }
            break;
        }
        uint64_t first = m_nextPn;
        uint32_t count = 0;
        while (count < m_p.sSegments)
        {
            Chunk chunk;
            bool probe = m_probes > 0;
            if (!NextPacket(chunk, why, probe))
            {
                m_probes = 0; // nothing to probe with
                break;
            }
            if (probe)
            {
                --m_probes;
            }
            SentPacket sp;
            sp.bytes = chunk.length + m_conn->Overhead();
            sp.chunk = chunk;
            m_sent.push_back(sp);
            ++m_nextPn;
            m_inflight += sp.bytes;
            ++count;
        }
        if (count == 0)
        {
            break;
        }
        m_maxInflightSinceAck = std::max(m_maxInflightSinceAck, m_inflight);
        double ns = m_p.sNsCall + count * m_p.sNsPacket;
        Time finish = m_cpu.Start(now, ns);
        st.senderBusyS = m_cpu.busyS;
        ++st.senderCalls;
        Simulator::Schedule(finish - now, &QuicSender::OnBatchBuilt, this, first, count, ns);
    }
    bool idle = m_cpu.HasIdleCore(now);
    if (idle && (why == kNoData || why == kFlowControl))
    {
        m_appLimitedSinceAck = true; // room in cwnd, nothing it may send (RFC 9002 §7.8)
    }
    SetState(idle ? why : kBusy);
}

bool
QuicSender::NextPacket(Chunk& chunk, SenderState& why, bool probe)
{
    const uint64_t cwnd = m_cc.Cwnd();
    // TRANSPORT.md: a lost packet's bytes are retransmitted before new data.
    if (!m_retx.empty())
    {
        const Chunk& next = m_retx.front();
        if (!probe && m_inflight + m_p.udpPayload > cwnd)
        {
            why = kCwnd;
            m_cwndBlockedSinceAck = true;
            return false;
        }
        chunk = next;
        m_retx.pop_front();
        ++m_conn->stats.retransmissions;
        return true;
    }
    bool creditBlocked = false;
    for (size_t tries = m_roundRobin.size(); tries > 0 && !m_roundRobin.empty(); --tries)
    {
        uint32_t id = m_roundRobin.front();
        TxStream& s = m_streams[id];
        m_roundRobin.pop_front();
        if (s.next >= s.size)
        {
            continue; // everything of this stream has been sent once
        }
        m_roundRobin.push_back(id);
        // RFC 9000 §4.1: stream and connection credit.
        uint64_t room = std::min(s.maxData - std::min(s.maxData, s.next),
                                 m_maxData - std::min(m_maxData, m_connSent));
        if (room == 0)
        {
            creditBlocked = true;
            continue;
        }
        uint64_t remaining = s.size - s.next;
        if (room < std::min<uint64_t>(m_p.streamBytes, remaining))
        {
            // Only whole packets while credit-limited; a stream's tail may be short.
            creditBlocked = true;
            continue;
        }
        auto length = static_cast<uint32_t>(std::min<uint64_t>(m_p.streamBytes, remaining));
        if (!probe && m_inflight + m_p.udpPayload > cwnd)
        {
            // Put the stream back at the head: it is next once the window opens.
            m_roundRobin.pop_back();
            m_roundRobin.push_front(id);
            why = kCwnd;
            m_cwndBlockedSinceAck = true;
            return false;
        }
        chunk = Chunk{id, s.next, length};
        s.next += length;
        m_connSent += length;
        return true;
    }
    why = creditBlocked ? kFlowControl : kNoData;
    if (probe && !creditBlocked)
    {
        // RFC 9002 §6.2.4: with no new data, a probe repeats unacknowledged data
        // (data held back by flow control is not "no data": the DES sends no
        // probe then either, and waits for credit).
        for (const SentPacket& sp : m_sent)
        {
            if (!sp.acked && !sp.lost && sp.sent >= Time(0))
            {
                chunk = sp.chunk;
                ++m_conn->stats.retransmissions;
                return true;
            }
        }
    }
    return false;
}

void
QuicSender::OnBatchBuilt(uint64_t firstPn, uint32_t count, double cpuNs)
{
    Time now = Simulator::Now();
    double rateBps = kPacingGain * static_cast<double>(m_cc.Cwnd()) / m_rtt.smoothed;
    // The pacer is a token bucket kept as the time it would be empty
    // (m_nextRelease): a packet may leave up to `ahead` before it, so a full
    // bucket sends `burst` bytes back to back (as the DES's sender).
    double payload = static_cast<double>(m_p.udpPayload);
    double burstMax = m_p.pacingBurstMax > 0 ? m_p.pacingBurstMax * payload
                                             : std::numeric_limits<double>::infinity();
    Time ahead = Seconds(0);
    if (burstMax > payload)
    {
        double burst = std::clamp(rateBps * m_p.pacingBurstS, m_p.pacingBurstMin * payload,
                                  burstMax);
        if (burst > payload)
        {
            ahead = Seconds((burst - payload) / rateBps);
        }
    }
    // A pacer that has to wait waits at least pacingMinDelayS after its last
    // packet (a timer's granularity), then sends what the bucket gathered.
    Time minDelay = Seconds(m_p.pacingMinDelayS);
    // Paced packets leave in order: a batch starts no earlier than the last one.
    Time release = m_p.pacing ? std::max(now, m_paceLast) : now;
    uint32_t skbBytes = kGroSkbOverhead;
    for (uint64_t pn = firstPn; pn < firstPn + count; ++pn)
    {
        skbBytes += At(pn).bytes;
    }
    for (uint64_t pn = firstPn; pn < firstPn + count; ++pn)
    {
        At(pn).skb = m_conn->coalesce ? firstPn : kNoSkb;
        At(pn).skbBytes = skbBytes;
        if (!m_p.pacing)
        {
            SendNow(pn);
            continue;
        }
        if (m_nextRelease - ahead > release)
        {
            release = m_nextRelease - ahead;
            if (m_paceLast >= Time(0) && release < m_paceLast + minDelay)
            {
                release = m_paceLast + minDelay;
            }
        }
        m_nextRelease = std::max(m_nextRelease, release) + Seconds(At(pn).bytes / rateBps);
        m_paceLast = release;
        if (release <= now)
        {
            SendNow(pn);
        }
        else
        {
            Simulator::Schedule(release - now, &QuicSender::SendNow, this, pn);
        }
    }
    if (m_p.interopBusy < 1.0)
    {
        // TRANSPORT.md "Pair interplay": c·(1/busy − 1) of idle send loop.
        m_holdUntil = now + Time::FromDouble(cpuNs * (1.0 / m_p.interopBusy - 1.0), Time::NS);
    }
    Kick();
}

void
QuicSender::SendNow(uint64_t pn)
{
    SentPacket& sp = At(pn);
    Time now = Simulator::Now();
    sp.sent = now;
    QuicHeader header;
    header.type = PacketType::Data;
    header.number = pn;
    header.stream = sp.chunk.stream;
    header.offset = sp.chunk.offset;
    header.length = sp.chunk.length;
    header.skb = sp.skb;
    header.skbBytes = sp.skbBytes;
    uint32_t size = sp.bytes + m_conn->padBytes;
    Ptr<ns3::Packet> packet =
        ns3::Create<ns3::Packet>(size - std::min(size, header.GetSerializedSize()));
    packet->AddHeader(header);
    m_socket->Send(packet);
    ++m_conn->stats.dataSent;
    m_lastAckElicitingSent = now;
    ArmTimer();
}

void
QuicSender::OnAckProcessed(const AckFrame& frame)
{
    ApplyAck(frame);
    Kick();
}

void
QuicSender::ApplyAck(const AckFrame& frame)
{
    Time now = Simulator::Now();
    double nowS = now.GetSeconds();
    if (frame.maxData != kUnlimited || m_maxData == kUnlimited)
    {
        m_maxData = m_maxData == kUnlimited ? frame.maxData : std::max(m_maxData, frame.maxData);
    }
    for (const auto& [id, limit] : frame.maxStreamData)
    {
        m_streams[id].maxData = std::max(m_streams[id].maxData, limit);
    }
    for (uint32_t id : frame.openStreams)
    {
        m_streams[id].open = true;
        m_roundRobin.push_back(id);
    }
    if (!frame.hasAck)
    {
        return;
    }
    m_largestAcked = std::max<int64_t>(m_largestAcked, static_cast<int64_t>(frame.largest));
    uint64_t ackedBytes = 0;
    Time largestSent(-1), newestSent(-1);
    const uint64_t end = m_base + m_sent.size();
    for (const auto& [lo, hi] : frame.ranges)
    {
        for (uint64_t pn = std::max(lo, m_base); pn <= hi && pn < end; ++pn)
        {
            SentPacket& sp = At(pn);
            if (sp.acked)
            {
                continue;
            }
            sp.acked = true;
            if (pn == frame.largest)
            {
                largestSent = sp.sent;
            }
            if (sp.lost)
            {
                ++m_conn->stats.spurious; // declared lost, arrived late (reordering)
                continue;
            }
            m_inflight -= sp.bytes;
            ackedBytes += sp.bytes;
            newestSent = std::max(newestSent, sp.sent);
        }
    }
    if (largestSent >= Time(0))
    {
        // RFC 9002 §5.1: a sample when the largest acknowledged is newly acked.
        m_rtt.Update((now - largestSent).GetSeconds(), frame.ackDelayS, m_p.maxAckDelayS);
    }
    // RFC 9002 §7.8 as TRANSPORT.md reads it: grow unless the sender was
    // app-limited since the last ACK (cwndValidation 0); opt-in: only when
    // cwnd-limited — Linux's rule in slow start (cwnd < 2 × bytes in flight), in
    // congestion avoidance within one send call of the window (1); every ACK (2).
    // RFC 9002 §7.3.2: and not for packets sent before the current recovery
    // period began.
    const uint64_t cwnd = m_cc.Cwnd();
    bool limited;
    if (m_p.cwndValidation == 0)
    {
        limited = !m_appLimitedSinceAck;
    }
    else if (m_p.cwndValidation == 2)
    {
        limited = true;
    }
    else
    {
        limited = m_cwndBlockedSinceAck ||
                  (m_cc.InSlowStart()
                       ? 2 * m_maxInflightSinceAck > cwnd
                       : m_maxInflightSinceAck + uint64_t{m_p.udpPayload} * m_p.sSegments >= cwnd);
    }
    if (ackedBytes > 0 && newestSent.GetSeconds() > m_recoveryStart)
    {
        m_cc.OnAck(ackedBytes, nowS, m_rtt.smoothed, limited, m_rtt.min);
    }
    m_cwndBlockedSinceAck = false;
    m_appLimitedSinceAck = false;
    m_maxInflightSinceAck = m_inflight;
    DetectLost();
    m_ptoCount = 0; // RFC 9002 §6.2.1: backoff reset on an acknowledgment
    while (!m_sent.empty() && (m_sent.front().acked || m_sent.front().lost))
    {
        m_sent.pop_front();
        ++m_base;
    }
    m_conn->stats.cwndBytesSum += static_cast<double>(m_cc.Cwnd());
    m_conn->stats.srttSum += m_rtt.smoothed;
    ++m_conn->stats.cwndSamples;
    ArmTimer();
}

void
QuicSender::DetectLost()
{
    m_lossTime = Time(-1);
    if (m_largestAcked < 0)
    {
        return;
    }
    Time now = Simulator::Now();
    // RFC 9002 §6.1.2: 9/8 × max(smoothed_rtt, latest_rtt), at least kGranularity.
    Time lossDelay =
        Seconds(std::max(kTimeThreshold * std::max(m_rtt.smoothed, m_rtt.latest), kGranularityS));
    Time lostSendTime = now - lossDelay;
    const auto largest = static_cast<uint64_t>(m_largestAcked);
    const uint64_t end = std::min<uint64_t>(m_base + m_sent.size(), largest);
    uint64_t lostCount = 0, firstLost = 0, lastLost = 0;
    Time firstLostSent, lastLostSent;
    for (uint64_t pn = m_base; pn < end; ++pn)
    {
        SentPacket& sp = At(pn);
        if (sp.acked || sp.lost || sp.sent < Time(0))
        {
            continue;
        }
        if (sp.sent <= lostSendTime || largest >= pn + kPacketThreshold)
        {
            if (lostCount++ == 0)
            {
                firstLost = pn;
                firstLostSent = sp.sent;
            }
            lastLost = pn;
            lastLostSent = sp.sent;
            DeclareLost(sp);
        }
        else if (m_lossTime < Time(0) || sp.sent + lossDelay < m_lossTime)
        {
            m_lossTime = sp.sent + lossDelay;
        }
    }
    // RFC 9002 §7.6: persistent congestion when every packet over a span longer
    // than kPersistentCongestionThreshold (3) × PTO was lost (judged, as the
    // DES does, within one detection round of consecutive packet numbers).
    if (lostCount >= 2 && lastLost - firstLost + 1 == lostCount &&
        (lastLostSent - firstLostSent).GetSeconds() > kPersistentCongestion * PtoS())
    {
        m_cc.OnPersistentCongestion();
    }
}

void
QuicSender::DeclareLost(SentPacket& sp)
{
    Stats& st = m_conn->stats;
    sp.lost = true;
    m_inflight -= sp.bytes;
    m_retx.push_back(sp.chunk);
    ++st.declaredLost;
    bool rcvbuf = sp.cause == DropCause::Rcvbuf;
    st.lostRcvbuf += rcvbuf ? 1 : 0;
    double nowS = Simulator::Now().GetSeconds();
    // RFC 9002 §7.3.2: one reduction per recovery period.
    if (sp.sent.GetSeconds() > m_recoveryStart)
    {
        m_cc.OnCongestionEvent(nowS);
        m_recoveryStart = nowS;
        ++st.congestionEvents;
        st.congestionEventsRcvbuf += rcvbuf ? 1 : 0;
    }
}

void
QuicSender::MarkDropped(uint64_t pn, DropCause cause)
{
    if (pn >= m_base && pn < m_base + m_sent.size())
    {
        At(pn).cause = cause;
    }
}

double
QuicSender::PtoS() const
{
    // RFC 9002 §6.2.1: PTO = smoothed_rtt + max(4·rttvar, kGranularity) + max_ack_delay.
    return m_rtt.smoothed + std::max(4 * m_rtt.var, kGranularityS) + m_p.maxAckDelayS;
}

void
QuicSender::ArmTimer()
{
    Time now = Simulator::Now();
    Time deadline(-1);
    if (m_lossTime >= Time(0))
    {
        deadline = m_lossTime;
    }
    else if (m_inflight > 0)
    {
        // RFC 9002 §6.2.1: doubled for every consecutive PTO.
        deadline = m_lastAckElicitingSent + Seconds(PtoS() * std::ldexp(1.0, m_ptoCount));
    }
    m_deadline = deadline;
    if (deadline < Time(0))
    {
        return;
    }
    // Lazy timer: keep a pending event that fires no later than the deadline.
    if (!m_timer.IsPending() ||
        m_timer.GetTs() > static_cast<uint64_t>(deadline.GetTimeStep()))
    {
        m_timer.Cancel();
        m_timer = Simulator::Schedule(std::max(deadline - now, Time(0)), &QuicSender::OnTimer, this);
    }
}

void
QuicSender::OnTimer()
{
    Time now = Simulator::Now();
    if (m_deadline < Time(0))
    {
        return;
    }
    if (now < m_deadline)
    {
        m_timer = Simulator::Schedule(m_deadline - now, &QuicSender::OnTimer, this);
        return;
    }
    if (m_lossTime >= Time(0))
    {
        DetectLost(); // RFC 9002 §6.1.2 time-threshold loss
    }
    else
    {
        // RFC 9002 §6.2.4: send two ack-eliciting probe packets.
        ++m_ptoCount;
        ++m_conn->stats.ptoCount;
        m_probes = 2;
    }
    ArmTimer();
    Kick();
}

} // namespace quiclab
