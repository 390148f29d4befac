// Typed errors for bad input. Every component throws these for problems a caller can
// fix (a wrong value, a malformed file); internal invariants use TORCH_INTERNAL_ASSERT.
// Each message names the offending value, what is allowed and, where there is one, the fix.
#pragma once

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

// A file or message does not have the expected structure: a missing key, a wrong type.
class MalformedInputError : public Error {
 public:
  using Error::Error;
};

}  // namespace kvrl
