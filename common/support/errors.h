// Typed errors for bad input. Every component throws these for problems a caller can
// fix (a wrong value, a malformed file); internal invariants use TORCH_INTERNAL_ASSERT.
// Each message names the offending value, what is allowed and, where there is one, the fix.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace kvrl {

// Base of every kvrl error, so callers can catch the family in one place.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A value supplied by the caller is out of what is allowed (the reference's ValueError).
class InvalidArgumentError : public Error {
 public:
  using Error::Error;
};

// An episode reached a position at or beyond max_seq_len (the reference's RuntimeError).
class SequenceTooLongError : public Error {
 public:
  using Error::Error;
};

// The error of every path that finds a position at or beyond max_seq_len, in one wording.
inline SequenceTooLongError sequence_too_long(int64_t max_seq_len) {
  return SequenceTooLongError("Episode length exceeded max_seq_len=" + std::to_string(max_seq_len) +
                              ". Increase max_seq_len or truncate episodes; sliding-window "
                              "attention is not implemented.");
}

// An environment's own code failed while stepping or resetting (a Python exception in a
// gym: environment, with its traceback): the run cannot go on with it.
class EnvironmentError : public Error {
 public:
  using Error::Error;
};

// A file or message does not have the expected structure: a missing key, a wrong type.
class MalformedInputError : public Error {
 public:
  using Error::Error;
};

// A message from another rank failed validation; the receiver drops and counts it.
class MalformedMessageError : public Error {
 public:
  enum class Reason { kTruncated, kChecksum, kHeader, kSpec, kContent, kFragment };
  MalformedMessageError(Reason reason, const std::string& what) : Error(what), reason_(reason) {}
  Reason reason() const { return reason_; }
  // "truncated", "checksum", "header", "spec", "content" or "fragment" (an episode fragment
  // inconsistent with its stream: step numbers, prefix, stream index): the counter's name.
  static const char* reason_name(Reason reason);

 private:
  Reason reason_;
};

inline const char* MalformedMessageError::reason_name(Reason reason) {
  switch (reason) {
    case Reason::kTruncated:
      return "truncated";
    case Reason::kChecksum:
      return "checksum";
    case Reason::kHeader:
      return "header";
    case Reason::kSpec:
      return "spec";
    case Reason::kContent:
      return "content";
    case Reason::kFragment:
      return "fragment";
  }
  return "unknown";
}

}  // namespace kvrl
