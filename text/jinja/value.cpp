// The dynamic value: construction, containers, render ownership, str()/repr().
#include "text/jinja/value.hpp"

#include <atomic>
#include <cmath>
#include <limits>

#include "text/jinja/callable.hpp"
#include "text/jinja/error.hpp"
#include "text/jinja/pystring.hpp"
#include "text/jinja/render_context.hpp"

namespace actorllm::text::jinja {
namespace {

// Past this many nested container destructors, contents are queued and destroyed by the outermost one.
constexpr int max_destroy_depth = 64;
// str()/repr() of values nested deeper than this fail instead of recursing off the stack.
constexpr int max_print_depth = 256;
// A dict switches from linear search to a hash index past this many entries.
constexpr size_t index_threshold = 8;
// Tuples nested deeper than this are not accepted as dict keys.
constexpr int max_key_depth = 32;

thread_local int t_destroy_depth = 0;
thread_local std::vector<value> t_deferred;
thread_local render_scope* t_scope = nullptr;
thread_local uint64_t t_owner = 0;
std::atomic<uint64_t> g_next_render_id{1};

// Destroys `items` without unbounded recursion: nested destructors beyond max_destroy_depth park their contents
// in t_deferred, which the outermost call drains in a loop.
void release_values(std::vector<value>& items) {
  if (items.empty())
    return;
  if (t_destroy_depth >= max_destroy_depth) {
    for (auto& v : items)
      t_deferred.push_back(std::move(v));
    items.clear();
    return;
  }
  ++t_destroy_depth;
  items.clear();
  if (t_destroy_depth == 1) {
    while (!t_deferred.empty()) {
      std::vector<value> batch;
      batch.swap(t_deferred);
      batch.clear();
    }
  }
  --t_destroy_depth;
}

void release_entries(std::vector<std::pair<value, value>>& entries) {
  if (entries.empty())
    return;
  std::vector<value> values;
  values.reserve(entries.size());
  for (auto& [k, v] : entries)
    values.push_back(std::move(v));
  entries.clear();
  release_values(values);
}

// A one-letter type tag followed by the key's text. Built piecewise: GCC 12 warns falsely (-Wrestrict) about
// "literal" + std::string.
std::string tagged(char tag, std::string_view text) {
  std::string out(1, tag);
  out += text;
  return out;
}

// Canonical form of a hashable key, equal for keys Python considers equal (1, 1.0, True).
std::string canonical_key(const value& key, int depth = 0) {
  charge_current_render(1);
  switch (key.kind()) {
    case value_kind::string:
      return tagged('s', key.as_string());
    case value_kind::boolean:
      return key.as_bool() ? "i1" : "i0";
    case value_kind::integer:
      return tagged('i', std::to_string(key.as_int()));
    case value_kind::floating: {
      double d = key.as_double();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18)
        return tagged('i', std::to_string(static_cast<int64_t>(d)));
      return tagged('f', pystr::format_float(d));
    }
    case value_kind::none:
      return "n";
    case value_kind::list:
      if (key.as_list().is_tuple && depth <= max_key_depth) {
        std::string out = "t";
        for (const auto& item : key.as_list().items) {
          std::string part = canonical_key(item, depth + 1);
          out += std::to_string(part.size());
          out += ':';
          out += part;
        }
        return out;
      }
      [[fallthrough]];
    default:
      throw value_error("unhashable type: '" + std::string(key.type_name()) + "'");
  }
}

bool is_numeric_key(const value& v) { return v.is_int() || v.is_float() || v.is_bool(); }

double numeric_key(const value& v) { return v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : v.as_double(); }

bool keys_equal(const value& a, const value& b, int depth = 0) {
  charge_current_render(1);
  if (a.is_string() && b.is_string())
    return a.as_string() == b.as_string();
  if (a.is_list() && b.is_list()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    if (!x.is_tuple || !y.is_tuple || x.items.size() != y.items.size() || depth > max_key_depth)
      return false;
    for (size_t i = 0; i < x.items.size(); ++i)
      if (!keys_equal(x.items[i], y.items[i], depth + 1))
        return false;
    return true;
  }
  if (a.is_int() && b.is_int())
    return a.as_int() == b.as_int();
  if (is_numeric_key(a) && is_numeric_key(b))
    return numeric_key(a) == numeric_key(b);
  return a.is_none() && b.is_none();
}

void append_repr(std::string& out, const value& v, int depth);

void append_str(std::string& out, const value& v, int depth) {
  switch (v.kind()) {
    case value_kind::undefined:
      return;
    case value_kind::string:
      out += v.as_string();
      return;
    default:
      append_repr(out, v, depth);
  }
}

void append_repr(std::string& out, const value& v, int depth) {
  if (depth > max_print_depth)
    throw value_error("value nested too deeply to print");
  charge_current_render(1);
  check_current_string_size(out.size());
  switch (v.kind()) {
    case value_kind::undefined:
      out += "Undefined";
      return;
    case value_kind::none:
      out += "None";
      return;
    case value_kind::boolean:
      out += v.as_bool() ? "True" : "False";
      return;
    case value_kind::integer:
      out += std::to_string(v.as_int());
      return;
    case value_kind::floating:
      out += pystr::format_float(v.as_double());
      return;
    case value_kind::string:
      out += pystr::repr(v.as_string());
      return;
    case value_kind::list: {
      const auto& list = v.as_list();
      out.push_back(list.is_tuple ? '(' : '[');
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i > 0)
          out += ", ";
        append_repr(out, list.items[i], depth + 1);
      }
      if (list.is_tuple && list.items.size() == 1)
        out.push_back(',');
      out.push_back(list.is_tuple ? ')' : ']');
      return;
    }
    case value_kind::dict:
    case value_kind::namespace_object: {
      if (v.is_namespace())
        out += "<Namespace ";
      out.push_back('{');
      bool first = true;
      for (const auto& [key, item] : v.as_dict().entries()) {
        if (!first)
          out += ", ";
        first = false;
        append_repr(out, key, depth + 1);
        out += ": ";
        append_repr(out, item, depth + 1);
      }
      out.push_back('}');
      if (v.is_namespace())
        out.push_back('>');
      return;
    }
    case value_kind::callable:
      out += "<function ";
      out += v.as_callable().name();
      out.push_back('>');
      return;
  }
}

}  // namespace

value value::undefined(std::string hint) {
  value v;
  if (!hint.empty())
    std::get<undefined_tag>(v.data_).hint = std::make_shared<const std::string>(std::move(hint));
  return v;
}

value value::list(std::vector<value> items) {
  auto data = std::make_shared<list_data>();
  data->items = std::move(items);
  data->owner_ = t_owner;
  value v;
  v.data_ = std::move(data);
  return v;
}

value value::tuple(std::vector<value> items) {
  value v = list(std::move(items));
  std::get<list_ptr>(v.data_)->is_tuple = true;
  return v;
}

value value::dict() {
  auto data = std::make_shared<dict_data>();
  data->owner_ = t_owner;
  value v;
  v.data_ = std::move(data);
  return v;
}

value value::dict(std::vector<std::pair<std::string, value>> entries) {
  value v = dict();
  auto& data = *std::get<dict_ptr>(v.data_);
  for (auto& [key, item] : entries)
    data.set(value(std::move(key)), std::move(item));
  return v;
}

value value::make_namespace() {
  auto data = std::make_shared<dict_data>();
  data->owner_ = t_owner;
  value v;
  v.data_ = namespace_ptr{std::move(data)};
  return v;
}

value value::from_callable(std::shared_ptr<const callable> fn) {
  value v;
  v.data_ = std::move(fn);
  return v;
}

const dict_data& value::as_dict() const {
  if (const auto* ns = std::get_if<namespace_ptr>(&data_))
    return *ns->data;
  return *std::get<dict_ptr>(data_);
}

const void* value::identity() const noexcept {
  switch (kind()) {
    case value_kind::list:
      return std::get<list_ptr>(data_).get();
    case value_kind::dict:
      return std::get<dict_ptr>(data_).get();
    case value_kind::namespace_object:
      return std::get<namespace_ptr>(data_).data.get();
    case value_kind::callable:
      return std::get<callable_ptr>(data_).get();
    default:
      return nullptr;
  }
}

list_data& value::mutable_list() const {
  const auto& data = std::get<list_ptr>(data_);
  if (data->owner_ != t_owner)
    throw value_error("cannot modify a list that was passed to the template");
  if (t_owner != 0 && !data->tracked_)
    render_scope::track(data);
  return *data;
}

dict_data& value::mutable_dict() const {
  const auto* ns = std::get_if<namespace_ptr>(&data_);
  const auto& data = ns != nullptr ? ns->data : std::get<dict_ptr>(data_);
  if (data->owner_ != t_owner)
    throw value_error(std::string("cannot modify a ") + (ns != nullptr ? "namespace" : "dict") +
                      " that was passed to the template");
  if (t_owner != 0 && !data->tracked_)
    render_scope::track(data);
  return *data;
}

const std::string& value::undefined_hint() const {
  static const std::string no_hint = "value is undefined";
  const auto& tag = std::get<undefined_tag>(data_);
  return tag.hint ? *tag.hint : no_hint;
}

bool value::truthy() const {
  switch (kind()) {
    case value_kind::undefined:
    case value_kind::none:
      return false;
    case value_kind::boolean:
      return as_bool();
    case value_kind::integer:
      return as_int() != 0;
    case value_kind::floating:
      return as_double() != 0.0;
    case value_kind::string:
      return !as_string().empty();
    case value_kind::list:
      return !as_list().items.empty();
    case value_kind::dict:
      return as_dict().size() != 0;
    case value_kind::namespace_object:
    case value_kind::callable:
      return true;
  }
  return false;
}

std::string_view value::type_name() const noexcept {
  switch (kind()) {
    case value_kind::undefined:
      return "Undefined";
    case value_kind::none:
      return "NoneType";
    case value_kind::boolean:
      return "bool";
    case value_kind::integer:
      return "int";
    case value_kind::floating:
      return "float";
    case value_kind::string:
      return "str";
    case value_kind::list:
      return std::get<list_ptr>(data_)->is_tuple ? "tuple" : "list";
    case value_kind::dict:
      return "dict";
    case value_kind::namespace_object:
      return "Namespace";
    case value_kind::callable:
      return "function";
  }
  return "object";
}

list_data::~list_data() { release_values(items); }

dict_data::~dict_data() { release_entries(entries_); }

size_t dict_data::position(const value& key) const {
  if (!index_.empty()) {
    auto it = index_.find(canonical_key(key));
    return it == index_.end() ? entries_.size() : it->second;
  }
  for (size_t i = 0; i < entries_.size(); ++i)
    if (keys_equal(entries_[i].first, key))
      return i;
  return entries_.size();
}

namespace {

// Whether `key` may be looked up: None, bool, numbers, str and tuples of them (Python's hashable builtins).
bool is_hashable(const value& key, int depth = 0) {
  if (key.is_list()) {
    charge_current_render(1);
    if (!key.as_list().is_tuple || depth > max_key_depth)
      return false;
    for (const auto& item : key.as_list().items)
      if (!is_hashable(item, depth + 1))
        return false;
    return true;
  }
  return key.kind() <= value_kind::string && !key.is_undefined();
}

}  // namespace

const value* dict_data::find(const value& key) const {
  if (!is_hashable(key))
    return nullptr;
  size_t i = position(key);
  return i < entries_.size() ? &entries_[i].second : nullptr;
}

const value* dict_data::find(std::string_view key) const {
  if (!index_.empty()) {
    std::string canonical = "s";
    canonical += key;
    auto it = index_.find(canonical);
    return it == index_.end() ? nullptr : &entries_[it->second].second;
  }
  for (const auto& [k, v] : entries_)
    if (k.is_string() && k.as_string() == key)
      return &v;
  return nullptr;
}

void dict_data::set(value key, value v) {
  std::string canonical = canonical_key(key);  // also rejects unhashable keys
  size_t i = position(key);
  if (i < entries_.size()) {
    entries_[i].second = std::move(v);
    return;
  }
  entries_.emplace_back(std::move(key), std::move(v));
  if (!index_.empty())
    index_.emplace(std::move(canonical), entries_.size() - 1);
  else if (entries_.size() > index_threshold)
    rebuild_index();
}

bool dict_data::erase(const value& key) {
  if (!is_hashable(key))
    return false;
  size_t i = position(key);
  if (i >= entries_.size())
    return false;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
  if (!index_.empty())
    rebuild_index();
  return true;
}

void dict_data::clear() {
  release_entries(entries_);
  index_.clear();
}

void dict_data::rebuild_index() {
  index_.clear();
  if (entries_.size() <= index_threshold)
    return;
  index_.reserve(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i)
    index_.emplace(canonical_key(entries_[i].first), i);
}

render_scope::render_scope() : id_(g_next_render_id.fetch_add(1)), previous_id_(t_owner), previous_(t_scope) {
  t_scope = this;
  t_owner = id_;
}

render_scope::~render_scope() {
  for (auto& list : lists_) {
    list->tracked_ = false;
    release_values(list->items);
  }
  for (auto& dict : dicts_) {
    dict->tracked_ = false;
    dict->clear();
  }
  lists_.clear();
  dicts_.clear();
  t_scope = previous_;
  t_owner = previous_id_;
}

void render_scope::track(const std::shared_ptr<list_data>& list) {
  if (t_scope == nullptr)
    return;
  list->tracked_ = true;
  t_scope->lists_.push_back(list);
}

void render_scope::track(const std::shared_ptr<dict_data>& dict) {
  if (t_scope == nullptr)
    return;
  dict->tracked_ = true;
  t_scope->dicts_.push_back(dict);
}

uint64_t render_scope::current_owner() noexcept { return t_owner; }

std::string to_string(const value& v) {
  if (v.is_string())
    return v.as_string();
  std::string out;
  append_str(out, v, 0);
  return out;
}

void append_string(std::string& out, const value& v) { append_str(out, v, 0); }

std::string to_repr(const value& v) {
  std::string out;
  append_repr(out, v, 0);
  return out;
}

}  // namespace actorllm::text::jinja
