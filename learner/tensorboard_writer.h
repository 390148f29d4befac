// Writes TensorBoard event files (events.out.tfevents.*) of scalar summaries, the format
// TensorBoard and tf.summary read: TFRecord framing (length, masked CRC-32C, payload,
// masked CRC-32C) around serialized `Event` protocol buffers, whose Summary values carry
// `simple_value` floats. Encoded by hand: the few fields used do not justify a protobuf
// dependency.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace kvrl {

class TensorBoardWriter {
 public:
  // Creates <dir>/events.out.tfevents.<unix seconds>.<host>.<pid> (and dir) and writes the
  // file-version record. Throws Error naming the file when it cannot be written.
  explicit TensorBoardWriter(const std::string& dir);

  // One event at `step` with every (tag, value) pair as a scalar; flushed at once.
  void write_scalars(int64_t step, double wall_time,
                     const std::vector<std::pair<std::string, double>>& scalars);

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& payload);

  std::string path_;
  std::ofstream out_;
};

}  // namespace kvrl
