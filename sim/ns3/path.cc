// quiclab ns-3 engine: wiring of the path (TRANSPORT.md "Topology").
//
//   sender ── PointToPointNetDevice ═ ReorderingChannel (rtt/2) ═ PointToPointNetDevice ── receiver
//              FifoQueueDisc (queue_bytes, drop-tail)           RateErrorModel (loss_prob)
//
// Frame sizes: ns-3 puts a 2-byte PPP header, 20 bytes IPv4 and 8 bytes UDP
// around the UDP payload; TRANSPORT.md's wire size is payload + 28 + 38 bytes
// of Ethernet framing. Every UDP payload therefore carries `padBytes` = 36
// extra bytes, so the link's serialisation time is the Scenario's.
#include "path.h"

#include <algorithm>

namespace quiclab
{

using namespace ns3;

namespace
{
// Ethernet framing (38, resolve.ETHERNET_WIRE_OVERHEAD_BYTES) minus the PPP header (2).
constexpr uint32_t kPadBytes = 38 - 2;
// Streams of the run's random numbers (ns-3 SetSeed/SetRun select the run).
constexpr int64_t kStreamReorder = 1;
constexpr int64_t kStreamLoss = 2;
} // namespace

TypeId
ReorderingChannel::GetTypeId()
{
    static TypeId tid = TypeId("quiclab::ReorderingChannel")
                            .SetParent<PointToPointChannel>()
                            .SetGroupName("quiclab")
                            .AddConstructor<ReorderingChannel>();
    return tid;
}

void
ReorderingChannel::Configure(Ptr<PointToPointNetDevice> forwardSource,
                             double probability,
                             Time extraDelay,
                             Ptr<UniformRandomVariable> uniform)
{
    m_forwardSource = forwardSource;
    m_probability = probability;
    m_extraDelay = extraDelay;
    m_uniform = uniform;
}

bool
ReorderingChannel::TransmitStart(Ptr<const Packet> packet,
                                 Ptr<PointToPointNetDevice> source,
                                 Time txTime)
{
    if (source != m_forwardSource || m_probability <= 0 ||
        m_uniform->GetValue() >= m_probability)
    {
        return PointToPointChannel::TransmitStart(packet, source, txTime);
    }
    Ptr<PointToPointNetDevice> dest =
        GetPointToPointDevice(0) == source ? GetPointToPointDevice(1) : GetPointToPointDevice(0);
    Simulator::ScheduleWithContext(dest->GetNode()->GetId(),
                                   txTime + GetDelay() + m_extraDelay,
                                   &PointToPointNetDevice::Receive,
                                   dest,
                                   packet->Copy());
    return true;
}

namespace
{
Ptr<PointToPointNetDevice>
MakeDevice(Ptr<Node> node, const Params& p, uint16_t mtu)
{
    auto device = CreateObject<PointToPointNetDevice>();
    device->SetAddress(Mac48Address::Allocate());
    device->SetDataRate(DataRate(static_cast<uint64_t>(p.linkBps)));
    device->SetMtu(mtu);
    node->AddDevice(device);
    // A one-packet device queue: the traffic-control queue disc above it is the
    // bottleneck buffer (flow control through NetDeviceQueueInterface, as
    // PointToPointHelper sets it up).
    auto queue = CreateObject<DropTailQueue<Packet>>();
    queue->SetMaxSize(QueueSize("1p"));
    device->SetQueue(queue);
    auto ndqi = CreateObject<NetDeviceQueueInterface>();
    ndqi->GetTxQueue(0)->ConnectQueueTraces(queue);
    device->AggregateObject(ndqi);
    return device;
}
} // namespace

PathParts
BuildPath(NodeContainer nodes, const Params& p)
{
    PathParts parts;
    // Jumbo MTUs near the IPv4 limit leave less room for padding.
    parts.padBytes = std::min<uint32_t>(kPadBytes, 65535 - std::min<uint32_t>(p.mtuBytes, 65535));
    auto mtu = static_cast<uint16_t>(std::min<uint32_t>(p.mtuBytes + parts.padBytes, 65535));
    parts.senderDevice = MakeDevice(nodes.Get(0), p, mtu);
    parts.receiverDevice = MakeDevice(nodes.Get(1), p, mtu);

    auto channel = CreateObject<ReorderingChannel>();
    channel->SetAttribute("Delay", TimeValue(Seconds(p.rttS / 2))); // one-way = rtt/2
    parts.senderDevice->Attach(channel);
    parts.receiverDevice->Attach(channel);
    auto reorderRng = CreateObject<UniformRandomVariable>();
    reorderRng->SetStream(kStreamReorder);
    channel->Configure(parts.senderDevice, p.reorderProb,
                       Seconds(std::max(p.rttS / 2, 100e-6)), reorderRng);

    if (p.lossProb > 0)
    {
        // Bernoulli loss of forward packets (ACKs travel the other way, loss-free).
        auto loss = CreateObject<RateErrorModel>();
        auto lossRng = CreateObject<UniformRandomVariable>();
        lossRng->SetStream(kStreamLoss);
        loss->SetRandomVariable(lossRng);
        loss->SetUnit(RateErrorModel::ERROR_UNIT_PACKET);
        loss->SetRate(p.lossProb);
        parts.receiverDevice->SetReceiveErrorModel(loss);
    }

    InternetStackHelper stack;
    stack.SetIpv6StackInstall(false);
    // One link, two hosts: static routing alone (no list/global routing lookups).
    Ipv4StaticRoutingHelper staticRouting;
    stack.SetRoutingHelper(staticRouting);
    stack.Install(nodes);

    // Drop-tail bottleneck at the sender's egress; the reverse path's queue
    // only ever holds ACKs and is made large enough never to drop one.
    TrafficControlHelper bottleneck;
    bottleneck.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize",
                                QueueSizeValue(QueueSize(QueueSizeUnit::BYTES,
                                                         static_cast<uint32_t>(std::min<uint64_t>(
                                                             p.queueBytes, 0xffffffffULL)))));
    parts.bottleneck = bottleneck.Install(NetDeviceContainer(parts.senderDevice)).Get(0);
    TrafficControlHelper reverse;
    reverse.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", StringValue("1000000p"));
    reverse.Install(NetDeviceContainer(parts.receiverDevice));

    Ipv4AddressHelper addresses("10.1.1.0", "255.255.255.0");
    NetDeviceContainer both(parts.senderDevice);
    both.Add(parts.receiverDevice);
    Ipv4InterfaceContainer ifaces = addresses.Assign(both);
    parts.senderAddress = ifaces.GetAddress(0);
    parts.receiverAddress = ifaces.GetAddress(1);
    return parts;
}

} // namespace quiclab
