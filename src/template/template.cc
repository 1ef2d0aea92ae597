#include "template/template.h"

#include "template/lexer.h"
#include "template/objects.h"
#include "template/parser.h"

namespace ferry::jinja {

Result<Template> Template::Parse(std::string_view source) {
  if (source.size() > kMaxTemplateBytes) {
    return InvalidArgument("TemplateSyntaxError: the template has " + std::to_string(source.size()) +
                           " bytes; at most " + std::to_string(kMaxTemplateBytes) + " are accepted");
  }
  FERRY_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  FERRY_ASSIGN_OR_RETURN(Body body, ::ferry::jinja::Parse(tokens));
  Template t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  return t;
}

Result<std::string> Template::Render(const DictData& variables, const std::map<std::string, GlobalFn>& extra_globals,
                                     const RenderLimits& limits) const {
  std::map<std::string, GlobalFn> globals;
  AddBuiltinGlobals(globals);
  for (const auto& [name, fn] : extra_globals) globals[name] = fn;
  Interpreter in(limits, variables, globals);
  try {
    return in.Render(*body_);
  } catch (const RenderError& e) {
    std::string where;
    if (in.error_line() > 0) where = " (" + Where(in.error_line(), in.error_column()) + ")";
    return InvalidArgument(e.kind + ": " + e.message + where);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("MemoryError: the template ran out of memory");
  }
}

namespace {

class CyclerObject : public Object {
 public:
  explicit CyclerObject(std::vector<Value> items) : items_(std::move(items)) {}
  std::string TypeName() const override { return "Cycler"; }
  Value GetAttr(const std::string& name) const override {
    auto self = const_cast<CyclerObject*>(this);
    if (name == "current") return items_[pos_];
    if (name == "next") {
      return Value::Function(std::make_shared<BuiltinFn>("next", [self](Interpreter&, CallArgs& a) {
        a.Done("next");
        Value v = self->items_[self->pos_];
        self->pos_ = (self->pos_ + 1) % self->items_.size();
        return v;
      }));
    }
    if (name == "reset") {
      return Value::Function(std::make_shared<BuiltinFn>("reset", [self](Interpreter&, CallArgs& a) {
        a.Done("reset");
        self->pos_ = 0;
        return Value::None();
      }));
    }
    return Object::GetAttr(name);
  }

 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
};

Value Range(Interpreter& in, CallArgs& a) {
  std::vector<int64_t> bounds;
  for (const Value& v : a.args) {
    if (!v.is_int() && !v.is_bool()) {
      if (v.is_undefined()) RaiseUndefined(v);
      Raise("TypeError", "'" + v.TypeName() + "' object cannot be interpreted as an integer");
    }
    bounds.push_back(v.AsInt());
  }
  a.next = a.args.size();
  a.Done("range");
  if (bounds.empty() || bounds.size() > 3) Raise("TypeError", "range expected 1 to 3 arguments");
  const int64_t start = bounds.size() == 1 ? 0 : bounds[0];
  const int64_t stop = bounds.size() == 1 ? bounds[0] : bounds[1];
  const int64_t step = bounds.size() == 3 ? bounds[2] : 1;
  if (step == 0) Raise("ValueError", "range() arg 3 must not be zero");
  // The sandbox's MAX_RANGE.
  const long double count = step > 0 ? (static_cast<long double>(stop) - start) / step
                                     : (static_cast<long double>(start) - stop) / -step;
  if (count > 100000) {
    Raise("OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
  in.CountIterations(static_cast<int64_t>(out.size()) / 16);
  return Value::List(std::move(out));
}

}  // namespace

void AddBuiltinGlobals(std::map<std::string, GlobalFn>& globals) {
  globals["range"] = Range;
  globals["dict"] = [](Interpreter& in, CallArgs& a) {
    DictData d;
    if (a.args.size() > 1) Raise("TypeError", "dict expected at most 1 argument");
    if (!a.args.empty()) {
      const Value& src = a.args[0];
      if (src.is_dict()) {
        d = src.AsDict();
      } else {
        for (const Value& pair : in.Iterate(src)) {
          std::vector<Value> kv = in.Iterate(pair);
          if (kv.size() != 2) Raise("ValueError", "dictionary update sequence element has length " + std::to_string(kv.size()) + "; 2 is required");
          d.Set(kv[0], kv[1]);
        }
      }
      a.next = 1;
    }
    for (auto& [k, v] : a.kwargs) d.Set(Value(k), v);
    a.kwargs.clear();
    return Value::Dict(std::move(d));
  };
  globals["namespace"] = [](Interpreter& in, CallArgs& a) {
    auto ns = std::make_shared<NamespaceObject>();
    in.TrackNamespace(ns);
    for (const Value& src : a.args) {
      if (!src.is_dict()) Raise("TypeError", "namespace() takes mappings and keyword arguments");
      for (const auto& [k, v] : src.AsDict().items()) ns->SetAttr(Str(k), v);
    }
    a.next = a.args.size();
    for (auto& [k, v] : a.kwargs) ns->SetAttr(k, v);
    a.kwargs.clear();
    return Value::Object(ns);
  };
  globals["cycler"] = [](Interpreter&, CallArgs& a) {
    if (a.args.empty()) Raise("RuntimeError", "at least one item has to be provided");
    std::vector<Value> items = a.args;
    a.next = a.args.size();
    a.Done("cycler");
    return Value::Object(std::make_shared<CyclerObject>(std::move(items)));
  };
  globals["joiner"] = [](Interpreter&, CallArgs& a) {
    const std::string sep = Str(a.Take("sep", Value(", ")));
    a.Done("joiner");
    auto used = std::make_shared<bool>(false);
    return Value::Function(std::make_shared<BuiltinFn>("joiner", [sep, used](Interpreter&, CallArgs& args) {
      args.Done("joiner");
      if (!*used) {
        *used = true;
        return Value("");
      }
      return Value(sep);
    }));
  };
}

}  // namespace ferry::jinja
