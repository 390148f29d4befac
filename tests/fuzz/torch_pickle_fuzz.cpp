// libFuzzer target for kvrl's torch.save pickle interpreter (common/io/torch_file.h), which
// reads checkpoints and the inputs of transformer-eval and env-rollout. An input is a
// pickle program with the storage records it may name (what read_torch_file finds in the
// zip archive around it):
//   byte 0            R, the number of storage records (taken mod 8)
//   R x uint16 (LE)   the byte size of record "0", "1", ..., "R-1"
//   the rest          the pickle program (data.pkl)
// tests/fuzz/corpus/torch_pickle/ holds torch.save files in this form
// (tests/fuzz/make_torch_pickle_seeds.py). The interpreter may only return tensors and plain
// containers or throw MalformedInputError. Anything else is a finding: a crash, a sanitizer
// report, another exception (c10::Error too: callers would call it an internal error), a
// global or a cycle in the result, or a tensor whose view reaches past its storage (read
// here, in instrumented code, so ASan sees it).
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/io/torch_file.h"
#include "common/support/errors.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "torch_pickle_fuzz: %s\n", what.c_str());
  __builtin_trap();
}

// Reads the first and the last byte the view can reach.
void touch_tensor(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.numel() == 0) return;
  int64_t last = tensor.storage_offset();
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    int64_t reach = 0;
    if (__builtin_mul_overflow(tensor.size(d) - 1, tensor.stride(d), &reach) ||
        __builtin_add_overflow(last, reach, &last))
      finding("a tensor view whose extent overflows int64");
  }
  const auto item = static_cast<int64_t>(tensor.element_size());
  const auto nbytes = static_cast<int64_t>(tensor.storage().nbytes());
  if (tensor.storage_offset() < 0 || last < 0 || (last + 1) * item > nbytes)
    finding("a tensor view reaching element " + std::to_string(last) + " of a storage of " +
            std::to_string(nbytes) + " bytes");
  const auto* base = static_cast<const volatile char*>(tensor.storage().data());
  (void)base[tensor.storage_offset() * item];
  (void)base[(last + 1) * item - 1];
}

// Walks the result without recursion, each container once (containers may be shared):
// only plain values, no cycles.
void check_result(const c10::IValue& root) {
  struct Visit {
    c10::IValue value;
    bool leaving;
  };
  std::vector<Visit> pending{{root, false}};
  std::unordered_set<const void*> open;  // containers on the current path
  std::unordered_set<const void*> done;  // containers walked
  while (!pending.empty()) {
    Visit visit = std::move(pending.back());
    pending.pop_back();
    const c10::IValue& value = visit.value;
    if (visit.leaving) {
      open.erase(value.internalToPointer());
      done.insert(value.internalToPointer());
      continue;
    }
    if (value.isNone() || value.isBool() || value.isInt() || value.isDouble() || value.isString()) continue;
    if (value.isTensor()) {
      touch_tensor(value.toTensor());
      continue;
    }
    if (!value.isTuple() && !value.isList() && !value.isGenericDict())
      finding("a " + value.tagKind() + " in the result");
    if (done.count(value.internalToPointer()) > 0) continue;
    if (!open.insert(value.internalToPointer()).second) finding("a cycle in the result");
    pending.push_back({value, true});
    if (value.isTuple()) {
      for (const auto& item : value.toTupleRef().elements()) pending.push_back({item, false});
    } else if (value.isList()) {
      for (const auto& item : value.toListRef()) pending.push_back({item, false});
    } else {
      for (const auto& entry : value.toGenericDict()) {
        pending.push_back({entry.key(), false});
        pending.push_back({entry.value(), false});
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t records = data[0] % 8;
  if (size < 1 + 2 * records) return 0;
  std::vector<size_t> record_sizes;
  for (size_t i = 0; i < records; ++i) record_sizes.push_back(data[1 + 2 * i] | (data[2 + 2 * i] << 8));
  const std::string_view pickle(reinterpret_cast<const char*>(data) + 1 + 2 * records,
                                size - 1 - 2 * records);
  const kvrl::StorageRecordLoader load = [&](const std::string& key) {
    for (size_t i = 0; i < records; ++i) {
      if (key == std::to_string(i)) {
        std::string bytes(record_sizes[i], '\0');
        for (size_t b = 0; b < bytes.size(); ++b) bytes[b] = static_cast<char>(b * 31 + i);
        return bytes;
      }
    }
    throw kvrl::MalformedInputError("'fuzz.pt': storage record 'data/" + key + "' is missing or unreadable");
  };
  try {
    check_result(kvrl::parse_torch_pickle(pickle, load, "'fuzz.pt'"));
  } catch (const kvrl::MalformedInputError&) {
    // the expected way to refuse
  }
  return 0;
}
