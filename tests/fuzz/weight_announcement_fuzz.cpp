// libFuzzer target for the announcement of a staged weight broadcast
// (common/comm/weight_announcement.h), which an actor decodes from learner 0's message. The
// decoder may only return an announcement with a version >= 0 and a count > 0, or throw
// MalformedMessageError; anything else (a crash, a sanitizer report, another exception,
// a decoded announcement that does not encode back to the same bytes) is a finding.
#include <cstdint>
#include <vector>

#include "common/comm/weight_announcement.h"
#include "common/support/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> message(data, data + size);
  try {
    const kvrl::WeightAnnouncement announcement = kvrl::WeightAnnouncement::decode(message);
    if (announcement.policy_version < 0 || announcement.parameter_count <= 0) __builtin_trap();
    if (announcement.encode() != message) __builtin_trap();
  } catch (const kvrl::MalformedMessageError&) {
    // the expected way to refuse
  }
  return 0;
}
