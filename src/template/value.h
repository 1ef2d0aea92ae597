// The values a template computes with, modelled on the Python objects that Jinja hands
// around: None, bool, int, float, str, list, tuple, dict (insertion-ordered), plus
// namespaces, loop objects and callables. str(), repr(), truthiness, equality and ordering
// follow Python, because chat templates print and compare these values and their output
// must match what transformers renders byte for byte.
//
// Lists and dicts are immutable once built (the sandbox forbids mutating methods, as
// transformers' ImmutableSandboxedEnvironment does), so values share them freely.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace ferry::jinja {

class Value;
class Interpreter;
struct CallArgs;

// An error raised while rendering, named as Python names it ("UndefinedError",
// "TypeError", "TemplateError", ...). The interpreter adds where it happened.
struct RenderError {
  std::string kind;
  std::string message;
};

[[noreturn]] void Raise(std::string kind, std::string message);

// An insertion-ordered mapping. String keys are indexed; others are compared as Python does.
class DictData {
 public:
  DictData() = default;
  DictData(const DictData&) = default;
  DictData(DictData&&) = default;
  DictData& operator=(const DictData&) = default;
  DictData& operator=(DictData&&) = default;
  ~DictData();  // frees nested values without recursion (Value::ReleaseNested)
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  // Inserts, or replaces the value of an equal key in place (its position is kept).
  void Set(Value key, Value value);
  size_t size() const;  // defined below Value: its pairs need the complete type
  bool empty() const;
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }

 private:
  friend class Value;
  std::vector<std::pair<Value, Value>> items_;
  std::unordered_map<std::string, size_t> by_string_;
};

// Objects with attributes: namespaces, the loop variable, cyclers, joiners.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string TypeName() const = 0;
  // Undefined when the object has no such attribute.
  virtual Value GetAttr(const std::string& name) const;
  // Only namespaces accept assignments; false otherwise.
  virtual bool SetAttr(const std::string& name, Value value);
  virtual std::string Repr() const;
  // `obj(...)`: a TypeError unless the object is callable (the recursive loop is).
  virtual Value Call(Interpreter& in, CallArgs& args);
};

// Macros, builtin functions, bound methods, callable objects.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual Value Call(Interpreter& in, CallArgs& args) = 0;
  virtual std::string Name() const = 0;
};

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kObject, kCallable };

  Value() = default;  // undefined
  Value(bool b) : kind_(Kind::kBool), data_(b) {}                       // NOLINT
  Value(int v) : kind_(Kind::kInt), data_(static_cast<int64_t>(v)) {}    // NOLINT
  Value(int64_t v) : kind_(Kind::kInt), data_(v) {}                      // NOLINT
  Value(double v) : kind_(Kind::kFloat), data_(v) {}                     // NOLINT
  Value(std::string s)                                                   // NOLINT
      : kind_(Kind::kString), data_(std::make_shared<const std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}                        // NOLINT
  Value(std::string_view s) : Value(std::string(s)) {}                   // NOLINT

  // An undefined value; `hint` is the message of the error that using it raises, an
  // UndefinedError unless `kind` names another (the sandbox's SecurityError).
  static Value Undefined(std::string hint, std::string_view kind = {});
  static Value None();
  static Value List(std::vector<Value> items);
  static Value Tuple(std::vector<Value> items);
  static Value Dict(DictData dict);
  static Value Object(std::shared_ptr<jinja::Object> object);
  static Value Function(std::shared_ptr<Callable> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }    // not bool
  bool is_float() const { return kind_ == Kind::kFloat; }
  // int, float or bool (Python's bool is an int).
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool AsBool() const { return std::get<bool>(data_); }
  int64_t AsInt() const;    // int or bool
  double AsFloat() const;   // any number
  const std::string& AsString() const { return *std::get<std::shared_ptr<const std::string>>(data_); }
  const std::vector<Value>& AsList() const;  // list or tuple
  const DictData& AsDict() const { return *std::get<std::shared_ptr<const DictData>>(data_); }
  jinja::Object* AsObject() const { return std::get<std::shared_ptr<jinja::Object>>(data_).get(); }
  const std::shared_ptr<jinja::Object>& object_ptr() const { return std::get<std::shared_ptr<jinja::Object>>(data_); }
  Callable* AsCallable() const { return std::get<std::shared_ptr<Callable>>(data_).get(); }
  // The message and kind of the error an undefined value raises when used.
  std::string undefined_hint() const;
  std::string undefined_kind() const;

  // Python's bool(x).
  bool Truthy() const;
  // Python's type(x).__name__: 'str', 'dict', 'NoneType', ...
  std::string TypeName() const;

 private:
  friend class DictData;
  struct ListData {
    std::vector<Value> items;
    ~ListData() { ReleaseNested(items); }
  };
  // Frees `items` without recursion: a list or dict that dies with its holder has its own
  // items moved onto an explicit stack first, so a value nested 100,000 deep (which a
  // template can build) is freed in a loop instead of overflowing the stack.
  static void ReleaseNested(std::vector<Value>& items);
  // Moves this value's items onto `pending` when it is the only owner of its list or dict.
  void MoveOutSoleItems(std::vector<Value>& pending);
  Kind kind_ = Kind::kUndefined;
  std::variant<std::monostate, bool, int64_t, double, std::shared_ptr<const std::string>,
               std::shared_ptr<const ListData>, std::shared_ptr<const DictData>, std::shared_ptr<jinja::Object>,
               std::shared_ptr<Callable>>
      data_;
};

// Bounds the recursion of the functions that walk nested values (str, ==, tojson): a
// template can build a list nested 100,000 deep, and walking it must fail, not overflow.
class NestingGuard {
 public:
  static constexpr int kMaxNesting = 512;
  NestingGuard();
  ~NestingGuard() { --depth_; }
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;

 private:
  static inline thread_local int depth_ = 0;
};

// Raises the UndefinedError that using `v` deserves (v must be undefined).
[[noreturn]] void RaiseUndefined(const Value& v);

// Python's str(x) (undefined: ""), repr(x), ==, and the ordering of <, <=, >, >=.
std::string Str(const Value& v);
std::string Repr(const Value& v);
bool Equals(const Value& a, const Value& b);
// Negative, zero or positive; a TypeError naming `op` for values Python cannot order.
int Compare(const Value& a, const Value& b, std::string_view op);

// Python's repr of a float: the shortest text that reads back exactly ("1.0", "1e-05",
// "1e+16", "inf", "nan").
std::string FormatFloat(double v);
// Python's repr of a str: quoted, with escapes for non-printable characters.
std::string ReprString(std::string_view s);

// UTF-8 helpers: strings are UTF-8; Python indexes them by code point.
std::vector<uint32_t> DecodeUtf8(std::string_view s);
std::string EncodeUtf8(const std::vector<uint32_t>& cps, size_t begin, size_t end);
void AppendUtf8(uint32_t cp, std::string& out);
size_t Utf8Length(std::string_view s);
// Python's str.isspace() for one code point.
bool IsPySpace(uint32_t cp);

inline size_t DictData::size() const { return items_.size(); }
inline bool DictData::empty() const { return items_.empty(); }

}  // namespace ferry::jinja
