// Scaling figures of one learner against many actors (issue #21), on kvrl's own code
// paths: rank 0 is learner 0, ranks 1..N are actors.
//
// Weight broadcast: the time from rank 0 starting a weight sync until every actor has the
// weights in its model, for three model sizes and the two ways learner 0 sends weights
//   - "messages": LearnerLoop::send_weights without a staged broadcast: WeightsCodec::encode
//     of flatten_parameters, one MpiTransport::send per actor; each actor decodes the
//     message and assign_parameters into its model, as ActorLoop does;
//   - "mpi_broadcast": an announcement per actor over MpiTransport, then
//     StagedWeightSender::start over MpiWeightBroadcast (MPI_Ibcast); each actor queues
//     the announcement in a StagedWeightReceiver and polls it until the weights are in
//     its model, as ActorLoop::drain does.
// Each actor answers with an 8-byte acknowledgement the moment its model holds the new
// version, and rank 0's clock stops at the last one. An acknowledgement was chosen over
// reducing completion times: it needs no barrier in the timed part and no clocks agreeing
// across hosts, at the price of one small message's latency, which both methods pay alike.
// Methods alternate repetition by repetition so that they see the same machine load.
//
// Ingest: how many CartPole-sized episodes per second one learner rank takes in from N
// actors that send pre-encoded episodes as fast as their credit allows: MpiTransport::poll,
// EpisodeCodec::decode, a queue, credit returned as episodes leave the queue for a batch,
// and pack_windows of each batch, as LearnerLoop and Learner::update do before training.
// No training step runs, so this is the ceiling on the learner's intake.
//
// All-reduce (only when asked for, --parts allreduce; every rank a learner): the gradient
// mean of MpiCommunicator for the three models' gradient sizes, as busbw and as a share
// of --link-mbit. bench/scaling_bench.sh runs it with 2 ranks on 2 fake hosts.
// (kvrl_bench_collectives measures the same, but its repeat loop can leave the ranks in
// different collectives when their clocks run apart, which a slow link makes happen.)
//
//   launch/kvrl-mpirun -np 1+N build/bench/kvrl_bench_scaling [--parts broadcast,ingest,allreduce]
//       [--repeats R] [--ingest-seconds S] [--episode-lengths 25,500] [--link-mbit M] [--json PATH]
#include <ATen/Parallel.h>
#include <mpi.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/comm/mpi_check.h"
#include "common/comm/mpi_communicator.h"
#include "common/comm/mpi_transport.h"
#include "common/comm/mpi_weight_broadcast.h"
#include "common/comm/parameter_vector.h"
#include "common/comm/staged_weights.h"
#include "common/model/actor_critic.h"
#include "common/wire/episode_codec.h"
#include "common/wire/weights_codec.h"
#include "learner/window_batch.h"

namespace {

using Clock = std::chrono::steady_clock;
using kvrl::MessageTag;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ActorLoop waits this long between polls when it has nothing to do; LearnerLoop 500 µs.
constexpr auto kActorIdle = std::chrono::microseconds(200);
constexpr auto kLearnerIdle = std::chrono::microseconds(500);
// Rank 0 polls for acknowledgements more often, so that the wait adds little to the time.
constexpr auto kAckPoll = std::chrono::microseconds(50);
constexpr double kBroadcastTimeoutS = 600;  // learner.nccl_timeout_s; only a hang would reach it
constexpr int64_t kMaxSeqLen = 512;         // configs/cartpole_ppo.yaml: the window width
constexpr int64_t kStepsPerBatch = 4096;    // learner.steps_per_update of the CartPole config
constexpr int64_t kCreditSteps = 2048;      // actor.credit_steps' default

struct Options {
  bool broadcast = true;
  bool ingest = true;
  bool all_reduce = false;  // the learners' gradient mean over every rank (bench/scaling_bench.sh: 2 hosts)
  double link_mbit = 0;     // the shaped link rate, to report the all-reduce as a share of it; 0 = unknown
  int repeats = 7;
  double ingest_seconds = 3;
  std::vector<int64_t> episode_lengths = {25, 500};
  std::string json_path = "bench/results/scaling_bench.json";
};

struct ModelSize {
  std::string name;
  int64_t hidden;
  int64_t layers;
};

// hidden 64 x 2 layers is configs/cartpole_ppo.yaml's model.
const std::vector<ModelSize> kModelSizes = {{"0.1M", 64, 2}, {"1M", 128, 5}, {"10M", 320, 8}};

std::shared_ptr<kvrl::ActorCritic> make_model(const ModelSize& size) {
  kvrl::ActorCriticOptions options;
  options.transformer.input_size = 4;  // CartPole
  options.transformer.hidden_size = size.hidden;
  options.transformer.num_layers = size.layers;
  options.transformer.num_heads = 4;
  options.transformer.max_seq_len = kMaxSeqLen;
  options.num_outputs = 2;
  return std::make_shared<kvrl::ActorCritic>(options);
}

int64_t parameter_count(const std::vector<at::Tensor>& parameters) {
  int64_t count = 0;
  for (const auto& p : parameters) count += p.numel();
  return count;
}

// ---- weight broadcast ----------------------------------------------------------------

enum class Method { kMessages, kMpiBroadcast };
const char* method_name(Method m) { return m == Method::kMessages ? "messages" : "mpi_broadcast"; }

struct Sample {
  double total_s = 0;
  double encode_s = 0;  // rank 0: flatten + encode (messages), or flatten + announce + start (broadcast)
  double apply_s = 0;   // actors, mean: decode + assign (messages), or the poll that assigned
};

struct BroadcastRow {
  std::string model;
  int64_t parameters = 0;
  Method method = Method::kMessages;
  std::vector<Sample> samples;
};

std::vector<uint8_t> int64_bytes(int64_t value) {
  std::vector<uint8_t> bytes(sizeof(value));
  std::memcpy(bytes.data(), &value, sizeof(value));
  return bytes;
}

int64_t int64_of(const std::vector<uint8_t>& bytes) {
  int64_t value = -1;
  if (bytes.size() == sizeof(value)) std::memcpy(&value, bytes.data(), sizeof(value));
  return value;
}

// An actor's acknowledgement (sent as kActorDone): the version its model now holds and
// how long applying it took there.
struct Ack {
  int64_t version = -1;
  int64_t apply_ns = 0;
};

// Rank 0: polls until every actor acknowledged `version`; returns their mean apply time.
double wait_for_acks(kvrl::Transport& transport, int actors, int64_t version) {
  int acks = 0;
  double apply_s = 0;
  while (acks < actors) {
    if (auto message = transport.poll()) {
      Ack ack;
      if (message->tag != MessageTag::kActorDone || message->bytes.size() != sizeof(ack)) continue;
      std::memcpy(&ack, message->bytes.data(), sizeof(ack));
      if (ack.version != version) continue;
      ++acks;
      apply_s += static_cast<double>(ack.apply_ns) * 1e-9 / actors;
      continue;
    }
    std::this_thread::sleep_for(kAckPoll);
  }
  return apply_s;
}

// What LearnerLoop::send_weights does without a staged broadcast.
Sample send_as_messages(kvrl::Transport& transport, const std::vector<at::Tensor>& parameters,
                        int64_t version) {
  const auto start = Clock::now();
  const std::vector<uint8_t> bytes =
      kvrl::WeightsCodec::encode(version, kvrl::flatten_parameters(parameters));
  Sample sample;
  sample.encode_s = seconds_since(start);
  for (int actor = 1; actor < transport.size(); ++actor) transport.send(actor, MessageTag::kWeights, bytes);
  sample.apply_s = wait_for_acks(transport, transport.size() - 1, version);
  sample.total_s = seconds_since(start);
  return sample;
}

// What LearnerLoop::send_weights does with a staged broadcast.
Sample send_as_broadcast(kvrl::Transport& transport, kvrl::StagedWeightSender& sender,
                         const std::vector<at::Tensor>& parameters, int64_t version) {
  const auto start = Clock::now();
  const kvrl::WeightAnnouncement announcement{version, parameter_count(parameters)};
  for (int actor = 1; actor < transport.size(); ++actor)
    transport.send(actor, MessageTag::kWeightsAnnounce, announcement.encode());
  sender.start(parameters, version);
  Sample sample;
  sample.encode_s = seconds_since(start);
  sender.finish();  // learner 0's part of the broadcast; the actors' acks say when theirs landed
  sample.apply_s = wait_for_acks(transport, transport.size() - 1, version);
  sample.total_s = seconds_since(start);
  return sample;
}

// An actor: polls as ActorLoop::drain does until its model holds `version`, then acks with
// the time its apply step took: decode + assign_parameters for a message, the receiver's
// poll that copied the staging buffer in for a broadcast.
void receive_weights(kvrl::Transport& transport, kvrl::StagedWeightReceiver* staged, kvrl::ActorCritic& model,
                     std::vector<at::Tensor>& parameters, int64_t version) {
  int64_t held = version - 1;
  double apply_s = 0;
  while (held < version) {
    while (auto message = transport.poll()) {
      const auto applying = Clock::now();
      if (message->tag == MessageTag::kWeights) {
        const kvrl::WeightsMessage weights =
            kvrl::WeightsCodec::decode(message->bytes, parameter_count(parameters));
        kvrl::assign_parameters(weights.values, parameters);
        held = weights.policy_version;
        apply_s = seconds_since(applying);
      } else if (message->tag == MessageTag::kWeightsAnnounce && staged) {
        staged->announce(kvrl::WeightAnnouncement::decode(message->bytes));
      }
    }
    const auto applying = Clock::now();
    if (staged) {
      if (const std::optional<int64_t> landed = staged->poll(parameters, held)) {
        held = *landed;
        apply_s = seconds_since(applying);
      }
    }
    if (held < version) std::this_thread::sleep_for(kActorIdle);
  }
  model.mark_weight_update();
  const Ack ack{version, static_cast<int64_t>(apply_s * 1e9)};
  std::vector<uint8_t> bytes(sizeof(ack));
  std::memcpy(bytes.data(), &ack, sizeof(ack));
  transport.send(0, MessageTag::kActorDone, std::move(bytes));
}

// One model size: every rank builds the model; methods alternate over the repetitions.
std::vector<BroadcastRow> time_broadcasts(kvrl::MpiTransport& transport, MPI_Comm members,
                                          const ModelSize& size, int repeats) {
  torch::manual_seed(0);
  std::shared_ptr<kvrl::ActorCritic> model = make_model(size);
  std::vector<at::Tensor> parameters = model->parameters();
  const int64_t count = parameter_count(parameters);
  kvrl::MpiWeightBroadcast collective(members);
  std::unique_ptr<kvrl::StagedWeightSender> sender;
  std::unique_ptr<kvrl::StagedWeightReceiver> receiver;
  if (transport.rank() == 0) {
    sender = std::make_unique<kvrl::StagedWeightSender>(collective, kBroadcastTimeoutS);
  } else {
    receiver = std::make_unique<kvrl::StagedWeightReceiver>(collective, count, parameters.front().options(),
                                                            kBroadcastTimeoutS);
  }
  std::vector<BroadcastRow> rows = {{size.name, count, Method::kMessages, {}},
                                    {size.name, count, Method::kMpiBroadcast, {}}};
  int64_t version = 0;
  for (int r = 0; r < repeats + 1; ++r) {  // the first round warms connections and buffers up
    for (BroadcastRow& row : rows) {
      KVRL_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD), "lining the ranks up before a weight sync");
      const bool staged = row.method == Method::kMpiBroadcast;
      if (transport.rank() != 0) {
        receive_weights(transport, staged ? receiver.get() : nullptr, *model, parameters, version++);
        continue;
      }
      const Sample sample = staged ? send_as_broadcast(transport, *sender, parameters, version++)
                                   : send_as_messages(transport, parameters, version++);
      if (r > 0) row.samples.push_back(sample);
    }
  }
  transport.flush();
  KVRL_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD), "ending the weight syncs of one model size");
  return rows;
}

// ---- ingest --------------------------------------------------------------------------

struct IngestRow {
  int64_t episode_length = 0;
  int64_t episode_bytes = 0;
  double seconds = 0;
  int64_t episodes = 0;  // packed into batches
  int64_t steps = 0;
  int64_t bytes = 0;  // decoded
  int64_t batches = 0;
  double poll_s = 0;    // MpiTransport::poll (MPI_Iprobe + MPI_Recv)
  double decode_s = 0;  // EpisodeCodec::decode and queueing
  double pack_s = 0;    // pack_windows
};

kvrl::EpisodeCodec cartpole_codec() {
  return kvrl::EpisodeCodec({/*observation_size=*/4, /*action_size=*/1, /*max_length=*/500});
}

// A CartPole-shaped episode of `length` steps with random content that the codec accepts.
kvrl::Episode cartpole_episode(int64_t rank, uint64_t id, int64_t length, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  kvrl::Episode e;
  e.actor_rank = rank;
  e.episode_id = id;
  e.observation_size = 4;
  e.action_size = 1;
  for (int64_t t = 0; t < length; ++t) {
    for (int i = 0; i < 4; ++i) e.observations.push_back(normal(rng));
    e.actions.push_back(static_cast<float>(rng() % 2));
    e.rewards.push_back(1.0F);
    e.terminated.push_back(t == length - 1 && length < 500);
    e.truncated.push_back(t == length - 1 && length == 500);
    e.is_init.push_back(t == 0);
    e.behaviour_log_probs.push_back(-0.69F);
    e.values.push_back(normal(rng));
    e.policy_versions.push_back(0);
  }
  for (int i = 0; i < 4; ++i) e.final_observation.push_back(normal(rng));
  return e;
}

// An actor: sends copies of a few pre-encoded episodes while it has credit, until stopped;
// then says how many it sent, as ActorLoop::finish does.
void send_episodes(kvrl::Transport& transport, int64_t length) {
  std::mt19937 rng(static_cast<uint32_t>(transport.rank()));
  const kvrl::EpisodeCodec codec = cartpole_codec();
  std::vector<std::vector<uint8_t>> encoded;
  for (uint64_t id = 0; id < 8; ++id)
    encoded.push_back(codec.encode(cartpole_episode(transport.rank(), id, length, rng)));
  int64_t credit = kCreditSteps;
  int64_t sent = 0;
  bool stopped = false;
  while (!stopped) {
    while (auto message = transport.poll()) {
      if (message->tag == MessageTag::kCredit)
        credit = std::min(credit + int64_of(message->bytes), kCreditSteps);
      if (message->tag == MessageTag::kStop) stopped = true;
    }
    if (stopped) break;
    if (credit <= 0) {
      std::this_thread::sleep_for(kActorIdle);
      continue;
    }
    transport.send(0, MessageTag::kEpisode, encoded[sent % encoded.size()]);
    credit -= length;
    ++sent;
  }
  transport.send(0, MessageTag::kActorDone, int64_bytes(sent));
  transport.flush();
}

// Rank 0's intake, as LearnerLoop::receive and update_once do it up to Learner::update.
class Intake {
 public:
  explicit Intake(kvrl::Transport& transport) : transport_(transport), codec_(cartpole_codec()) {}

  // Takes in what has arrived and packs a batch when one is queued; false when idle.
  bool step(IngestRow& row) {
    auto polled = Clock::now();
    while (auto message = transport_.poll()) {
      row.poll_s += seconds_since(polled);
      const auto decoding = Clock::now();
      if (message->tag == MessageTag::kEpisode) {
        row.bytes += static_cast<int64_t>(message->bytes.size());
        queue_.push_back(codec_.decode(message->bytes));
        queued_steps_ += queue_.back().length();
      } else if (message->tag == MessageTag::kActorDone) {
        announced_[message->source] = int64_of(message->bytes);
      }
      row.decode_s += seconds_since(decoding);
      received_[message->source] += message->tag == MessageTag::kEpisode ? 1 : 0;
      polled = Clock::now();
    }
    row.poll_s += seconds_since(polled);
    if (queued_steps_ < kStepsPerBatch || stopping_) return false;
    pack_one_batch(row);
    return true;
  }

  // Stops every actor and takes in what they sent before they stopped.
  void stop(IngestRow& discard) {
    stopping_ = true;
    for (int actor = 1; actor < transport_.size(); ++actor) transport_.send(actor, MessageTag::kStop, {0});
    while (!all_done()) {
      if (!step(discard)) std::this_thread::sleep_for(kLearnerIdle);
    }
    transport_.flush();
  }

 private:
  void pack_one_batch(IngestRow& row) {
    std::vector<kvrl::Episode> batch;
    int64_t steps = 0;
    while (!queue_.empty() && steps < kStepsPerBatch) {
      steps += queue_.front().length();
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    queued_steps_ -= steps;
    for (const kvrl::Episode& e : batch)
      transport_.send(static_cast<int>(e.actor_rank), MessageTag::kCredit, int64_bytes(e.length()));
    const auto packing = Clock::now();
    const kvrl::WindowBatch windows = kvrl::pack_windows(batch, kMaxSeqLen);
    row.pack_s += seconds_since(packing);
    row.episodes += static_cast<int64_t>(batch.size());
    row.steps += steps;
    ++row.batches;
  }

  bool all_done() const {
    for (int actor = 1; actor < transport_.size(); ++actor) {
      const auto announced = announced_.find(actor);
      if (announced == announced_.end()) return false;
      const auto received = received_.find(actor);
      if ((received == received_.end() ? 0 : received->second) < announced->second) return false;
    }
    return true;
  }

  kvrl::Transport& transport_;
  kvrl::EpisodeCodec codec_;
  std::deque<kvrl::Episode> queue_;
  int64_t queued_steps_ = 0;
  bool stopping_ = false;
  std::map<int, int64_t> announced_;
  std::map<int, int64_t> received_;
};

IngestRow time_ingest(kvrl::MpiTransport& transport, int64_t length, double seconds) {
  KVRL_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD), "lining the ranks up before an ingest run");
  IngestRow row;
  row.episode_length = length;
  std::mt19937 rng(0);
  row.episode_bytes =
      static_cast<int64_t>(cartpole_codec().encode(cartpole_episode(1, 0, length, rng)).size());
  if (transport.rank() != 0) {
    send_episodes(transport, length);
  } else {
    Intake intake(transport);
    IngestRow warm_up;
    const auto warming = Clock::now();
    while (seconds_since(warming) < 0.5) {  // connections and the actors' first credit
      if (!intake.step(warm_up)) std::this_thread::sleep_for(kLearnerIdle);
    }
    const auto start = Clock::now();
    while (seconds_since(start) < seconds) {
      if (!intake.step(row)) std::this_thread::sleep_for(kLearnerIdle);
    }
    row.seconds = seconds_since(start);
    intake.stop(warm_up);
  }
  KVRL_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD), "ending an ingest run");
  return row;
}

// ---- gradient all-reduce -------------------------------------------------------------

// The learners' gradient mean over every rank of the world, as MpiCommunicator does it
// (a ring: reduce-scatter, then all-gather, in point-to-point steps): "blocking" is all_reduce_mean in the
// default 25 MiB buckets, "1 MiB buckets" starts every bucket's reduction, then waits for each in order, as
// GradientReducer does with learner.allreduce_bucket_mb=1, so that one bucket's steps can overlap the next
// one's. Two references in the same run: "reduce+bcast", what MpiCommunicator did before (a reduce to rank 0,
// then a broadcast back, 25 MiB buckets), and Open MPI's own MPI_Allreduce (which does not promise the same
// bits on every rank, so kvrl does not use it).
struct AllReduceRow {
  std::string model;
  int64_t bytes = 0;
  std::string path;
  std::vector<double> seconds;  // the slowest rank's, per repetition
};

template <typename Operation>
double slowest_seconds(Operation operation) {
  KVRL_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD), "lining the ranks up before an all-reduce");
  const auto start = Clock::now();
  operation();
  double mine = seconds_since(start), slowest = 0;
  KVRL_MPI_CHECK(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
                 "taking the slowest rank's time");
  return slowest;
}

// The references, on 25 MiB buckets of `flat` (a CPU float tensor).
void reduce_then_broadcast(const at::Tensor& flat) {
  for (const at::Tensor& bucket : flat.split(int64_t{25} << 18)) {
    at::Tensor sum = at::empty_like(bucket);
    const int count = static_cast<int>(bucket.numel());
    KVRL_MPI_CHECK(MPI_Reduce(bucket.data_ptr<float>(), sum.data_ptr<float>(), count, MPI_FLOAT, MPI_SUM, 0,
                              MPI_COMM_WORLD),
                   "reducing to rank 0");
    KVRL_MPI_CHECK(MPI_Bcast(sum.data_ptr<float>(), count, MPI_FLOAT, 0, MPI_COMM_WORLD),
                   "broadcasting the sum");
  }
}

void open_mpi_allreduce(const at::Tensor& flat) {
  for (const at::Tensor& bucket : flat.split(int64_t{25} << 18)) {
    KVRL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bucket.data_ptr<float>(), static_cast<int>(bucket.numel()),
                                 MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                   "MPI_Allreduce");
  }
}

void reduce_in_started_buckets(kvrl::Communicator& communicator, const at::Tensor& flat,
                               int64_t bucket_bytes) {
  std::vector<std::unique_ptr<kvrl::PendingReduction>> pending;
  for (const at::Tensor& bucket : flat.split(bucket_bytes / 4))
    pending.push_back(communicator.start_all_reduce_mean(bucket));
  for (auto& reduction : pending) reduction->wait();
}

// Every repetition runs on every rank: the count is fixed, so the collectives stay in step.
std::vector<AllReduceRow> time_all_reduce(int repeats) {
  kvrl::MpiCommunicator communicator(MPI_COMM_WORLD);
  std::vector<AllReduceRow> rows;
  for (const ModelSize& size : kModelSizes) {
    const int64_t count = parameter_count(make_model(size)->parameters());
    std::vector<at::Tensor> gradients = {torch::ones({count})};
    AllReduceRow blocking{size.name, count * 4, "blocking", {}};
    AllReduceRow started{size.name, count * 4, "1 MiB buckets", {}};
    AllReduceRow before{size.name, count * 4, "reduce+bcast (before)", {}};
    AllReduceRow reference{size.name, count * 4, "MPI_Allreduce (reference)", {}};
    for (int r = 0; r < repeats + 1; ++r) {  // the first round opens connections
      const double b = slowest_seconds([&] { communicator.all_reduce_mean(gradients); });
      const double s =
          slowest_seconds([&] { reduce_in_started_buckets(communicator, gradients[0], int64_t{1} << 20); });
      const double o = slowest_seconds([&] { reduce_then_broadcast(gradients[0]); });
      const double m = slowest_seconds([&] { open_mpi_allreduce(gradients[0]); });
      if (r == 0) continue;
      blocking.seconds.push_back(b);
      started.seconds.push_back(s);
      before.seconds.push_back(o);
      reference.seconds.push_back(m);
    }
    for (const AllReduceRow* row : {&blocking, &started, &before, &reference}) rows.push_back(*row);
  }
  return rows;
}

// ---- report --------------------------------------------------------------------------

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n == 0 ? 0 : n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::vector<double> field(const std::vector<Sample>& samples, double Sample::*member) {
  std::vector<double> values;
  values.reserve(samples.size());
  for (const Sample& s : samples) values.push_back(s.*member * 1e3);
  return values;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

std::string broadcast_report(const std::vector<BroadcastRow>& rows, int actors, std::string& json) {
  std::ostringstream table;
  table << "\nWeight sync from rank 0 to " << actors
        << " actor(s), until every actor's model holds it (ms; median and min of the repetitions;"
           " the last column: the messages' median over the broadcast's)\n"
        << "| model | parameters | MB | method | median ms | min ms | rank 0 encode/start ms | actor apply "
           "ms | "
           "messages / broadcast |\n"
        << "|---|---|---|---|---|---|---|---|---|\n";
  char line[400];
  for (size_t i = 0; i < rows.size(); ++i) {
    const BroadcastRow& row = rows[i];
    const std::vector<double> totals = field(row.samples, &Sample::total_s);
    const double med = median(totals);
    const double min = *std::min_element(totals.begin(), totals.end());
    const double encode = median(field(row.samples, &Sample::encode_s));
    const double apply = median(field(row.samples, &Sample::apply_s));
    char ratio[32] = "";
    if (row.method == Method::kMpiBroadcast && i > 0)  // rows come in pairs, messages first
      std::snprintf(ratio, sizeof(ratio), "%.2fx",
                    median(field(rows[i - 1].samples, &Sample::total_s)) / med);
    std::snprintf(line, sizeof(line), "| %s | %lld | %.2f | %s | %.2f | %.2f | %.2f | %.2f | %s |\n",
                  row.model.c_str(), static_cast<long long>(row.parameters), row.parameters * 4 / 1e6,
                  method_name(row.method), med, min, encode, apply, ratio);
    table << line;
    std::ostringstream samples;
    for (size_t s = 0; s < totals.size(); ++s) samples << (s ? ", " : "") << totals[s];
    std::snprintf(line, sizeof(line),
                  "%s{\"model\": \"%s\", \"parameters\": %lld, \"method\": \"%s\", \"median_ms\": %.4f, "
                  "\"min_ms\": %.4f, \"encode_ms\": %.4f, \"actor_apply_ms\": %.4f, ",
                  json.empty() ? "" : ", ", row.model.c_str(), static_cast<long long>(row.parameters),
                  method_name(row.method), med, min, encode, apply);
    json += line + std::string("\"samples_ms\": [") + samples.str() + "]}";
  }
  return table.str();
}

std::string ingest_report(const std::vector<IngestRow>& rows, int actors, std::string& json) {
  std::ostringstream table;
  table << "\nIngest at rank 0 from " << actors
        << " actor(s): poll, decode, queue, pack_windows of 4096-step batches (no training)\n"
        << "| episode steps | episode bytes | episodes/s | env steps/s | MB/s | poll µs/ep | decode µs/ep | "
           "pack µs/ep |\n"
        << "|---|---|---|---|---|---|---|---|\n";
  char line[400];
  for (const IngestRow& row : rows) {
    const double episodes = std::max<double>(1, static_cast<double>(row.episodes));
    std::snprintf(line, sizeof(line), "| %lld | %lld | %.0f | %.0f | %.2f | %.1f | %.1f | %.1f |\n",
                  static_cast<long long>(row.episode_length), static_cast<long long>(row.episode_bytes),
                  row.episodes / row.seconds, row.steps / row.seconds, row.bytes / row.seconds / 1e6,
                  row.poll_s / episodes * 1e6, row.decode_s / episodes * 1e6, row.pack_s / episodes * 1e6);
    table << line;
    std::snprintf(
        line, sizeof(line),
        "%s{\"episode_length\": %lld, \"episode_bytes\": %lld, \"seconds\": %.3f, \"episodes\": %lld, "
        "\"steps\": %lld, \"bytes\": %lld, \"batches\": %lld, \"poll_s\": %.4f, \"decode_s\": %.4f, "
        "\"pack_s\": %.4f}",
        json.empty() ? "" : ", ", static_cast<long long>(row.episode_length),
        static_cast<long long>(row.episode_bytes), row.seconds, static_cast<long long>(row.episodes),
        static_cast<long long>(row.steps), static_cast<long long>(row.bytes),
        static_cast<long long>(row.batches), row.poll_s, row.decode_s, row.pack_s);
    json += line;
  }
  return table.str();
}

// busbw by the nccl-tests definition, algbw * 2(n-1)/n, comparable with one link's rate.
std::string all_reduce_report(const std::vector<AllReduceRow>& rows, int ranks, double link_mbit,
                              std::string& json) {
  std::ostringstream table;
  char line[400];
  std::snprintf(line, sizeof(line), "%.0f Mbit/s", link_mbit);
  table << "\nGradient mean over " << ranks << " ranks (MpiCommunicator), link "
        << (link_mbit > 0 ? line : "unknown") << "; median and min of the slowest rank's time\n"
        << "| model | MB | path | median ms | min ms | busbw Mbit/s (median) | share of the link |\n"
        << "|---|---|---|---|---|---|---|\n";
  const double bus_factor = 2.0 * (ranks - 1) / ranks;
  for (const AllReduceRow& row : rows) {
    const double med = median(row.seconds);
    const double min = *std::min_element(row.seconds.begin(), row.seconds.end());
    const double busbw_mbit = row.bytes * 8 / med / 1e6 * bus_factor;
    char share[32] = "";
    if (link_mbit > 0) std::snprintf(share, sizeof(share), "%.0f%%", 100 * busbw_mbit / link_mbit);
    std::snprintf(line, sizeof(line), "| %s | %.2f | %s | %.2f | %.2f | %.1f | %s |\n", row.model.c_str(),
                  row.bytes / 1e6, row.path.c_str(), med * 1e3, min * 1e3, busbw_mbit, share);
    table << line;
    std::snprintf(
        line, sizeof(line),
        "%s{\"model\": \"%s\", \"bytes\": %lld, \"path\": \"%s\", \"median_ms\": %.4f, \"min_ms\": %.4f, "
        "\"busbw_mbit\": %.3f, \"link_mbit\": %.1f}",
        json.empty() ? "" : ", ", row.model.c_str(), static_cast<long long>(row.bytes), row.path.c_str(),
        med * 1e3, min * 1e3, busbw_mbit, link_mbit);
    json += line;
  }
  return table.str();
}

// ---- command line --------------------------------------------------------------------

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  return parts;
}

// Throws std::invalid_argument naming the bad flag or value.
Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 == argc) throw std::invalid_argument(flag + " needs a value");
    const std::string value = argv[i + 1];
    if (flag == "--json") {
      options.json_path = value;
    } else if (flag == "--repeats") {
      options.repeats = std::stoi(value);
      if (options.repeats < 1 || options.repeats > 1000)
        throw std::invalid_argument("--repeats " + value + ": expected 1..1000");
    } else if (flag == "--ingest-seconds") {
      options.ingest_seconds = std::stod(value);
      if (!(options.ingest_seconds > 0))
        throw std::invalid_argument("--ingest-seconds " + value + ": expected > 0");
    } else if (flag == "--episode-lengths") {
      options.episode_lengths.clear();
      for (const std::string& part : split(value)) {
        const int64_t length = std::stoll(part);
        if (length < 1 || length > 500)
          throw std::invalid_argument("--episode-lengths " + part + ": expected 1..500 (CartPole's limit)");
        options.episode_lengths.push_back(length);
      }
    } else if (flag == "--parts") {
      options.broadcast = options.ingest = options.all_reduce = false;
      for (const std::string& part : split(value)) {
        if (part == "broadcast")
          options.broadcast = true;
        else if (part == "ingest")
          options.ingest = true;
        else if (part == "allreduce")
          options.all_reduce = true;
        else
          throw std::invalid_argument("--parts " + part + ": expected broadcast, ingest and/or allreduce");
      }
    } else if (flag == "--link-mbit") {
      options.link_mbit = std::stod(value);
      if (!(options.link_mbit >= 0)) throw std::invalid_argument("--link-mbit " + value + ": expected >= 0");
    } else {
      throw std::invalid_argument(
          "unknown flag " + flag +
          "; usage: [--parts broadcast,ingest,allreduce] [--repeats R] [--ingest-seconds S] "
          "[--episode-lengths 25,500] [--link-mbit M] [--json PATH]");
    }
  }
  return options;
}

// Every rank runs the same parts in the same order; rank 0 prints and writes the JSON.
void run(const Options& options) {
  const std::string load_at_start = load_average();
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int host_length = 0;
  MPI_Get_processor_name(host, &host_length);
  kvrl::MpiTransport transport(MPI_COMM_WORLD);
  MPI_Comm members;  // learner 0 and every actor: here the whole world, as train_command splits it
  KVRL_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &members), "making the weight broadcast communicator");

  std::vector<BroadcastRow> broadcasts;
  if (options.broadcast) {
    for (const ModelSize& model : kModelSizes) {
      for (BroadcastRow& row : time_broadcasts(transport, members, model, options.repeats))
        broadcasts.push_back(row);
    }
  }
  std::vector<IngestRow> ingests;
  if (options.ingest) {
    for (int64_t length : options.episode_lengths)
      ingests.push_back(time_ingest(transport, length, options.ingest_seconds));
  }
  std::vector<AllReduceRow> all_reduces;
  if (options.all_reduce) all_reduces = time_all_reduce(options.repeats);
  if (transport.rank() == 0) {
    std::string broadcast_json, ingest_json, all_reduce_json;
    std::printf("kvrl_bench_scaling: rank 0 on %s and %d actor(s); load average at start %s, at end %s\n",
                host, transport.size() - 1, load_at_start.c_str(), load_average().c_str());
    if (options.broadcast)
      std::printf("%s", broadcast_report(broadcasts, transport.size() - 1, broadcast_json).c_str());
    if (options.ingest) std::printf("%s", ingest_report(ingests, transport.size() - 1, ingest_json).c_str());
    if (options.all_reduce) {
      std::printf(
          "%s", all_reduce_report(all_reduces, transport.size(), options.link_mbit, all_reduce_json).c_str());
    }
    std::ofstream(options.json_path) << "{\"actors\": " << transport.size() - 1 << ", \"rank0_host\": \""
                                     << host << "\", \"repeats\": " << options.repeats
                                     << ", \"load_average_start\": \"" << load_at_start
                                     << "\", \"load_average_end\": \"" << load_average()
                                     << "\", \"broadcast\": [" << broadcast_json << "], \"ingest\": ["
                                     << ingest_json << "], \"all_reduce\": [" << all_reduce_json << "]}\n";
    std::printf("wrote %s\n", options.json_path.c_str());
  }
  KVRL_MPI_CHECK(MPI_Comm_free(&members), "freeing the weight broadcast communicator");
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const std::exception& error) {
    if (rank == 0) std::fprintf(stderr, "kvrl_bench_scaling: %s\n", error.what());
    MPI_Finalize();
    return 2;
  }
  if (size < 2) {
    if (rank == 0)
      std::fprintf(stderr, "kvrl_bench_scaling: needs rank 0 and at least one actor (-np 2 or more)\n");
    MPI_Finalize();
    return 2;
  }
  at::set_num_threads(1);
  run(options);  // its transport and communicator are gone before MPI_Finalize
  MPI_Finalize();
  return 0;
}
