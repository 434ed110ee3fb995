// quiclab ns-3 engine: one run. Reads the resolved Scenario as --Name=value
// arguments (ns-3 CommandLine), simulates the transfer (or its prefix) and
// prints one JSON object on stdout: raw counters at the start of the
// measurement window ("warm") and at the end ("end"). The Python side
// (quiclab.sim.ns3.engine) turns them into a Prediction.
#include "path.h"
#include "transport.h"

#include "ns3/core-module.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>

using namespace ns3;
using quiclab::Connection;
using quiclab::DropCause;
using quiclab::Params;
using quiclab::QuicHeader;

namespace
{
constexpr uint16_t kServerPort = 4433;
constexpr uint16_t kClientPort = 4434;
// The skb truesize Linux charges the receive buffer per datagram (TRANSPORT.md
// "Receive buffer"; sim/rcvbuf.py skb_truesize): headroom, headers, payload
// and skb_shared_info rounded up to a power of two (at least 512), plus the sk_buff.
constexpr uint64_t kSkbHeadBytes = 64 + 42 + 320;
constexpr uint64_t kSkbStructBytes = 256;
constexpr uint64_t kSkbMinAllocBytes = 512;

} // namespace

uint64_t
quiclab::SkbTruesize(uint64_t udpPayload)
{
    uint64_t need = udpPayload + kSkbHeadBytes;
    uint64_t alloc = kSkbMinAllocBytes;
    while (alloc < need)
    {
        alloc *= 2;
    }
    return alloc + kSkbStructBytes;
}

namespace
{
constexpr int64_t kStreamStalls = 3;

void
AddOptions(CommandLine& cmd, Params& p)
{
    cmd.AddValue("linkBps", "link rate, bit/s", p.linkBps);
    cmd.AddValue("mtuBytes", "path MTU, bytes", p.mtuBytes);
    cmd.AddValue("rttS", "round-trip propagation delay, s", p.rttS);
    cmd.AddValue("lossProb", "forward packet loss probability", p.lossProb);
    cmd.AddValue("reorderProb", "forward packet reordering probability", p.reorderProb);
    cmd.AddValue("queueBytes", "bottleneck drop-tail queue, bytes", p.queueBytes);
    cmd.AddValue("rcvbufBytes", "receiver UDP socket buffer, bytes", p.rcvbufBytes);
    cmd.AddValue("udpPayload", "UDP payload of a full data packet, bytes", p.udpPayload);
    cmd.AddValue("streamBytes", "goodput bytes of a full data packet", p.streamBytes);
    cmd.AddValue("transferBytes", "bytes to transfer", p.transferBytes);
    cmd.AddValue("streams", "concurrent streams (requests)", p.streams);
    cmd.AddValue("chunks", "requests the transfer is split into", p.chunks);
    cmd.AddValue("cc", "congestion control: cubic | reno", p.cc);
    cmd.AddValue("sNsPacket", "sender CPU per data packet, ns", p.sNsPacket);
    cmd.AddValue("sNsCall", "sender CPU per send call, ns", p.sNsCall);
    cmd.AddValue("sNsAck", "sender CPU per ACK received, ns", p.sNsAck);
    cmd.AddValue("sSegments", "packets per send call (GSO)", p.sSegments);
    cmd.AddValue("sCores", "sender cores", p.sCores);
    cmd.AddValue("pacing", "sender paces (RFC 9002 7.7)", p.pacing);
    cmd.AddValue("pacingBurstS", "pacer bucket: seconds of the pacing rate", p.pacingBurstS);
    cmd.AddValue("pacingBurstMin", "pacer bucket: at least this many datagrams", p.pacingBurstMin);
    cmd.AddValue("pacingBurstMax", "pacer bucket: at most this many datagrams (0: none)",
                 p.pacingBurstMax);
    cmd.AddValue("pacingMinDelayS", "a waiting pacer waits at least this long, s",
                 p.pacingMinDelayS);
    cmd.AddValue("rNsPacket", "receiver CPU per data packet, ns", p.rNsPacket);
    cmd.AddValue("rNsCall", "receiver CPU per receive call, ns", p.rNsCall);
    cmd.AddValue("rNsAck", "receiver CPU per ACK sent, ns", p.rNsAck);
    cmd.AddValue("rSegments", "datagrams per receive call (GRO)", p.rSegments);
    cmd.AddValue("rCores", "receiver cores", p.rCores);
    cmd.AddValue("ackEvery", "ack-eliciting packets per ACK", p.ackEvery);
    cmd.AddValue("immediateAck", "ACK at once for a packet that opens a gap or arrives out of order", p.immediateAck);
    cmd.AddValue("maxAckDelayS", "max_ack_delay the receiver advertises, s", p.maxAckDelayS);
    cmd.AddValue("ackTimerS", "the receiver's delayed-ACK timer, s", p.ackTimerS);
    cmd.AddValue("ackFloor", "the capped ACK threshold never asks for fewer packets", p.ackFloor);
    cmd.AddValue("fcWindowBytes", "connection flow-control window, bytes (0 = none)",
                 p.fcWindowBytes);
    cmd.AddValue("stallRateHz", "receiver stall rate, 1/s", p.stallRateHz);
    cmd.AddValue("stallMinS", "receiver stall Pareto minimum, s", p.stallMinS);
    cmd.AddValue("stallAlpha", "receiver stall Pareto shape", p.stallAlpha);
    cmd.AddValue("interopBusy", "pair interplay busy fraction", p.interopBusy);
    cmd.AddValue("ackWindowFraction", "ACK at least every this fraction of cwnd (0 = off)",
                 p.ackWindowFraction);
    cmd.AddValue("cwndValidation",
                 "RFC 9002 7.8: 0 grow unless app-limited, 1 only while in flight fills cwnd, "
                 "2 every ACK",
                 p.cwndValidation);
    cmd.AddValue("renoBeta", "NewReno's multiplicative decrease (RFC 9002: 0.5)", p.renoBeta);
    cmd.AddValue("cubicTimeFriendly",
                 "CUBIC's Reno-friendly estimate grows with time over min RTT (RFC 8312 4.2)",
                 p.cubicTimeFriendly);
    cmd.AddValue("cubicTimeSmoothed",
                 "... over the smoothed RTT, growth at most one datagram per datagram acked",
                 p.cubicTimeSmoothed);
    cmd.AddValue("seed", "random seed", p.seed);
    cmd.AddValue("run", "run number", p.run);
    cmd.AddValue("prefixBytes", "stop after this many goodput bytes (0 = whole transfer)",
                 p.prefixBytes);
    cmd.AddValue("warmFraction", "fraction of the run before the measurement window",
                 p.warmFraction);
    cmd.AddValue("minWindowEvents", "congestion events a loss-driven window must hold",
                 p.minWindowEvents);
    cmd.AddValue("prefixExtend", "how many prefixes a run may grow to", p.prefixExtend);
    cmd.AddValue("maxSimS", "simulated-time limit, s", p.maxSimS);
}

// Trace sinks: link busy time and the cause of every dropped data packet.
void
OnPhyTxBegin(Connection* conn, Ptr<const Packet> packet)
{
    conn->stats.linkBusyS += packet->GetSize() * 8.0 / conn->params.linkBps;
}

void
MarkData(Connection* conn, Ptr<Packet> copy, DropCause cause)
{
    QuicHeader header;
    if (copy->PeekHeader(header) == header.GetSerializedSize() &&
        header.type == quiclab::PacketType::Data)
    {
        conn->sender->MarkDropped(header.number, cause);
    }
}

void
OnPathDrop(Connection* conn, Ptr<const Packet> packet)
{
    ++conn->stats.pathDrops;
    Ptr<Packet> copy = packet->Copy();
    PppHeader ppp;
    Ipv4Header ip;
    UdpHeader udp;
    copy->RemoveHeader(ppp);
    copy->RemoveHeader(ip);
    copy->RemoveHeader(udp);
    MarkData(conn, copy, DropCause::Path);
}

void
OnQueueDrop(Connection* conn, Ptr<const QueueDiscItem> item)
{
    ++conn->stats.queueDrops;
    Ptr<Packet> copy = item->GetPacket()->Copy();
    UdpHeader udp;
    copy->RemoveHeader(udp);
    MarkData(conn, copy, DropCause::Queue);
}

void
OnRcvbufDrop(Connection* conn, Ptr<const Packet> packet)
{
    ++conn->stats.rcvbufDrops;
    MarkData(conn, packet->Copy(), DropCause::Rcvbuf);
}

void
PrintStats(const char* name, const quiclab::Stats& s)
{
    std::printf("\"%s\":{\"time_s\":%.17g,\"consumed_bytes\":%llu,\"sender_busy_s\":%.17g,"
                "\"receiver_busy_s\":%.17g,\"link_busy_s\":%.17g,\"data_sent\":%llu,"
                "\"retransmissions\":%llu,\"acks_received\":%llu,\"sender_calls\":%llu,"
                "\"data_processed\":%llu,\"acks_sent\":%llu,\"receiver_calls\":%llu,"
                "\"path_drops\":%llu,\"queue_drops\":%llu,\"rcvbuf_drops\":%llu,"
                "\"declared_lost\":%llu,\"spurious\":%llu,\"ptos\":%llu,"
                "\"congestion_events\":%llu,\"congestion_events_rcvbuf\":%llu,"
                "\"lost_rcvbuf\":%llu,\"stalls\":%llu,\"stall_s\":%.17g,"
                "\"cwnd_bytes_sum\":%.17g,\"srtt_s_sum\":%.17g,"
                "\"cwnd_samples\":%llu,"
                "\"state_s\":{\"busy\":%.17g,\"cwnd\":%.17g,\"flow_control\":%.17g,"
                "\"interop\":%.17g,\"no_data\":%.17g}}",
                name, s.timeS, (unsigned long long)s.consumedBytes, s.senderBusyS,
                s.receiverBusyS, s.linkBusyS, (unsigned long long)s.dataSent,
                (unsigned long long)s.retransmissions, (unsigned long long)s.acksReceived,
                (unsigned long long)s.senderCalls, (unsigned long long)s.dataProcessed,
                (unsigned long long)s.acksSent, (unsigned long long)s.receiverCalls,
                (unsigned long long)s.pathDrops, (unsigned long long)s.queueDrops,
                (unsigned long long)s.rcvbufDrops, (unsigned long long)s.declaredLost,
                (unsigned long long)s.spurious, (unsigned long long)s.ptoCount,
                (unsigned long long)s.congestionEvents,
                (unsigned long long)s.congestionEventsRcvbuf, (unsigned long long)s.lostRcvbuf,
                (unsigned long long)s.stalls, s.stallS, s.cwndBytesSum, s.srttSum, (unsigned long long)s.cwndSamples, s.stateS[quiclab::kBusy],
                s.stateS[quiclab::kCwnd], s.stateS[quiclab::kFlowControl],
                s.stateS[quiclab::kInterop], s.stateS[quiclab::kNoData]);
}
} // namespace

int
main(int argc, char* argv[])
{
    // Picosecond resolution: CPU work items of a few hundred ns are not rounded.
    Time::SetResolution(Time::PS);
    auto conn = std::make_unique<Connection>();
    Params& p = conn->params;
    CommandLine cmd;
    AddOptions(cmd, p);
    std::string scheduler = "ns3::PriorityQueueScheduler";
    cmd.AddValue("scheduler", "ns-3 event scheduler", scheduler);
    cmd.Parse(argc, argv);
    if (p.chunks < 1 || p.streams < 1 || p.streamBytes < 1 || p.streamBytes > p.udpPayload ||
        p.sSegments < 1 || p.rSegments < 1 || p.ackEvery <= 0 || p.linkBps <= 0 ||
        p.rttS <= 0 || p.transferBytes < p.chunks || p.interopBusy <= 0 || p.ackFloor < 1 ||
        p.ackTimerS < 0 || p.renoBeta <= 0 || p.renoBeta >= 1 || p.seed >> 63 != 0 ||
        p.run >> 31 != 0)
    {
        std::fprintf(stderr, "quiclab-ns3: inconsistent parameters (see --PrintHelp)\n");
        return 2;
    }
    // Every (seed, run) its own streams: ns-3's seed is 32 bits and must be
    // non-zero, its run (the substream) 64 bits. The seed's low 31 bits + 1 are
    // ns-3's seed (seed 0 is ns-3's seed 1); its high 32 bits (a Scenario seed is
    // < 2^63, checked above) sit above the run's 31 bits in ns-3's run. For seeds
    // below 2^31 that is SetSeed(seed + 1), SetRun(run).
    RngSeedManager::SetSeed(static_cast<uint32_t>(p.seed & 0x7fffffffULL) + 1);
    RngSeedManager::SetRun(((p.seed >> 31) << 31) | p.run);
    Simulator::SetScheduler(ObjectFactory(scheduler));

    NodeContainer nodes;
    nodes.Create(2);
    quiclab::PathParts path = quiclab::BuildPath(nodes, p);
    conn->padBytes = path.padBytes;

    Ptr<Socket> serverSocket = Socket::CreateSocket(nodes.Get(0), UdpSocketFactory::GetTypeId());
    serverSocket->SetAttribute("RcvBufSize", UintegerValue(1u << 30));
    serverSocket->Bind(InetSocketAddress(Ipv4Address::GetAny(), kServerPort));
    serverSocket->Connect(InetSocketAddress(path.receiverAddress, kClientPort));
    // A datagram is admitted while occupancy + its truesize ≤ rcvbuf, so the
    // buffer holds floor(rcvbuf / truesize) full datagrams, as in the DES (resolve
    // refuses a buffer below one truesize; the max(1, …) only guards the division);
    // ns-3 counts payload bytes, so its RcvBufSize is that many padded payloads.
    // With GRO coalescing the receiver keeps the buffer itself (one decision per
    // skb, quic_receiver.cc) and the ns-3 socket only hands datagrams over.
    conn->coalesce = p.sSegments > 1 && p.rSegments > 1;
    uint64_t truesize = quiclab::SkbTruesize(p.udpPayload);
    uint64_t datagrams = std::max<uint64_t>(1, p.rcvbufBytes / truesize);
    uint64_t rcvbuf = conn->coalesce ? 0xffffffffULL
                                     : std::min<uint64_t>(datagrams * (p.udpPayload + conn->padBytes),
                                                          0xffffffffULL);
    Ptr<Socket> clientSocket = Socket::CreateSocket(nodes.Get(1), UdpSocketFactory::GetTypeId());
    clientSocket->SetAttribute("RcvBufSize", UintegerValue(static_cast<uint32_t>(rcvbuf)));
    clientSocket->Bind(InetSocketAddress(Ipv4Address::GetAny(), kClientPort));
    clientSocket->Connect(InetSocketAddress(path.senderAddress, kServerPort));

    auto stallRng = CreateObject<UniformRandomVariable>();
    stallRng->SetStream(kStreamStalls);
    auto sender = CreateObject<quiclab::QuicSender>(conn.get(), serverSocket);
    auto receiver = CreateObject<quiclab::QuicReceiver>(conn.get(), clientSocket, stallRng);
    conn->sender = PeekPointer(sender);
    conn->receiver = PeekPointer(receiver);
    nodes.Get(0)->AddApplication(sender);
    nodes.Get(1)->AddApplication(receiver);
    sender->SetStartTime(Seconds(0));
    receiver->SetStartTime(Seconds(0));

    path.senderDevice->TraceConnectWithoutContext("PhyTxBegin",
                                                  MakeBoundCallback(&OnPhyTxBegin, conn.get()));
    path.receiverDevice->TraceConnectWithoutContext("PhyRxDrop",
                                                    MakeBoundCallback(&OnPathDrop, conn.get()));
    path.bottleneck->TraceConnectWithoutContext("Drop",
                                                MakeBoundCallback(&OnQueueDrop, conn.get()));
    clientSocket->TraceConnectWithoutContext("Drop", MakeBoundCallback(&OnRcvbufDrop, conn.get()));

    Simulator::Stop(Seconds(p.maxSimS));
    auto wall0 = std::chrono::steady_clock::now();
    std::clock_t cpu0 = std::clock();
    Simulator::Run();
    double cpuS = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
    double wallS = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    quiclab::Stats end;
    quiclab::TakeSnapshot(conn.get(), end);
    if (!conn->warmTaken)
    {
        conn->warm = quiclab::Stats{};
    }
    const char* stopped = conn->completed ? "completed"
                          : conn->prefixReached ? "prefix"
                                                : "time_limit";
    std::printf("{\"completed\":%s,\"stopped_by\":\"%s\",\"completion_s\":%.17g,"
                "\"pad_bytes\":%u,\"rcvbuf_datagrams\":%llu,\"events\":%llu,\"cpu_s\":%.6g,"
                "\"wall_s\":%.6g,",
                conn->completed ? "true" : "false", stopped, conn->completionS, conn->padBytes,
                (unsigned long long)datagrams, (unsigned long long)Simulator::GetEventCount(),
                cpuS, wallS);
    PrintStats("warm", conn->warm);
    std::printf(",");
    PrintStats("end", end);
    std::printf("}\n");
    Simulator::Destroy();
    return 0;
}
