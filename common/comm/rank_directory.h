// Where every rank of the job can be reached for heartbeats (common/comm/heartbeat_monitor.h):
// each rank's host name, IPv4 interfaces and heartbeat port, gathered over MPI once at the
// start, and the address one rank should use to reach another.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kvrl {

struct Ipv4Interface {
  uint32_t address = 0;  // host byte order
  uint32_t netmask = 0;
};

struct HostAddresses {
  std::string host;                       // gethostname()
  std::vector<Ipv4Interface> interfaces;  // up and running, IPv4, not loopback
};

// This host's name and interfaces.
HostAddresses local_host_addresses();

// Whether two entries are one machine: the same name and the same interfaces (two machines
// may share a name).
bool same_host(const HostAddresses& a, const HostAddresses& b);

// Addresses that more than one host of `hosts` has (docker0's 172.17.0.1, libvirt's
// 192.168.122.1): they reach no particular host.
std::vector<uint32_t> ambiguous_addresses(const std::vector<HostAddresses>& hosts);

// The address `from` should send to in order to reach `to`: loopback on the same host, else,
// among `to`'s addresses that are not `ambiguous`, one on a subnet both share (the cluster
// network), else the first. Throws InvalidArgumentError naming the host when `to` has no
// usable address.
std::string address_to_reach(const HostAddresses& from, const HostAddresses& to,
                             const std::vector<uint32_t>& ambiguous = {});

struct RankDirectory {
  std::vector<HostAddresses> hosts;  // by rank
  std::vector<uint16_t> ports;       // each rank's heartbeat port, by rank
  uint64_t job_token = 0;            // drawn by rank 0, the same on every rank
};

// A collective over `comm`: every rank contributes its host and port, rank 0 a random job token.
RankDirectory exchange_rank_directory(MPI_Comm comm, uint16_t own_port);

}  // namespace kvrl
