// SPDX-License-Identifier: MIT
// quiclab: random loss of UDP/IPv4 packets as a tc classifier (direct action).
//
// This kernel has no netem, so loss is a tiny eBPF program on the receiver's
// ingress. A packet is dropped when a 32-bit random number falls below
// LOSS_THRESHOLD = loss_pct / 100 × 2^32 (set with -DLOSS_THRESHOLD=… when
// quiclab compiles it). tc sees an skb: a GSO/GRO super-packet counts as one,
// so quiclab turns segmentation off on the sender's veth and GRO off on the
// receiver's for per-packet loss. Only UDP is dropped (ARP, ICMP pass); built
// with -DLOSS_TCP=1 it drops TCP segments that carry payload instead (the data
// direction: SYNs and pure ACKs pass, as a lossy path would let most of them).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include <linux/tcp.h>

#ifndef LOSS_THRESHOLD
#define LOSS_THRESHOLD 0u
#endif
#ifndef LOSS_TCP
#define LOSS_TCP 0
#endif

/* Whether an IPv4 TCP packet at ETH_HLEN carries payload (RFC 9293 §3.1: the data
 * starts data offset × 4 bytes into the segment). */
static __always_inline int tcp_payload(struct __sk_buff *skb)
{
	__u8 vihl, doff;
	__be16 tot_len;

	if (bpf_skb_load_bytes(skb, ETH_HLEN, &vihl, 1) < 0)
		return 0;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct iphdr, tot_len), &tot_len, 2) < 0)
		return 0;
	__u32 ihl = (vihl & 0x0f) * 4;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + ihl + 12, &doff, 1) < 0)
		return 0;
	return bpf_ntohs(tot_len) > ihl + (doff >> 4) * 4;
}

SEC("tc")
int quiclab_loss(struct __sk_buff *skb)
{
	__u8 proto;

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct iphdr, protocol), &proto, 1) < 0)
		return TC_ACT_OK;
#if LOSS_TCP
	if (proto != IPPROTO_TCP || !tcp_payload(skb))
		return TC_ACT_OK;
#else
	if (proto != IPPROTO_UDP)
		return TC_ACT_OK;
#endif
	if (bpf_get_prandom_u32() < (__u32)LOSS_THRESHOLD)
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
