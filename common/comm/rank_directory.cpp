#include "common/comm/rank_directory.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "common/comm/mpi_check.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

constexpr size_t kHostNameBytes = 256;  // HOST_NAME_MAX (64) and then some, with the terminator
constexpr size_t kMaxInterfaces = 32;

// One rank's entry as it travels in the all-gather: fixed size, no pointers.
struct DirectoryRecord {
  std::array<char, kHostNameBytes> host{};
  uint64_t job_token = 0;
  uint16_t port = 0;
  uint16_t interface_count = 0;
  std::array<uint32_t, kMaxInterfaces> addresses{};
  std::array<uint32_t, kMaxInterfaces> netmasks{};
};

DirectoryRecord to_record(const HostAddresses& own, uint16_t port, uint64_t token) {
  DirectoryRecord record;
  std::strncpy(record.host.data(), own.host.c_str(), kHostNameBytes - 1);
  record.job_token = token;
  record.port = port;
  record.interface_count = static_cast<uint16_t>(std::min(own.interfaces.size(), kMaxInterfaces));
  for (size_t i = 0; i < record.interface_count; ++i) {
    record.addresses[i] = own.interfaces[i].address;
    record.netmasks[i] = own.interfaces[i].netmask;
  }
  return record;
}

HostAddresses from_record(const DirectoryRecord& record) {
  HostAddresses host;
  host.host = std::string(record.host.data(), strnlen(record.host.data(), kHostNameBytes));
  for (size_t i = 0; i < std::min<size_t>(record.interface_count, kMaxInterfaces); ++i)
    host.interfaces.push_back({record.addresses[i], record.netmasks[i]});
  return host;
}

std::string dotted(uint32_t address) {
  in_addr in{htonl(address)};
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &in, text, sizeof(text));
  return text;
}

uint64_t random_token() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

HostAddresses local_host_addresses() {
  HostAddresses own;
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) == 0) own.host = name.data();
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return own;
  for (const ifaddrs* entry = list; entry; entry = entry->ifa_next) {
    if (!entry->ifa_addr || entry->ifa_addr->sa_family != AF_INET || !entry->ifa_netmask) continue;
    if (!(entry->ifa_flags & IFF_UP) || !(entry->ifa_flags & IFF_RUNNING) ||
        (entry->ifa_flags & IFF_LOOPBACK))
      continue;
    const auto* address = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    const auto* netmask = reinterpret_cast<const sockaddr_in*>(entry->ifa_netmask);
    own.interfaces.push_back({ntohl(address->sin_addr.s_addr), ntohl(netmask->sin_addr.s_addr)});
  }
  freeifaddrs(list);
  return own;
}

bool same_host(const HostAddresses& a, const HostAddresses& b) {
  if (a.host != b.host || a.interfaces.size() != b.interfaces.size()) return false;
  for (size_t i = 0; i < a.interfaces.size(); ++i) {
    if (a.interfaces[i].address != b.interfaces[i].address) return false;
  }
  return true;
}

std::vector<uint32_t> ambiguous_addresses(const std::vector<HostAddresses>& hosts) {
  std::map<uint32_t, const HostAddresses*> first_host;
  std::set<uint32_t> ambiguous;
  for (const HostAddresses& host : hosts) {
    for (const Ipv4Interface& interface : host.interfaces) {
      auto [seen, fresh] = first_host.emplace(interface.address, &host);
      if (!fresh && !same_host(*seen->second, host)) ambiguous.insert(interface.address);
    }
  }
  return {ambiguous.begin(), ambiguous.end()};
}

std::string address_to_reach(const HostAddresses& from, const HostAddresses& to,
                             const std::vector<uint32_t>& ambiguous) {
  if (same_host(from, to)) return "127.0.0.1";
  std::vector<Ipv4Interface> usable;
  for (const Ipv4Interface& theirs : to.interfaces) {
    if (std::find(ambiguous.begin(), ambiguous.end(), theirs.address) == ambiguous.end())
      usable.push_back(theirs);
  }
  if (usable.empty()) {
    throw InvalidArgumentError(
        "host '" + to.host +
        "' has no IPv4 address of its own to send heartbeats to; set run.peer_timeout_s=0 "
        "to run without kvrl's heartbeats");
  }
  for (const Ipv4Interface& theirs : usable) {
    for (const Ipv4Interface& ours : from.interfaces) {
      if (ours.netmask == theirs.netmask &&
          (ours.address & ours.netmask) == (theirs.address & theirs.netmask))
        return dotted(theirs.address);
    }
  }
  return dotted(usable.front().address);
}

RankDirectory exchange_rank_directory(MPI_Comm comm, uint16_t own_port) {
  int rank = 0, size = 1;
  KVRL_MPI_CHECK(MPI_Comm_rank(comm, &rank), "reading this rank");
  KVRL_MPI_CHECK(MPI_Comm_size(comm, &size), "reading the world size");
  const DirectoryRecord own = to_record(local_host_addresses(), own_port, rank == 0 ? random_token() : 0);
  std::vector<DirectoryRecord> records(static_cast<size_t>(size));
  KVRL_MPI_CHECK(MPI_Allgather(&own, sizeof(DirectoryRecord), MPI_BYTE, records.data(),
                               sizeof(DirectoryRecord), MPI_BYTE, comm),
                 "exchanging heartbeat addresses");
  RankDirectory directory;
  directory.job_token = records.front().job_token;
  for (const DirectoryRecord& record : records) {
    directory.hosts.push_back(from_record(record));
    directory.ports.push_back(record.port);
  }
  return directory;
}

}  // namespace kvrl
