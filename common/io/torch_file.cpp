#include "common/io/torch_file.h"

#include <ATen/ops/empty.h>
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/support/errors.h"

namespace kvrl {
namespace {

// A global the program named (an allowed one): lives on the stack as a capsule so it can
// sit inside the storage-reference tuple, and must never reach the result.
struct GlobalRef : torch::CustomClassHolder {
  explicit GlobalRef(std::string name) : name(std::move(name)) {}
  std::string name;
};

c10::IValue make_global(std::string name) {
  return c10::IValue::make_capsule(c10::make_intrusive<GlobalRef>(std::move(name)));
}

const std::string* global_name(const c10::IValue& value) {
  if (!value.isCapsule()) return nullptr;
  auto* ref = dynamic_cast<GlobalRef*>(value.toCapsule().get());
  return ref ? &ref->name : nullptr;
}

bool is_container(const c10::IValue& value) {
  return value.isList() || value.isGenericDict() || value.isTuple();
}

const std::unordered_map<std::string, c10::ScalarType>& storage_dtypes() {
  static const std::unordered_map<std::string, c10::ScalarType> dtypes{
      {"torch FloatStorage", c10::kFloat}, {"torch DoubleStorage", c10::kDouble},
      {"torch HalfStorage", c10::kHalf},   {"torch BFloat16Storage", c10::kBFloat16},
      {"torch LongStorage", c10::kLong},   {"torch IntStorage", c10::kInt},
      {"torch ShortStorage", c10::kShort}, {"torch CharStorage", c10::kChar},
      {"torch ByteStorage", c10::kByte},   {"torch BoolStorage", c10::kBool}};
  return dtypes;
}

class PickleInterpreter {
 public:
  PickleInterpreter(std::string_view program, const StorageRecordLoader& load_storage, std::string origin)
      : program_(program), load_storage_(load_storage), origin_(std::move(origin)) {}

  c10::IValue run() {
    while (true) {
      const auto opcode = static_cast<unsigned char>(read_bytes(1)[0]);
      if (opcode == '.') break;  // STOP
      execute(opcode);
    }
    if (stack_.size() != 1 || !marks_.empty()) fail("pickle did not end with one value");
    if (holds_global(stack_.back())) fail("a global is not a value");
    return stack_.back();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw MalformedInputError(origin_ + ": " + what + " (at byte " + std::to_string(position_) + ")");
  }

  std::string_view read_bytes(size_t n) {
    if (n > program_.size() - position_) fail("truncated pickle");
    std::string_view bytes = program_.substr(position_, n);
    position_ += n;
    return bytes;
  }
  template <typename T>
  T read_little() {
    T value;
    std::memcpy(&value, read_bytes(sizeof(T)).data(), sizeof(T));
    return value;
  }
  std::string read_line() {
    const size_t end = program_.find('\n', position_);
    if (end == std::string_view::npos) fail("truncated pickle");
    std::string line(program_.substr(position_, end - position_));
    position_ = end + 1;
    return line;
  }

  void push(c10::IValue value) {
    if (stack_.size() >= kMaxStack) fail("pickle stack too deep");
    stack_.push_back(std::move(value));
  }
  c10::IValue pop() {
    if (stack_.size() <= mark_floor()) fail("pickle stack underflow");
    c10::IValue item = std::move(stack_.back());
    stack_.pop_back();
    return item;
  }
  // Pops a value bound for a dict, a list or an argument: never a global.
  c10::IValue pop_value() {
    c10::IValue item = pop();
    if (holds_global(item)) fail("a global is not a value");
    return item;
  }
  c10::IValue& top() {
    if (stack_.size() <= mark_floor()) fail("pickle stack underflow");
    return stack_.back();
  }
  size_t mark_floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<c10::IValue> pop_to_mark() {
    if (marks_.empty()) fail("no MARK before a collection opcode");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<c10::IValue> items(std::make_move_iterator(stack_.begin() + mark),
                                   std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return items;
  }

  void memo_put(uint64_t index) {
    if (index > kMaxMemo) fail("memo index too large");
    memo_[index] = top();
  }
  void memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo index " + std::to_string(index) + " was never stored");
    if (stack_.size() >= kMaxStack) fail("pickle stack too deep");
    stack_.push_back(it->second);
  }

  // Every list, dict and tuple the program makes is registered with its nesting depth. A
  // list or dict put into another container is frozen: changing it later is refused, so no
  // container comes to hold itself (a cycle would leak and send a walk over the result
  // round forever), and a depth, once its container is put away, stays what it was, so
  // nesting is bounded (destroying a deeper value would recurse off the stack). Python's
  // pickler finishes each container before putting it into another; only an object that
  // refers to itself makes it change a frozen one.
  c10::IValue registered(c10::IValue container, int depth, bool holds_a_global = false) {
    if (depth > kMaxDepth) fail("containers nested deeper than " + std::to_string(kMaxDepth) + " levels");
    const void* key = container.internalToPointer();
    depth_[key] = depth;
    if (holds_a_global) tuples_with_globals_.insert(key);
    containers_.push_back(container);  // so no later container reuses its address
    return container;
  }
  int depth_of(const c10::IValue& value) const {
    if (!is_container(value)) return 0;
    const auto it = depth_.find(value.internalToPointer());
    return it == depth_.end() ? 1 : it->second;
  }
  // Whether a global hides in `value`: only tuples can carry one before it lands in a
  // dict, a list or the result.
  bool holds_global(const c10::IValue& value) const {
    return value.isCapsule() ||
           (value.isTuple() && tuples_with_globals_.count(value.internalToPointer()) > 0);
  }
  c10::IValue new_dict() {
    return registered(c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get()), /*depth=*/1);
  }
  c10::IValue new_tuple(std::vector<c10::IValue> items) {
    int depth = 0;
    bool global = false;
    for (const auto& item : items) {
      depth = std::max(depth, depth_of(item));
      global = global || holds_global(item);
      if (item.isList() || item.isGenericDict()) frozen_.insert(item.internalToPointer());
    }
    return registered(c10::ivalue::Tuple::create(std::move(items)), depth + 1, global);
  }
  // Checks `item` before it goes into `target`, the list or dict at the top of the stack.
  void check_insert(const c10::IValue& target, const c10::IValue& item) {
    if (holds_global(item)) fail("a global is not a value");
    const void* key = target.internalToPointer();
    if (frozen_.count(key) > 0)
      fail("a list or dict changed after it was put into another (it refers to itself)");
    if (!is_container(item)) return;
    if (item.internalToPointer() == key) fail("a list or dict put into itself");
    const int depth = depth_of(item) + 1;
    if (depth > kMaxDepth) fail("containers nested deeper than " + std::to_string(kMaxDepth) + " levels");
    depth_[key] = std::max(depth_[key], depth);
    if (!item.isTuple()) frozen_.insert(item.internalToPointer());
  }
  // What c10's dict can hash (it throws c10::Error on a None key, which Python allows).
  static bool hashable(const c10::IValue& key) {
    return key.isString() || key.isInt() || key.isBool() || key.isDouble();
  }
  void set_items(std::vector<c10::IValue>& items) {
    const c10::IValue& target = top();
    if (!target.isGenericDict()) fail("SETITEM(S) target is not a dict");
    if (items.size() % 2 != 0) fail("SETITEMS with an odd number of items");
    auto dict = target.toGenericDict();
    for (size_t i = 0; i < items.size(); i += 2) {
      if (!hashable(items[i])) fail("dict key of type " + items[i].tagKind() + " is not supported");
      check_insert(target, items[i + 1]);
      dict.insert_or_assign(std::move(items[i]), std::move(items[i + 1]));
    }
  }
  void append(std::vector<c10::IValue>& items) {
    const c10::IValue& target = top();
    if (!target.isList()) fail("APPEND(S) target is not a list");
    auto list = target.toList();
    for (auto& item : items) {
      check_insert(target, item);
      list.push_back(std::move(item));
    }
  }

  void execute(unsigned char opcode) {
    switch (opcode) {
      case 0x80: {  // PROTO
        const auto version = static_cast<unsigned char>(read_bytes(1)[0]);
        if (version < 2 || version > 4)
          fail("pickle protocol " + std::to_string(version) + " is not supported (2 to 4)");
        return;
      }
      case 0x95:
        read_bytes(8);
        return;  // FRAME: the frame length is only a read hint
      case '}':
        push(new_dict());
        return;
      case ']':
        push(registered(c10::impl::GenericList(c10::AnyType::get()), /*depth=*/1));
        return;
      case ')':
        push(new_tuple({}));
        return;
      case '(':
        if (marks_.size() >= kMaxStack) fail("too many MARKs");
        marks_.push_back(stack_.size());
        return;
      case 'N':
        push(c10::IValue());
        return;
      case 0x88:
        push(true);
        return;
      case 0x89:
        push(false);
        return;
      case 'K':
        push(static_cast<int64_t>(read_little<uint8_t>()));
        return;
      case 'M':
        push(static_cast<int64_t>(read_little<uint16_t>()));
        return;
      case 'J':
        push(static_cast<int64_t>(read_little<int32_t>()));
        return;
      case 0x8a: {  // LONG1: little-endian two's complement of n bytes
        const auto n = static_cast<unsigned char>(read_bytes(1)[0]);
        if (n > 8) fail("integer wider than 64 bits");
        const std::string_view bytes = read_bytes(n);
        uint64_t raw = 0;
        for (size_t i = 0; i < n; ++i)
          raw |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
        if (n > 0 && n < 8 && (static_cast<unsigned char>(bytes[n - 1]) & 0x80))
          raw |= ~uint64_t{0} << (8 * n);
        push(static_cast<int64_t>(raw));
        return;
      }
      case 'G': {  // BINFLOAT, big-endian
        uint64_t raw = 0;
        for (char byte : read_bytes(8)) raw = (raw << 8) | static_cast<unsigned char>(byte);
        double value;
        std::memcpy(&value, &raw, sizeof(value));
        push(value);
        return;
      }
      case 'X':
        push(std::string(read_bytes(read_little<uint32_t>())));
        return;
      case 0x8c:
        push(std::string(read_bytes(read_little<uint8_t>())));
        return;
      case 'q':
        memo_put(read_little<uint8_t>());
        return;
      case 'r':
        memo_put(read_little<uint32_t>());
        return;
      case 0x94:
        memo_put(memo_.size());
        return;  // MEMOIZE
      case 'h':
        memo_get(read_little<uint8_t>());
        return;
      case 'j':
        memo_get(read_little<uint32_t>());
        return;
      case 't':
        push(new_tuple(pop_to_mark()));
        return;
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        std::vector<c10::IValue> items(opcode - 0x84);
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop_value();
        push(new_tuple(std::move(items)));
        return;
      }
      case 'a': {
        std::vector<c10::IValue> items{pop_value()};
        append(items);
        return;
      }
      case 'e': {
        std::vector<c10::IValue> items = pop_to_mark();
        append(items);
        return;
      }
      case 's': {
        std::vector<c10::IValue> items(2);
        items[1] = pop_value();
        items[0] = pop_value();
        set_items(items);
        return;
      }
      case 'u': {
        std::vector<c10::IValue> items = pop_to_mark();
        set_items(items);
        return;
      }
      case 'c': {  // GLOBAL "module\nname\n"
        std::string module = read_line();
        push_global(module + " " + read_line());
        return;
      }
      case 0x93: {  // STACK_GLOBAL
        c10::IValue name = pop_value();
        c10::IValue module = pop_value();
        if (!module.isString() || !name.isString()) fail("STACK_GLOBAL needs two strings");
        push_global(module.toStringRef() + " " + name.toStringRef());
        return;
      }
      case 'Q':
        push(load_persistent(pop()));
        return;
      case 'R': {
        c10::IValue args = pop_value();
        c10::IValue callable = pop();
        const std::string* name = global_name(callable);
        if (name == nullptr) fail("REDUCE on a value, not a global");
        if (!args.isTuple()) fail("REDUCE arguments are not a tuple");
        push(call(*name, args.toTupleRef().elements()));
        return;
      }
      case 'b': {  // BUILD: only an OrderedDict's instance state (_metadata) comes here
        pop_value();
        if (!top().isGenericDict()) fail("BUILD on a non-dict object");
        return;
      }
      default: {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "0x%02x", opcode);
        fail(std::string("pickle opcode ") + hex + " is not allowed (tensors and plain containers only)");
      }
    }
  }

  void push_global(std::string name) {
    static const char* kAllowed[] = {"collections OrderedDict", "torch._utils _rebuild_tensor_v2",
                                     "torch._utils _rebuild_parameter"};
    bool allowed = storage_dtypes().count(name) > 0;
    for (const char* candidate : kAllowed) allowed = allowed || name == candidate;
    if (!allowed) fail("global '" + name + "' is not allowed (tensors and plain containers only)");
    push(make_global(std::move(name)));
  }

  c10::IValue call(const std::string& global, c10::ArrayRef<c10::IValue> args) {
    if (global == "collections OrderedDict") {
      if (!args.empty()) fail("OrderedDict called with arguments");
      return new_dict();
    }
    if (global == "torch._utils _rebuild_parameter") {
      if (args.size() != 3 || !args[0].isTensor()) fail("malformed _rebuild_parameter call");
      return args[0];
    }
    if (global == "torch._utils _rebuild_tensor_v2") return rebuild_tensor(args);
    fail("global '" + global + "' cannot be called");
  }

  std::vector<int64_t> int_tuple(const c10::IValue& value, const char* what) {
    if (!value.isTuple()) fail(std::string("tensor ") + what + " is not a tuple");
    std::vector<int64_t> ints;
    for (const auto& item : value.toTupleRef().elements()) {
      if (!item.isInt() || item.toInt() < 0) fail(std::string("tensor ") + what + " holds a non-count");
      ints.push_back(item.toInt());
    }
    return ints;
  }

  c10::IValue rebuild_tensor(c10::ArrayRef<c10::IValue> args) {
    if (args.size() < 6 || args.size() > 7 || !args[0].isTensor() || !args[1].isInt()) {
      fail("malformed _rebuild_tensor_v2 call");
    }
    const at::Tensor& storage = args[0].toTensor();
    const int64_t offset = args[1].toInt();
    const std::vector<int64_t> sizes = int_tuple(args[2], "size");
    const std::vector<int64_t> strides = int_tuple(args[3], "stride");
    if (sizes.size() != strides.size()) fail("tensor size and stride differ in rank");
    // The last element the view can reach must lie inside the storage. The numbers come
    // from the file, so every product and sum is checked, and a view of more than 2^40
    // elements (a stride of 0 repeats one) is refused before LibTorch throws on it.
    constexpr int64_t kMaxElements = int64_t{1} << 40;
    if (offset < 0 || offset > storage.numel()) {
      fail("tensor offset " + std::to_string(offset) + " lies outside its storage of " +
           std::to_string(storage.numel()) + " elements");
    }
    int64_t last = offset, numel = 1;
    for (size_t i = 0; i < sizes.size(); ++i) {
      int64_t reach = 0;
      if (sizes[i] > kMaxElements || strides[i] > kMaxElements ||
          __builtin_mul_overflow(numel, sizes[i], &numel) || numel > kMaxElements ||
          (sizes[i] > 0 && (__builtin_mul_overflow(sizes[i] - 1, strides[i], &reach) ||
                            __builtin_add_overflow(last, reach, &last)))) {
        fail("tensor extent too large");
      }
    }
    if (numel > 0 && last >= storage.numel()) {
      fail("tensor view reaches past its storage of " + std::to_string(storage.numel()) + " elements");
    }
    at::Tensor tensor = at::empty({0}, storage.options());
    tensor.set_(storage.storage(), offset, sizes, strides);
    return tensor;
  }

  c10::IValue load_persistent(const c10::IValue& pid) {
    if (!pid.isTuple() || pid.toTupleRef().elements().size() != 5) fail("malformed storage reference");
    const auto& fields = pid.toTupleRef().elements();
    if (!fields[0].isString() || fields[0].toStringRef() != "storage" || !fields[2].isString() ||
        !fields[4].isInt()) {
      fail("malformed storage reference");
    }
    const std::string* storage_type = global_name(fields[1]);
    auto dtype_it = storage_type ? storage_dtypes().find(*storage_type) : storage_dtypes().end();
    if (dtype_it == storage_dtypes().end()) fail("storage reference without a storage type");
    const std::string key = fields[2].toStringRef();
    auto cached = storages_.find(key);
    if (cached != storages_.end()) return cached->second;
    const int64_t numel = fields[4].toInt();
    const size_t element_size = c10::elementSize(dtype_it->second);
    if (numel < 0 || numel > (int64_t{1} << 40)) fail("storage '" + key + "' has an invalid size");
    const std::string bytes = load_storage_(key);
    if (bytes.size() != static_cast<size_t>(numel) * element_size) {
      fail("storage '" + key + "' holds " + std::to_string(bytes.size()) + " bytes, expected " +
           std::to_string(numel * element_size));
    }
    at::Tensor storage = at::empty({numel}, at::TensorOptions().dtype(dtype_it->second));
    if (!bytes.empty()) std::memcpy(storage.data_ptr(), bytes.data(), bytes.size());
    storages_.emplace(key, storage);
    return storage;
  }

  static constexpr size_t kMaxStack = 1 << 16;
  static constexpr int kMaxDepth = 256;  // kvrl's files nest a few levels
  static constexpr uint64_t kMaxMemo = 1 << 24;
  std::string_view program_;
  size_t position_ = 0;
  const StorageRecordLoader& load_storage_;
  std::string origin_;
  std::vector<c10::IValue> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, c10::IValue> memo_;
  std::map<std::string, at::Tensor> storages_;
  std::vector<c10::IValue> containers_;         // every container made, kept alive
  std::unordered_map<const void*, int> depth_;  // each container's nesting depth
  std::unordered_set<const void*> frozen_;      // lists and dicts put into another
  std::unordered_set<const void*> tuples_with_globals_;
};

}  // namespace

c10::IValue parse_torch_pickle(std::string_view pickle, const StorageRecordLoader& load_storage,
                               const std::string& origin) {
  PickleInterpreter interpreter(pickle, load_storage, origin);
  return interpreter.run();
}

c10::IValue read_torch_file(const std::string& path) {
  if (!std::ifstream(path, std::ios::binary))
    throw MalformedInputError("cannot open '" + path + "' for reading");
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> archive;
  std::string pickle;
  try {
    archive = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
    if (archive->hasRecord("byteorder")) {
      auto [data, size] = archive->getRecord("byteorder");
      if (std::string(static_cast<const char*>(data.get()), size) != "little") {
        throw MalformedInputError("'" + path +
                                  "' was written on a big-endian machine, which is not supported");
      }
    }
    auto [data, size] = archive->getRecord("data.pkl");
    pickle.assign(static_cast<const char*>(data.get()), size);
  } catch (const c10::Error& error) {
    // miniz's reason, without the paragraph of advice PyTorch appends to it.
    std::string reason = error.what_without_backtrace();
    const size_t advice = reason.find(". This is an internal miniz error");
    if (advice != std::string::npos) reason.resize(advice);
    throw MalformedInputError("'" + path + "' is not a torch.save archive: " + reason);
  }
  const StorageRecordLoader load_storage = [&](const std::string& key) {
    const std::string record = "data/" + key;
    try {
      auto [data, size] = archive->getRecord(record);
      return std::string(static_cast<const char*>(data.get()), size);
    } catch (const c10::Error& error) {
      throw MalformedInputError("'" + path + "': storage record '" + record + "' is missing or unreadable");
    }
  };
  return parse_torch_pickle(pickle, load_storage, "'" + path + "'");
}

}  // namespace kvrl

namespace kvrl {
namespace {

// Emits a protocol-2 pickle program for plain values and tensors, writing each tensor's
// bytes as its own storage record, as torch.save lays them out.
class PickleWriter {
 public:
  explicit PickleWriter(caffe2::serialize::PyTorchStreamWriter& archive) : archive_(archive) {}

  std::string finish(const c10::IValue& value) {
    out_ += "\x80\x02";
    write(value);
    out_ += '.';
    return std::move(out_);
  }

 private:
  void write_string(const std::string& text) {
    out_ += 'X';
    const auto size = static_cast<uint32_t>(text.size());
    out_.append(reinterpret_cast<const char*>(&size), sizeof(size));
    out_ += text;
  }
  void write_int(int64_t value) {
    if (value >= std::numeric_limits<int32_t>::min() && value <= std::numeric_limits<int32_t>::max()) {
      out_ += 'J';
      const auto narrow = static_cast<int32_t>(value);
      out_.append(reinterpret_cast<const char*>(&narrow), sizeof(narrow));
      return;
    }
    out_ += "\x8a\x08";
    out_.append(reinterpret_cast<const char*>(&value), sizeof(value));
  }

  void write(const c10::IValue& value) {
    if (value.isNone()) {
      out_ += 'N';
    } else if (value.isBool()) {
      out_ += value.toBool() ? '\x88' : '\x89';
    } else if (value.isInt()) {
      write_int(value.toInt());
    } else if (value.isDouble()) {
      out_ += 'G';
      uint64_t raw;
      const double number = value.toDouble();
      std::memcpy(&raw, &number, sizeof(raw));
      for (int shift = 56; shift >= 0; shift -= 8) out_ += static_cast<char>((raw >> shift) & 0xff);
    } else if (value.isString()) {
      write_string(value.toStringRef());
    } else if (value.isGenericDict()) {
      out_ += "}(";
      for (const auto& entry : value.toGenericDict()) {
        write(entry.key());
        write(entry.value());
      }
      out_ += 'u';
    } else if (value.isList()) {
      out_ += "](";
      for (const auto& item : value.toListRef()) write(item);
      out_ += 'e';
    } else if (value.isTuple()) {
      out_ += '(';
      for (const auto& item : value.toTupleRef().elements()) write(item);
      out_ += 't';
    } else if (value.isTensor()) {
      write_tensor(value.toTensor());
    } else {
      throw InvalidArgumentError("cannot write a " + value.tagKind() + " to a torch file");
    }
  }

  void write_tensor(const at::Tensor& tensor) {
    std::string storage_type;
    for (const auto& [name, dtype] : storage_dtypes()) {
      if (dtype == tensor.scalar_type()) storage_type = name;
    }
    if (storage_type.empty()) {
      throw InvalidArgumentError(std::string("cannot write a tensor of dtype ") +
                                 c10::toString(tensor.scalar_type()) + " to a torch file");
    }
    const at::Tensor data = tensor.detach().to(at::kCPU).contiguous();
    const std::string key = std::to_string(next_key_++);
    archive_.writeRecord("data/" + key, data.data_ptr(), data.nbytes());
    const size_t split = storage_type.find(' ');
    out_ += "ctorch._utils\n_rebuild_tensor_v2\n(";
    out_ += '(';
    write_string("storage");
    out_ += 'c' + storage_type.substr(0, split) + '\n' + storage_type.substr(split + 1) + '\n';
    write_string(key);
    write_string("cpu");
    write_int(data.numel());
    out_ += "tQ";  // the storage reference tuple, then BINPERSID
    write_int(0);
    out_ += '(';
    for (int64_t size : data.sizes()) write_int(size);
    out_ += "t(";
    for (int64_t stride : data.strides()) write_int(stride);
    out_ += 't';
    out_ += '\x89';
    out_ += "ccollections\nOrderedDict\n)R";  // no backward hooks
    out_ += "tR";
  }

  caffe2::serialize::PyTorchStreamWriter& archive_;
  std::string out_;
  int64_t next_key_ = 0;
};

}  // namespace

void write_torch_file(const std::string& path, const c10::IValue& value) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("cannot open '" + path + "' for writing");
  {
    caffe2::serialize::PyTorchStreamWriter archive([&](const void* data, size_t size) -> size_t {
      out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
      return out ? size : 0;
    });
    PickleWriter writer(archive);
    const std::string program = writer.finish(value);
    archive.writeRecord("byteorder", "little", 6);
    archive.writeRecord("data.pkl", program.data(), program.size());
    archive.writeEndOfFile();
  }
  out.flush();
  if (!out) throw Error("cannot write '" + path + "'");
}

}  // namespace kvrl
