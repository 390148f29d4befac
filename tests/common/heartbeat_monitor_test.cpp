#include "common/comm/heartbeat_monitor.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/comm/rank_directory.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

using Clock = std::chrono::steady_clock;
// Short enough for a unit test, long enough that a thread starved on a loaded 2-core machine
// is not taken for a silent peer.
constexpr HeartbeatOptions kFast{0.05, 1.0};

// What a monitor reported, and when, for the test's thread to wait on.
struct Reports {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<SilentPeer> silent;
  int calls = 0;
  Clock::time_point when;

  HeartbeatMonitor::SilenceHandler handler() {
    return [this](const std::vector<SilentPeer>& peers) {
      std::lock_guard<std::mutex> lock(mutex);
      silent = peers;
      ++calls;
      when = Clock::now();
      changed.notify_all();
    };
  }
  bool wait_for_report(double seconds) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return calls > 0; });
  }
  int call_count() {
    std::lock_guard<std::mutex> lock(mutex);
    return calls;
  }
};

PeerEndpoint local(int rank, const HeartbeatMonitor& monitor) {
  return {rank, "rank " + std::to_string(rank) + " (test)", "127.0.0.1", monitor.port()};
}

void send_datagram(uint16_t port, const void* bytes, size_t size) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sendto(fd, bytes, size, 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  close(fd);
}

// A heartbeat of rank 1 for job token 7 with this magic and format version, as
// common/comm/heartbeat_monitor.cpp lays one out (24 bytes; one spare byte for a too-long one).
std::array<uint8_t, 25> forged_heartbeat(uint32_t magic, uint16_t version) {
  std::array<uint8_t, 25> bytes{};
  const uint64_t token = 7;
  const int32_t rank = 1;
  std::memcpy(bytes.data(), &magic, 4);
  std::memcpy(bytes.data() + 4, &version, 2);
  std::memcpy(bytes.data() + 8, &token, 8);
  std::memcpy(bytes.data() + 16, &rank, 4);
  return bytes;
}

TEST(HeartbeatMonitor, TwoLiveRanksNeverReportEachOther) {
  HeartbeatMonitor a(0, kFast), b(1, kFast);
  Reports a_reports, b_reports;
  a.start(7, {local(1, b)}, {local(1, b)}, a_reports.handler());
  b.start(7, {local(0, a)}, {local(0, a)}, b_reports.handler());
  EXPECT_FALSE(a_reports.wait_for_report(2.5 * kFast.timeout_s));
  EXPECT_EQ(b_reports.call_count(), 0);
}

TEST(HeartbeatMonitor, AStoppedPeerIsReportedOnceByNameAfterTheTimeout) {
  HeartbeatMonitor a(0, kFast), b(1, kFast);
  Reports reports;
  a.start(7, {}, {local(1, b)}, reports.handler());
  b.start(7, {local(0, a)}, {}, [](const std::vector<SilentPeer>&) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto stopped = Clock::now();
  b.stop();
  ASSERT_TRUE(reports.wait_for_report(3 * kFast.timeout_s));
  // Not before the timeout from its last heartbeat; the upper bound leaves room for a
  // loaded machine, the report must still come.
  const double after = std::chrono::duration<double>(reports.when - stopped).count();
  EXPECT_GE(after, kFast.timeout_s - 2 * kFast.interval_s);
  EXPECT_LE(after, kFast.timeout_s + 2.0);
  ASSERT_EQ(reports.silent.size(), 1u);
  EXPECT_EQ(reports.silent[0].peer.rank, 1);
  EXPECT_TRUE(reports.silent[0].ever_heard);
  EXPECT_GT(reports.silent[0].silent_s, kFast.timeout_s);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(reports.call_count(), 1);
  EXPECT_NE(describe_silent_peers(reports.silent, kFast.timeout_s).find("rank 1 (test) at 127.0.0.1:"),
            std::string::npos);
}

TEST(HeartbeatMonitor, HeartbeatsOfAnotherJobOrGarbageDoNotKeepAPeerAlive) {
  HeartbeatMonitor a(0, kFast), stranger(1, kFast);
  Reports reports;
  a.start(7, {}, {local(1, stranger)}, reports.handler());
  stranger.start(8, {local(0, a)}, {}, [](const std::vector<SilentPeer>&) {});  // same rank, other job
  const std::string junk = "not a heartbeat at all, but 24 bytes long";
  // Rank 1's heartbeats of this job (token 7) but for one field: the magic, the format
  // version, or the length.
  const auto wrong_magic = forged_heartbeat(0x4248564c, 1), wrong_version = forged_heartbeat(0x4248564b, 2),
             right = forged_heartbeat(0x4248564b, 1);
  for (int i = 0; i < 10; ++i) {
    send_datagram(a.port(), junk.data(), 24);
    send_datagram(a.port(), junk.data(), junk.size());
    send_datagram(a.port(), wrong_magic.data(), wrong_magic.size() - 1);
    send_datagram(a.port(), wrong_version.data(), wrong_version.size() - 1);
    send_datagram(a.port(), right.data(), right.size() + 1);  // one byte too long
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(reports.wait_for_report(3 * kFast.timeout_s));
  ASSERT_EQ(reports.silent.size(), 1u);
  EXPECT_FALSE(reports.silent[0].ever_heard);
  EXPECT_NE(describe_silent_peers(reports.silent, kFast.timeout_s).find("not one heartbeat"),
            std::string::npos);
}

TEST(HeartbeatMonitor, AForgedHeartbeatWithEveryFieldRightKeepsAPeerAlive) {
  // The control for the test above: the same bytes, 24 long, count as rank 1's heartbeat.
  HeartbeatMonitor a(0, kFast);
  Reports reports;
  a.start(7, {}, {{1, "rank 1 (test)", "127.0.0.1", 9}}, reports.handler());
  const auto bytes = forged_heartbeat(0x4248564b, 1);
  const auto until = Clock::now() + std::chrono::duration<double>(2 * kFast.timeout_s);
  while (Clock::now() < until) {
    send_datagram(a.port(), bytes.data(), bytes.size() - 1);  // 24 bytes
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(reports.call_count(), 0);
}

TEST(HeartbeatMonitor, EverySilentPeerIsNamedInTheOneReport) {
  HeartbeatMonitor a(0, kFast), b(1, kFast), c(2, kFast), d(3, kFast);
  Reports reports;
  a.start(7, {}, {local(1, b), local(2, c), local(3, d)}, reports.handler());
  d.start(7, {local(0, a)}, {}, [](const std::vector<SilentPeer>&) {});  // only d is alive
  ASSERT_TRUE(reports.wait_for_report(3 * kFast.timeout_s));
  ASSERT_EQ(reports.silent.size(), 2u);
  EXPECT_EQ(reports.silent[0].peer.rank, 1);
  EXPECT_EQ(reports.silent[1].peer.rank, 2);
}

TEST(HeartbeatMonitor, RefusesAnIntervalThatIsNotBelowTheTimeout) {
  EXPECT_THROW(HeartbeatMonitor(0, HeartbeatOptions{1.0, 1.0}), InvalidArgumentError);
  EXPECT_THROW(HeartbeatMonitor(0, HeartbeatOptions{0, 5}), InvalidArgumentError);
  HeartbeatMonitor a(0, kFast);
  EXPECT_THROW(a.start(7, {{1, "rank 1", "node07", 9}}, {}, [](const std::vector<SilentPeer>&) {}),
               InvalidArgumentError);
}

uint32_t ip(const char* dotted) {
  in_addr address{};
  inet_pton(AF_INET, dotted, &address);
  return ntohl(address.s_addr);
}

TEST(RankDirectory, AddressToReachPrefersLoopbackThenASharedSubnet) {
  const uint32_t slash24 = ip("255.255.255.0");
  const HostAddresses h0{"h0", {{ip("192.168.1.5"), slash24}, {ip("10.86.0.1"), slash24}}};
  const HostAddresses h1{"h1", {{ip("172.17.0.2"), ip("255.255.0.0")}, {ip("10.86.0.2"), slash24}}};
  const HostAddresses other{"h2", {{ip("172.18.0.9"), slash24}}};
  EXPECT_EQ(address_to_reach(h0, h0), "127.0.0.1");
  EXPECT_EQ(address_to_reach(h0, h1), "10.86.0.2");
  EXPECT_EQ(address_to_reach(h1, h0), "10.86.0.1");
  EXPECT_EQ(address_to_reach(h0, other), "172.18.0.9");  // no shared subnet: its first address
  // docker0's 172.17.0.1 on every host reaches no particular one of them.
  const HostAddresses d0{"d0", {{ip("172.17.0.1"), ip("255.255.0.0")}, {ip("10.1.0.5"), slash24}}};
  const HostAddresses d1{"d1", {{ip("172.17.0.1"), ip("255.255.0.0")}, {ip("10.2.0.7"), slash24}}};
  const std::vector<uint32_t> ambiguous = ambiguous_addresses({d0, d1, d1});
  ASSERT_EQ(ambiguous, std::vector<uint32_t>{ip("172.17.0.1")});
  EXPECT_EQ(address_to_reach(d0, d1, ambiguous), "10.2.0.7");  // routed, no shared subnet
  // Without the filter the shared docker subnet wins, and d0 would send to itself.
  EXPECT_EQ(address_to_reach(d0, d1), "172.17.0.1");
  // Two machines with one name are two hosts; one machine twice is one.
  EXPECT_EQ(address_to_reach(HostAddresses{"node", {{ip("10.86.0.1"), slash24}}},
                             HostAddresses{"node", {{ip("10.86.0.2"), slash24}}}),
            "10.86.0.2");
  EXPECT_EQ(address_to_reach(d1, d1, ambiguous), "127.0.0.1");
  try {
    address_to_reach(h0, HostAddresses{"lonely", {}});
    FAIL() << "a host without addresses was accepted";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("'lonely'"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace kvrl
