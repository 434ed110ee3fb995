// quiclab ns-3 engine: the path of TRANSPORT.md "Topology" from ns-3's parts.
#ifndef QUICLAB_PATH_H
#define QUICLAB_PATH_H

#include "transport.h"

#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

namespace quiclab
{

// A PointToPointChannel that delays a forward packet by an extra time with
// some probability, so that it arrives after later ones (TRANSPORT.md:
// "delayed by an extra rtt/2 (at least 100 µs)"). ns-3 has no reordering
// model of its own; everything else about the link is the stock channel.
class ReorderingChannel : public ns3::PointToPointChannel
{
  public:
    static ns3::TypeId GetTypeId();
    void Configure(ns3::Ptr<ns3::PointToPointNetDevice> forwardSource,
                   double probability,
                   ns3::Time extraDelay,
                   ns3::Ptr<ns3::UniformRandomVariable> uniform);
    bool TransmitStart(ns3::Ptr<const ns3::Packet> packet,
                       ns3::Ptr<ns3::PointToPointNetDevice> source,
                       ns3::Time txTime) override;

  private:
    ns3::Ptr<ns3::PointToPointNetDevice> m_forwardSource;
    double m_probability = 0;
    ns3::Time m_extraDelay;
    ns3::Ptr<ns3::UniformRandomVariable> m_uniform;
};

struct PathParts
{
    ns3::Ptr<ns3::PointToPointNetDevice> senderDevice, receiverDevice;
    ns3::Ptr<ns3::QueueDisc> bottleneck;
    ns3::Ipv4Address senderAddress, receiverAddress;
    uint32_t padBytes = 0;
};

// Two nodes (0 = sender, 1 = receiver) joined by one point-to-point link with
// the internet stack, the bottleneck queue disc, the loss model and reordering.
PathParts BuildPath(ns3::NodeContainer nodes, const Params& p);

} // namespace quiclab

#endif
