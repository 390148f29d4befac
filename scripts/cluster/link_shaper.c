/* link_shaper: a userspace delay and loss line for scripts/cluster.sh, for kernels built
 * without sch_netem (no `tc qdisc ... netem`). The rate limit stays in the kernel (tbf).
 *
 *   link_shaper HOST_PORT LINE_PORT DELAY_US LOSS_PERCENT [SEED]
 *
 * HOST_PORT is the bridge-side end of a fake host's veth, taken off the bridge; LINE_PORT
 * is one end of a second veth pair whose other end sits on the bridge. Frames the host
 * sends (its egress, as netem on its eth0 would see them) are dropped with probability
 * LOSS_PERCENT/100 and the rest are held DELAY_US microseconds, in order, then sent on
 * LINE_PORT; frames towards the host pass at once. Both ports are read and written with
 * AF_PACKET sockets carrying virtio-net headers, so TSO/GSO frames and partial checksums
 * cross unchanged. The caller limits the host to one segment per frame when LOSS_PERCENT
 * is above 0, so that loss applies per TCP segment and not per 64 KiB GSO frame.
 *
 * Prints "ready" on stderr once both ports are bound, its counters on SIGUSR1, and its
 * counters again on SIGTERM or SIGINT, then exits 0. Exit status 2: bad arguments;
 * 1: a port could not be opened.
 *
 * Learned from the sketch in /work/shared/simcluster (kvwire.c): the receive socket needs
 * a large forced buffer (with the default 208 KiB the line itself dropped frames while it
 * slept), and a 1 ns timer slack with ppoll, or sub-millisecond delays come out up to a
 * millisecond late. */
#define _GNU_SOURCE /* ppoll */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum {
  kMaxFrame = 65536 + 256,  /* a GSO frame, its Ethernet and virtio-net headers */
  kBurst = 256,             /* frames read per wake-up per port, so neither starves */
  kSocketBuffer = 64 << 20, /* frames wait here while the line sleeps */
};
static const size_t kMaxQueuedBytes = (size_t)256 << 20; /* beyond this, drop as overflow */

typedef struct Frame {
  struct Frame* next;
  int64_t due_us;
  size_t length;
  unsigned char data[];
} Frame;

/* Frames on their way to LINE_PORT, oldest first; due times never decrease. */
typedef struct {
  Frame* head;
  Frame* tail;
  size_t bytes;
} DelayQueue;

typedef struct {
  uint64_t from_host, dropped_loss, dropped_overflow, delivered, to_host, send_errors;
} Counters;

static volatile sig_atomic_t report_requested, stop_requested;

static void on_signal(int signal_number) {
  if (signal_number == SIGUSR1)
    report_requested = 1;
  else
    stop_requested = 1;
}

static int64_t now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* xorshift64*: seeded from the command line, so a run's loss pattern can be repeated. */
static uint64_t next_random(uint64_t* state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return *state * 0x2545F4914F6CDD1DULL;
}

static int open_port(const char* name) {
  const unsigned index = if_nametoindex(name);
  if (index == 0) {
    fprintf(stderr, "link_shaper: no interface '%s' in this namespace\n", name);
    return -1;
  }
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
  if (fd < 0) {
    perror("link_shaper: socket(AF_PACKET)");
    return -1;
  }
  const int one = 1, buffer = kSocketBuffer;
  if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) < 0) {
    perror("link_shaper: PACKET_VNET_HDR");
    return -1;
  }
  /* Without this the line would read back every frame it sends itself. */
  if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) < 0) {
    perror("link_shaper: PACKET_IGNORE_OUTGOING");
    return -1;
  }
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer) < 0)
    perror("link_shaper: SO_RCVBUFFORCE (continuing with the default buffer)");
  setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buffer, sizeof buffer);
  struct sockaddr_ll address;
  memset(&address, 0, sizeof address);
  address.sll_family = AF_PACKET;
  address.sll_protocol = htons(ETH_P_ALL);
  address.sll_ifindex = (int)index;
  if (bind(fd, (struct sockaddr*)&address, sizeof address) < 0) {
    fprintf(stderr, "link_shaper: bind to '%s': %s\n", name, strerror(errno));
    return -1;
  }
  return fd;
}

static void report(const char* when, const Counters* c, const DelayQueue* queue) {
  fprintf(stderr,
          "%s: from_host=%llu dropped_loss=%llu dropped_overflow=%llu delivered=%llu to_host=%llu "
          "send_errors=%llu queued_bytes=%zu\n",
          when, (unsigned long long)c->from_host, (unsigned long long)c->dropped_loss,
          (unsigned long long)c->dropped_overflow, (unsigned long long)c->delivered,
          (unsigned long long)c->to_host, (unsigned long long)c->send_errors, queue->bytes);
}

/* A send error means the port is down (cut) or its queue is full: the frame is lost, as
 * on a wire. */
static void send_frame(int fd, const unsigned char* data, size_t length, uint64_t* sent, Counters* c) {
  if (send(fd, data, length, 0) < 0)
    c->send_errors++;
  else
    (*sent)++;
}

int main(int argc, char** argv) {
  if (argc < 5 || argc > 6) {
    fprintf(stderr, "usage: link_shaper HOST_PORT LINE_PORT DELAY_US LOSS_PERCENT [SEED]\n");
    return 2;
  }
  char* end = NULL;
  const long long delay_us = strtoll(argv[3], &end, 10);
  if (*end != '\0' || delay_us < 0 || delay_us > 60LL * 1000000) {
    fprintf(stderr, "link_shaper: DELAY_US '%s' must be an integer in [0, 60000000]\n", argv[3]);
    return 2;
  }
  const double loss_percent = strtod(argv[4], &end);
  if (*end != '\0' || !(loss_percent >= 0 && loss_percent <= 100)) {
    fprintf(stderr, "link_shaper: LOSS_PERCENT '%s' must be a number in [0, 100]\n", argv[4]);
    return 2;
  }
  uint64_t random_state = argc == 6 ? strtoull(argv[5], NULL, 10) : 0;
  if (random_state == 0) random_state = 0x9E3779B97F4A7C15ULL; /* xorshift must not start at 0 */
  /* Compared against the top 53 bits of a random draw: loss 100 drops every frame. */
  const double loss_threshold = loss_percent / 100.0 * (double)(1ULL << 53);

  const int host = open_port(argv[1]), line = open_port(argv[2]);
  if (host < 0 || line < 0) return 1;
  prctl(PR_SET_TIMERSLACK, 1UL);

  /* The signals stay blocked except inside ppoll, so none is lost between a check of the
   * flags and the next sleep. */
  sigset_t blocked, during_poll;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGUSR1);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGINT);
  sigprocmask(SIG_BLOCK, &blocked, &during_poll);
  sigdelset(&during_poll, SIGUSR1);
  sigdelset(&during_poll, SIGTERM);
  sigdelset(&during_poll, SIGINT);
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = on_signal;
  sigaction(SIGUSR1, &action, NULL);
  sigaction(SIGTERM, &action, NULL);
  sigaction(SIGINT, &action, NULL);

  fprintf(stderr, "ready: pid=%d %s -> %s delay %lld us, loss %g%%, towards the host unshaped\n",
          (int)getpid(), argv[1], argv[2], delay_us, loss_percent);

  static unsigned char buffer[kMaxFrame];
  DelayQueue queue = {NULL, NULL, 0};
  Counters counters;
  memset(&counters, 0, sizeof counters);
  struct pollfd ports[2] = {{host, POLLIN, 0}, {line, POLLIN, 0}};
  while (!stop_requested) {
    struct timespec timeout, *wait = NULL;
    if (queue.head) {
      int64_t left = queue.head->due_us - now_us();
      if (left < 0) left = 0;
      timeout.tv_sec = left / 1000000;
      timeout.tv_nsec = (long)(left % 1000000) * 1000;
      wait = &timeout;
    }
    ports[0].revents = ports[1].revents = 0; /* ppoll leaves them alone when interrupted */
    if (ppoll(ports, 2, wait, &during_poll) < 0 && errno != EINTR) {
      perror("link_shaper: ppoll");
      return 1;
    }
    if (report_requested) {
      report_requested = 0;
      report("counters", &counters, &queue);
    }
    /* A port that went down (cut) reports an error once; reading clears it. */
    if (ports[0].revents & (POLLIN | POLLERR)) {
      for (int i = 0; i < kBurst; ++i) {
        const ssize_t n = recv(host, buffer, sizeof buffer, 0);
        if (n <= 0) break;
        counters.from_host++;
        if (loss_threshold > 0 && (double)(next_random(&random_state) >> 11) < loss_threshold) {
          counters.dropped_loss++;
          continue;
        }
        if (delay_us == 0) {
          send_frame(line, buffer, (size_t)n, &counters.delivered, &counters);
          continue;
        }
        if (queue.bytes + (size_t)n > kMaxQueuedBytes) {
          counters.dropped_overflow++;
          continue;
        }
        Frame* frame = malloc(sizeof *frame + (size_t)n);
        if (!frame) {
          counters.dropped_overflow++;
          continue;
        }
        frame->next = NULL;
        frame->due_us = now_us() + delay_us;
        frame->length = (size_t)n;
        memcpy(frame->data, buffer, (size_t)n);
        if (queue.tail)
          queue.tail->next = frame;
        else
          queue.head = frame;
        queue.tail = frame;
        queue.bytes += (size_t)n;
      }
    }
    if (ports[1].revents & (POLLIN | POLLERR)) {
      for (int i = 0; i < kBurst; ++i) {
        const ssize_t n = recv(line, buffer, sizeof buffer, 0);
        if (n <= 0) break;
        send_frame(host, buffer, (size_t)n, &counters.to_host, &counters);
      }
    }
    const int64_t now = now_us();
    while (queue.head && queue.head->due_us <= now) {
      Frame* frame = queue.head;
      send_frame(line, frame->data, frame->length, &counters.delivered, &counters);
      queue.head = frame->next;
      if (!queue.head) queue.tail = NULL;
      queue.bytes -= frame->length;
      free(frame);
    }
  }
  report("stopped", &counters, &queue);
  return 0;
}
