// Python's binary operators on template values, and printf-style `%` formatting.
#include <cctype>
#include <cmath>
#include <cstdio>

#include "template/interpreter.h"

namespace ferry::jinja {

namespace {

[[noreturn]] void Unsupported(const std::string& op, const Value& a, const Value& b) {
  Raise("TypeError", "unsupported operand type(s) for " + op + ": '" + a.TypeName() + "' and '" + b.TypeName() + "'");
}

template <typename Op>
int64_t Checked(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) Raise("OverflowError", "integer result too large");
  return r;
}
bool Add(int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool Sub(int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool Mul(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }

int64_t FloorDiv(int64_t a, int64_t b) {
  if (b == 0) Raise("ZeroDivisionError", "integer division or modulo by zero");
  if (a == INT64_MIN && b == -1) Raise("OverflowError", "integer result too large");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t Mod(int64_t a, int64_t b) {
  if (b == 0) Raise("ZeroDivisionError", "integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double FloatMod(double a, double b) {
  if (b == 0.0) Raise("ZeroDivisionError", "float modulo");
  double r = std::fmod(a, b);
  if (r != 0.0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value Repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n <= 0) {
    if (seq.is_string()) return Value(std::string());
    return seq.is_tuple() ? Value::Tuple({}) : Value::List({});
  }
  if (seq.is_string()) {
    in.CheckSize(seq.AsString().size() * static_cast<size_t>(std::min<int64_t>(n, INT32_MAX)));
    std::string out;
    out.reserve(seq.AsString().size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq.AsString();
    return Value(std::move(out));
  }
  const auto& items = seq.AsList();
  in.CheckSize(items.size() * static_cast<size_t>(std::min<int64_t>(n, INT32_MAX)));
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

}  // namespace

Value Interpreter::EvalBinary(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) RaiseUndefined(a);
  if (b.is_undefined()) RaiseUndefined(b);
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) return Value(Checked(Add, a.AsInt(), b.AsInt()));
    if (nums) return Value(a.AsFloat() + b.AsFloat());
    if (a.is_string() && b.is_string()) {
      CheckSize(a.AsString().size() + b.AsString().size());
      return Value(a.AsString() + b.AsString());
    }
    if (a.is_sequence() && a.kind() == b.kind()) {
      CheckSize(a.AsList().size() + b.AsList().size());
      std::vector<Value> items = a.AsList();
      items.insert(items.end(), b.AsList().begin(), b.AsList().end());
      return a.is_tuple() ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
    }
    if (a.is_string() || a.is_sequence()) {
      Raise("TypeError", "can only concatenate " + a.TypeName() + " (not \"" + b.TypeName() + "\") to " + a.TypeName());
    }
    Unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) return Value(Checked(Sub, a.AsInt(), b.AsInt()));
    if (nums) return Value(a.AsFloat() - b.AsFloat());
    Unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) return Value(Checked(Mul, a.AsInt(), b.AsInt()));
    if (nums) return Value(a.AsFloat() * b.AsFloat());
    const bool a_seq = a.is_string() || a.is_sequence();
    const bool b_seq = b.is_string() || b.is_sequence();
    if (a_seq && (b.is_int() || b.is_bool())) return Repeat(*this, a, b.AsInt());
    if (b_seq && (a.is_int() || a.is_bool())) return Repeat(*this, b, a.AsInt());
    if (a_seq || b_seq) {
      Raise("TypeError", "can't multiply sequence by non-int of type '" + (a_seq ? b : a).TypeName() + "'");
    }
    Unsupported(op, a, b);
  }
  if (op == "/") {
    if (!nums) Unsupported(op, a, b);
    if (b.AsFloat() == 0.0) Raise("ZeroDivisionError", "division by zero");
    return Value(a.AsFloat() / b.AsFloat());
  }
  if (op == "//") {
    if (ints) return Value(FloorDiv(a.AsInt(), b.AsInt()));
    if (!nums) Unsupported(op, a, b);
    if (b.AsFloat() == 0.0) Raise("ZeroDivisionError", "float floor division by zero");
    return Value(std::floor(a.AsFloat() / b.AsFloat()));
  }
  if (op == "%") {
    if (a.is_string()) {
      std::string s = PercentFormat(a.AsString(), b);
      CheckSize(s.size());
      return Value(std::move(s));
    }
    if (ints) return Value(Mod(a.AsInt(), b.AsInt()));
    if (nums) return Value(FloatMod(a.AsFloat(), b.AsFloat()));
    Unsupported(op, a, b);
  }
  if (op == "**") {
    if (ints && b.AsInt() >= 0) {
      int64_t result = 1, base = a.AsInt();
      for (int64_t e = b.AsInt(); e > 0; e >>= 1) {
        if (e & 1) result = Checked(Mul, result, base);
        if (e > 1) base = Checked(Mul, base, base);
      }
      return Value(result);
    }
    if (!nums) Unsupported("** or pow()", a, b);
    if (a.AsFloat() == 0.0 && b.AsFloat() < 0) Raise("ZeroDivisionError", "0.0 cannot be raised to a negative power");
    return Value(std::pow(a.AsFloat(), b.AsFloat()));
  }
  Raise("TemplateRuntimeError", "unknown operator " + op);
}

std::string PercentFormat(const std::string& format, const Value& args) {
  std::vector<Value> positional;
  const DictData* mapping = nullptr;
  if (args.is_tuple()) {
    positional = args.AsList();
  } else if (args.is_dict()) {
    mapping = &args.AsDict();
    positional.push_back(args);
  } else {
    positional.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  auto take = [&]() -> Value {
    if (next >= positional.size()) Raise("TypeError", "not enough arguments for format string");
    return positional[next++];
  };
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) Raise("ValueError", "incomplete format");
    Value arg;
    bool have_arg = false;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos) Raise("ValueError", "incomplete format key");
      if (mapping == nullptr) Raise("TypeError", "format requires a mapping");
      const Value* v = mapping->Find(std::string_view(format).substr(i + 1, close - i - 1));
      if (v == nullptr) Raise("KeyError", ReprString(format.substr(i + 1, close - i - 1)));
      arg = *v;
      have_arg = true;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos) flags += format[i++];
    int width = 0;
    if (i < format.size() && format[i] == '*') {
      width = static_cast<int>(take().AsInt());
      ++i;
    }
    while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) {
      width = std::min(width * 10 + (format[i++] - '0'), 100000);
    }
    int precision = -1;
    if (i < format.size() && format[i] == '.') {
      ++i;
      precision = 0;
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) {
        precision = std::min(precision * 10 + (format[i++] - '0'), 1000);
      }
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) Raise("ValueError", "incomplete format");
    const char type = format[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    if (!have_arg) arg = take();
    std::string piece;
    if (type == 's' || type == 'r' || type == 'a') {
      piece = type == 's' ? Str(arg) : Repr(arg);
      if (precision >= 0) {
        const std::vector<uint32_t> cps = DecodeUtf8(piece);
        piece = EncodeUtf8(cps, 0, static_cast<size_t>(precision));
      }
    } else if (type == 'c') {
      if (arg.is_string()) {
        piece = arg.AsString();
      } else {
        AppendUtf8(static_cast<uint32_t>(arg.AsInt()), piece);
      }
    } else {
      if (!arg.is_number()) {
        Raise("TypeError", std::string("%") + type + " format: a real number is required, not " + arg.TypeName());
      }
      std::string spec = "%" + flags;
      if (width > 0) spec += std::to_string(width);
      width = 0;  // snprintf pads numbers (with zeros when asked)
      if (precision >= 0) spec += "." + std::to_string(precision);
      char buf[512];
      if (type == 'd' || type == 'i' || type == 'u' || type == 'x' || type == 'X' || type == 'o') {
        const long long v = arg.is_float() ? static_cast<long long>(arg.AsFloat()) : arg.AsInt();
        spec += std::string("ll") + (type == 'i' || type == 'u' ? 'd' : type);
        std::snprintf(buf, sizeof(buf), spec.c_str(), v);
      } else if (std::string_view("fFeEgG").find(type) != std::string_view::npos) {
        spec += type;
        std::snprintf(buf, sizeof(buf), spec.c_str(), arg.AsFloat());
      } else {
        Raise("ValueError", std::string("unsupported format character '") + type + "'");
      }
      piece = buf;
    }
    const int len = static_cast<int>(Utf8Length(piece));
    if (width > len) {
      const std::string pad(static_cast<size_t>(width - len), ' ');
      piece = flags.find('-') != std::string::npos ? piece + pad : pad + piece;
    }
    out += piece;
  }
  if (!used_mapping && next < positional.size() && mapping == nullptr) {
    Raise("TypeError", "not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace ferry::jinja
