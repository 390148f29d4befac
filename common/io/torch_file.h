// Reads and writes torch.save's file format (a zip archive of a pickle program and raw
// storages) for tensors and plain containers. Reading goes into tensors and plain containers, with a pickle
// interpreter of our own that knows only those types: dicts (OrderedDict too), lists, tuples, strings,
// numbers, None, bools and tensors. Any other global in the file is rejected, so no code from the file ever
// runs; every length, index and storage extent is checked, so a corrupt or hostile file gives an error, never
// a crash. LibTorch's own unpickler cannot read an OrderedDict state_dict, which is what
// `torch.save(module.state_dict())` writes.
#pragma once

#include <ATen/core/ivalue.h>

#include <functional>
#include <string>
#include <string_view>

namespace kvrl {

// Returns the bytes of storage record `key` (the file's data/<key>); throws when absent.
using StorageRecordLoader = std::function<std::string(const std::string& key)>;

// Interprets one pickle program (protocol 2 to 4). Dicts come back as GenericDict with
// Any keys, tuples as Tuple, lists as GenericList. Throws MalformedInputError naming
// `origin` and the problem.
c10::IValue parse_torch_pickle(std::string_view pickle, const StorageRecordLoader& load_storage,
                               const std::string& origin);

// Opens a torch.save zip archive and interprets its data.pkl.
// Throws MalformedInputError naming the file when it is missing, not a torch.save
// archive, big-endian, or holds anything but tensors and plain containers.
c10::IValue read_torch_file(const std::string& path);

// Writes `value` (nested dicts with string keys, lists, tuples, strings, ints, doubles,
// bools, None and tensors) so that torch.load(path, weights_only=True) reads it back.
// Tensors are written contiguous, on CPU. Throws InvalidArgumentError on any other
// type and Error naming the file on I/O failure.
void write_torch_file(const std::string& path, const c10::IValue& value);

}  // namespace kvrl
