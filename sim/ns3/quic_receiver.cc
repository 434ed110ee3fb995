// quiclab ns-3 engine: the receiving endpoint (the client of a download).
//
// Datagrams wait in the ns-3 UdpSocket's receive buffer (its RcvBufSize is the
// Scenario's rcvbuf, see main.cc) until the receiver's CPU is free; one receive
// call takes up to `rSegments` of them (GRO), then each is processed. ACKs
// follow RFC 9000 §13.2 as TRANSPORT.md "ACKs" specifies; MAX_DATA and
// MAX_STREAM_DATA ride on every ACK. Scheduling stalls make the CPU unavailable
// for Pareto-distributed times (TRANSPORT.md "Receive buffer").
#include "transport.h"

#include "ns3/packet.h"
#include "ns3/simulator.h"

#include <algorithm>
#include <cmath>

namespace quiclab
{

using ns3::Ptr;
using ns3::Seconds;
using ns3::Simulator;
using ns3::Time;

void
TakeSnapshot(Connection* conn, Stats& out)
{
    conn->sender->FinishAccounting();
    out = conn->stats;
    out.timeS = Simulator::Now().GetSeconds();
}

QuicReceiver::QuicReceiver(Connection* conn,
                           Ptr<ns3::Socket> socket,
                           Ptr<ns3::RandomVariableStream> uniform)
    : m_conn(conn),
      m_p(conn->params),
      m_socket(socket),
      m_uniform(uniform)
{
    m_streams.resize(m_p.chunks);
    // TRANSPORT.md: stream windows are the connection window divided among
    // `streams` (never below one packet, so that a stream can always progress).
    uint64_t window = kUnlimited;
    if (m_p.fcWindowBytes > 0)
    {
        window = std::max<uint64_t>(m_p.fcWindowBytes / m_p.streams, m_p.streamBytes);
    }
    for (uint32_t i = 0; i < m_p.chunks; ++i)
    {
        m_streams[i].size = ChunkSize(m_p, i);
        m_streams[i].window = window;
    }
}

void
QuicReceiver::StartApplication()
{
    m_cpu.Configure(m_p.rCores);
    m_nextSnapshotBytes = std::max<uint64_t>(1, m_p.prefixBytes / 16);
    m_socket->SetRecvCallback(MakeCallback(&QuicReceiver::OnReadable, this));
    // TRANSPORT.md "Outputs": the handshake takes one RTT; then the client's
    // requests (with its initial credit) go out and data starts half an RTT later.
    Simulator::Schedule(Seconds(m_p.rttS), &QuicReceiver::SendRequests, this);
    if (m_p.stallRateHz > 0 && m_p.stallMinS > 0 && m_p.stallAlpha > 0)
    {
        ScheduleStall();
    }
}

void
QuicReceiver::StopApplication()
{
    m_ackTimer.Cancel();
}

void
QuicReceiver::OnReadable(Ptr<ns3::Socket>)
{
    if (m_conn->coalesce)
    {
        // GRO (TRANSPORT.md "Receive buffer"): each GSO batch of the sender is one
        // skb, admitted whole while occupancy + its truesize fits the buffer (or
        // the buffer is empty) and dropped whole otherwise; its first datagram is
        // charged the skb's overhead, every one its UDP payload (as the DES).
        while (Ptr<ns3::Packet> packet = m_socket->Recv())
        {
            QuicHeader header;
            packet->PeekHeader(header);
            double payload = static_cast<double>(packet->GetSize() - m_conn->padBytes);
            if (header.skb != m_skb)
            {
                m_skb = header.skb;
                m_skbIn = m_buffer.empty() ||
                          m_occupancy + header.skbBytes <= static_cast<double>(m_p.rcvbufBytes);
            }
            if (m_skbIn)
            {
                double charge = payload + (header.number == header.skb ? kGroSkbOverhead : 0);
                m_occupancy += charge;
                m_buffer.emplace_back(packet, charge);
                continue;
            }
            ++m_conn->stats.rcvbufDrops;
            m_conn->sender->MarkDropped(header.number, DropCause::Rcvbuf);
        }
    }
    Kick();
}

void
QuicReceiver::OpenStream(uint32_t id)
{
    m_streams[id].open = true;
    m_newRequests.push_back(id);
}

void
QuicReceiver::SendRequests()
{
    // TRANSPORT.md "Flow control": at most `streams` requests in flight.
    while (m_nextRequest < std::min(m_p.streams, m_p.chunks))
    {
        OpenStream(m_nextRequest++);
    }
    // The requests ride on the client's handshake flight (no ACK work, as in the DES).
    SendAck(m_conn->frames.Push(BuildFrame()));
}

void
QuicReceiver::Kick()
{
    Time now = Simulator::Now();
    Stats& st = m_conn->stats;
    while (m_cpu.HasIdleCore(now))
    {
        if (m_ackDue)
        {
            m_ackDue = false;
            uint64_t seq = m_conn->frames.Push(BuildFrame());
            Time finish = m_cpu.Start(now, m_p.rNsAck);
            st.receiverBusyS = m_cpu.busyS;
            Simulator::Schedule(finish - now, &QuicReceiver::OnAckBuilt, this, m_cpu.LastItem(),
                                seq);
            continue;
        }
        if (!m_pending.empty() && m_pending.front().second <= now)
        {
            Ptr<ns3::Packet> packet = m_pending.front().first;
            m_pending.pop_front();
            Time finish = m_cpu.Start(now, m_p.rNsPacket);
            st.receiverBusyS = m_cpu.busyS;
            Simulator::Schedule(finish - now, &QuicReceiver::OnPacketProcessed, this,
                                m_cpu.LastItem(), packet);
            continue;
        }
        bool readable = m_conn->coalesce ? !m_buffer.empty() : m_socket->GetRxAvailable() > 0;
        if (m_pending.empty() && readable)
        {
            // One receive call (GRO batch): the datagrams leave the socket
            // buffer now and are processed once the call's work is done.
            Time finish = m_cpu.Start(now, m_p.rNsCall);
            st.receiverBusyS = m_cpu.busyS;
            ++st.receiverCalls;
            for (uint32_t i = 0; i < m_p.rSegments; ++i)
            {
                Ptr<ns3::Packet> packet;
                if (m_conn->coalesce)
                {
                    if (m_buffer.empty())
                    {
                        break;
                    }
                    packet = m_buffer.front().first;
                    m_occupancy -= m_buffer.front().second;
                    m_buffer.pop_front();
                    if (m_buffer.empty())
                    {
                        m_occupancy = 0; // (no float drift when empty)
                    }
                }
                else
                {
                    packet = m_socket->Recv();
                }
                if (!packet)
                {
                    break;
                }
                m_pending.emplace_back(packet, finish);
            }
            if (finish > now)
            {
                Simulator::Schedule(finish - now, &QuicReceiver::OnCallDone, this,
                                    m_cpu.LastItem());
            }
            continue;
        }
        break;
    }
}

bool
QuicReceiver::Preempted(CpuServer::Item item) const
{
    // A stall that began while the item ran pushed its end back (see OnStall).
    Time until = m_cpu.RunningUntil(item, Simulator::Now());
    return until >= Time(0);
}

void
QuicReceiver::OnCallDone(CpuServer::Item item)
{
    if (Preempted(item))
    {
        Simulator::Schedule(m_cpu.FreeAt(item.core) - Simulator::Now(),
                            &QuicReceiver::OnCallDone, this, item);
        return;
    }
    Kick();
}

bool
QuicReceiver::PrefixDone()
{
    // Snapshots every 1/16 of the prefix; once the prefix
    // is simulated, the window starts at the last snapshot at or below
    // warm_fraction of the goodput so far. A loss-driven run continues (up to
    // prefix_extend prefixes) until that window holds min_window_events
    // congestion events — the DES's rule, so both measure the same steady state.
    Stats snap;
    TakeSnapshot(m_conn, snap);
    m_conn->snapshots.push_back(snap);
    m_nextSnapshotBytes = snap.consumedBytes + std::max<uint64_t>(1, m_p.prefixBytes / 16);
    if (snap.consumedBytes < m_p.prefixBytes)
    {
        return false;
    }
    const Stats* start = &m_conn->snapshots.front();
    for (const Stats& s : m_conn->snapshots)
    {
        if (static_cast<double>(s.consumedBytes) >
            m_p.warmFraction * static_cast<double>(snap.consumedBytes))
        {
            break;
        }
        start = &s;
    }
    uint64_t events = snap.congestionEvents - start->congestionEvents;
    bool capped = static_cast<double>(snap.consumedBytes) >=
                  m_p.prefixExtend * static_cast<double>(m_p.prefixBytes);
    if (snap.congestionEvents == 0 || events >= m_p.minWindowEvents || capped)
    {
        m_conn->warm = *start;
        m_conn->warmTaken = true;
        return true;
    }
    return false;
}

void
QuicReceiver::Deliver(RxStream& s, uint64_t offset, uint64_t end)
{
    Stats& st = m_conn->stats;
    if (end <= s.contiguous)
    {
        return; // duplicate (a spurious retransmission)
    }
    if (offset <= s.contiguous)
    {
        // In order: the application consumes at once; drain what was buffered.
        st.consumedBytes += end - s.contiguous;
        s.contiguous = end;
        while (!s.outOfOrder.empty() && s.outOfOrder.begin()->first <= s.contiguous)
        {
            uint64_t e = s.outOfOrder.begin()->second;
            if (e > s.contiguous)
            {
                st.consumedBytes += e - s.contiguous;
                s.contiguous = e;
            }
            s.outOfOrder.erase(s.outOfOrder.begin());
        }
    }
    else
    {
        uint64_t& stored = s.outOfOrder[offset];
        stored = std::max(stored, end);
    }
}

void
QuicReceiver::OnPacketProcessed(CpuServer::Item item, Ptr<ns3::Packet> packet)
{
    Time now = Simulator::Now();
    if (Preempted(item))
    {
        Simulator::Schedule(m_cpu.FreeAt(item.core) - now, &QuicReceiver::OnPacketProcessed,
                            this, item, packet);
        return;
    }
    Stats& st = m_conn->stats;
    QuicHeader header;
    packet->PeekHeader(header);
    ++st.dataProcessed;
    const auto pn = static_cast<int64_t>(header.number);
    if (!m_rangeHi.empty() && m_rangeHi.back() + 1 == header.number)
    {
        m_rangeHi.back() = header.number; // extends the newest range
    }
    else
    {
        m_rangeLo.push_back(header.number);
        m_rangeHi.push_back(header.number);
    }
    // RFC 9000 §13.2.1: this packet opens a gap (beyond the largest received + 1)
    // or arrives out of order (below the largest).
    const bool outOfOrder = m_largest >= 0 && (pn > m_largest + 1 || pn < m_largest);
    if (pn > m_largest)
    {
        m_largest = pn;
        m_largestTime = now;
    }
    RxStream& s = m_streams[header.stream];
    Deliver(s, header.offset, header.offset + header.length);
    if (!s.done && s.contiguous >= s.size)
    {
        s.done = true;
        if (m_nextRequest < m_p.chunks)
        {
            OpenStream(m_nextRequest++); // the next chunk's request rides on an ACK now
            m_ackDue = true;
        }
    }
    // End of the run: the whole transfer, or a prefix long enough to measure.
    if (st.consumedBytes >= m_p.transferBytes)
    {
        m_conn->completed = true;
        m_conn->completionS = now.GetSeconds();
        Simulator::Stop();
        return;
    }
    if (m_p.prefixBytes > 0 && st.consumedBytes >= m_nextSnapshotBytes && PrefixDone())
    {
        m_conn->prefixReached = true;
        Simulator::Stop();
        return;
    }
    // TRANSPORT.md "ACKs": immediately for a packet that opens a gap or arrives
    // out of order (RFC 9000 §13.2.1), else every ack_every_packets (fractional
    // credit), else after max_ack_delay.
    if (m_p.immediateAck && outOfOrder)
    {
        m_ackDue = true;
    }
    else
    {
        double every = m_p.ackEvery;
        if (m_p.ackWindowFraction > 0)
        {
            // TRANSPORT.md ACK-threshold cap (0 switches it off): draft-ietf-quic-
            // ack-frequency lets the sender ask for ACKs within its window.
            double window = m_p.ackWindowFraction * static_cast<double>(m_conn->sender->Cwnd()) /
                            m_p.udpPayload;
            // Never below the receiver's floor (Behaviour.ack_threshold_floor_packets),
            // nor later than ack_every would.
            double floor = std::min(m_p.ackFloor, std::max(m_p.ackEvery, 2.0));
            every = window < every ? std::max(floor, window) : every;
        }
        m_ackCredit += 1.0 / every;
        if (m_ackCredit >= 1.0 - 1e-9)
        {
            m_ackDue = true;
        }
    }
    if (!m_ackDue && m_ackDeadline < Time(0))
    {
        m_ackDeadline = now + Seconds(m_p.ackTimerS);
        if (!m_ackTimer.IsPending())
        {
            m_ackTimer = Simulator::Schedule(Seconds(m_p.ackTimerS), &QuicReceiver::OnAckTimer,
                                             this);
        }
    }
    Kick();
}

AckFrame
QuicReceiver::BuildFrame()
{
    Time now = Simulator::Now();
    AckFrame frame;
    if (!m_rangeLo.empty())
    {
        frame.hasAck = true;
        frame.largest = static_cast<uint64_t>(m_largest);
        frame.ackDelayS = (now - m_largestTime).GetSeconds();
        frame.ranges.reserve(m_rangeLo.size());
        for (size_t i = 0; i < m_rangeLo.size(); ++i)
        {
            frame.ranges.emplace_back(m_rangeLo[i], m_rangeHi[i]);
        }
        m_rangeLo.clear();
        m_rangeHi.clear();
    }
    if (m_p.fcWindowBytes > 0)
    {
        frame.maxData = m_conn->stats.consumedBytes + m_p.fcWindowBytes; // RFC 9000 §19.9
    }
    for (uint32_t id = 0; id < m_nextRequest; ++id)
    {
        const RxStream& s = m_streams[id];
        if (s.open && !s.done)
        {
            uint64_t limit = s.window == kUnlimited ? kUnlimited : s.contiguous + s.window;
            frame.maxStreamData.emplace_back(id, limit); // RFC 9000 §19.10
        }
    }
    frame.openStreams.swap(m_newRequests);
    // Every ACK acknowledges all packets so far; a fractional credit carries over.
    m_ackCredit = m_ackCredit >= 1.0 ? m_ackCredit - 1.0 : 0.0;
    m_ackDeadline = Time(-1);
    return frame;
}

void
QuicReceiver::OnAckBuilt(CpuServer::Item item, uint64_t seq)
{
    if (Preempted(item))
    {
        Simulator::Schedule(m_cpu.FreeAt(item.core) - Simulator::Now(),
                            &QuicReceiver::OnAckBuilt, this, item, seq);
        return;
    }
    ++m_conn->stats.acksSent;
    SendAck(seq);
    Kick();
}

void
QuicReceiver::SendAck(uint64_t seq)
{
    QuicHeader header;
    header.type = PacketType::Ack;
    header.number = seq;
    // TRANSPORT.md "ACKs": a 50-byte UDP payload (ACK_PACKET_BYTES in resolve.py).
    uint32_t size = 50 + m_conn->padBytes;
    Ptr<ns3::Packet> packet = ns3::Create<ns3::Packet>(size - header.GetSerializedSize());
    packet->AddHeader(header);
    m_socket->Send(packet);
}

void
QuicReceiver::OnAckTimer()
{
    Time now = Simulator::Now();
    if (m_ackDeadline < Time(0))
    {
        return;
    }
    if (now < m_ackDeadline)
    {
        m_ackTimer = Simulator::Schedule(m_ackDeadline - now, &QuicReceiver::OnAckTimer, this);
        return;
    }
    m_ackDeadline = Time(-1);
    m_ackDue = true; // RFC 9000 §13.2.1: max_ack_delay has passed
    Kick();
}

void
QuicReceiver::ScheduleStall()
{
    // Poisson stall arrivals (TRANSPORT.md "Scheduling stalls").
    double u = 1.0 - m_uniform->GetValue();
    Simulator::Schedule(Seconds(-std::log(u) / m_p.stallRateHz), &QuicReceiver::OnStall, this);
}

void
QuicReceiver::OnStall()
{
    // Pareto(τm, α) duration by inversion: τ = τm · U^(−1/α).
    double u = 1.0 - m_uniform->GetValue();
    Time now = Simulator::Now();
    Time until = now + Seconds(m_p.stallMinS * std::pow(u, -1.0 / m_p.stallAlpha));
    if (until > m_cpu.stalledUntil)
    {
        // The CPU does no work for this endpoint until `until`: items running
        // now are pre-empted and finish later by the newly stalled time, as are
        // datagrams a receive call has taken but not yet handed over.
        Time extra = until - std::max(now, m_cpu.stalledUntil);
        m_conn->stats.stalls += now >= m_cpu.stalledUntil ? 1 : 0;
        m_conn->stats.stallS += extra.GetSeconds();
        m_cpu.Preempt(now, extra);
        for (auto& [packet, ready] : m_pending)
        {
            if (ready > now)
            {
                ready += extra;
            }
        }
        m_cpu.stalledUntil = until;
        Simulator::Schedule(until - now, &QuicReceiver::Kick, this);
    }
    ScheduleStall();
}

} // namespace quiclab
