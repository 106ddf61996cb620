// The dynamic value of the Jinja engine: what template variables, literals and expression results hold. It models
// the Python objects that chat templates are written against (None, bool, int, float, str, list/tuple, dict with
// insertion order, callables, Jinja's namespace and Undefined), with Python's reference semantics for containers:
// copying a value that holds a list or dict shares it, as assigning a Python name does.
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

// GCC 12 reports false -Wmaybe-uninitialized warnings for moves of std::variant alternatives once they are inlined
// into callers (a known GCC 12 false positive); value is such a variant, so that one warning is off for its code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace actorllm::text::jinja {

class callable;
struct list_data;
struct dict_data;

/// Integer types a value converts from (bool and char are left out: they mean something else).
template <class T>
concept integer_like = std::integral<T> && !std::same_as<T, bool> && !std::same_as<T, char>;

/// The Python type a value stands for.
enum class value_kind : uint8_t {
  undefined,  ///< Jinja's Undefined: a missing variable, attribute or item
  none,
  boolean,
  integer,           ///< int64 (Python ints are unbounded; overflow is an error here)
  floating,          ///< double
  string,            ///< UTF-8
  list,              ///< list or tuple (list_data::is_tuple)
  dict,              ///< dict preserving insertion order
  namespace_object,  ///< the result of namespace(): attributes that `{% set ns.x = ... %}` may assign
  callable,          ///< macro, builtin function or bound method
};

/// A dynamically typed template value. Cheap to copy: strings are copied, containers and callables shared.
class value {
 public:
  /// Undefined with no name.
  value() noexcept = default;
  /// Implicit from the scalar types, so that `value v = 3;` and `f("text")` read naturally; nullptr is None.
  value(std::nullptr_t) noexcept : data_(none_tag{}) {}
  value(bool b) noexcept : data_(b) {}
  template <integer_like T>
  value(T i) noexcept : data_(static_cast<int64_t>(i)) {}
  value(double d) noexcept : data_(d) {}
  value(std::string s) noexcept : data_(std::move(s)) {}
  value(std::string_view s) : data_(std::string(s)) {}
  value(const char* s) : data_(std::string(s)) {}

  /// Python's None.
  static value none() { return value(nullptr); }
  /// Undefined; `hint` is the message an operation on it reports ("'x' is undefined").
  static value undefined(std::string hint);
  /// A new list (or tuple) owning `items`.
  static value list(std::vector<value> items = {});
  static value tuple(std::vector<value> items);
  /// A new empty dict.
  static value dict();
  /// A new dict with string keys, in the given order (later duplicates overwrite earlier ones).
  static value dict(std::vector<std::pair<std::string, value>> entries);
  /// A new empty namespace object.
  static value make_namespace();
  /// Wraps a callable object.
  static value from_callable(std::shared_ptr<const callable> fn);

  value_kind kind() const noexcept { return static_cast<value_kind>(data_.index()); }
  bool is_undefined() const noexcept { return kind() == value_kind::undefined; }
  bool is_none() const noexcept { return kind() == value_kind::none; }
  bool is_bool() const noexcept { return kind() == value_kind::boolean; }
  bool is_int() const noexcept { return kind() == value_kind::integer; }
  bool is_float() const noexcept { return kind() == value_kind::floating; }
  /// int or float (not bool).
  bool is_number() const noexcept { return is_int() || is_float(); }
  bool is_string() const noexcept { return kind() == value_kind::string; }
  bool is_list() const noexcept { return kind() == value_kind::list; }
  bool is_dict() const noexcept { return kind() == value_kind::dict; }
  bool is_namespace() const noexcept { return kind() == value_kind::namespace_object; }
  bool is_callable() const noexcept { return kind() == value_kind::callable; }

  /// Typed access; the caller checks the kind first (a wrong kind is a bug and throws std::bad_variant_access).
  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  /// The number as a double (int or float).
  double as_double() const { return is_int() ? static_cast<double>(as_int()) : std::get<double>(data_); }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const list_data& as_list() const { return *std::get<list_ptr>(data_); }
  /// The entries of a dict or of a namespace object.
  const dict_data& as_dict() const;
  const callable& as_callable() const { return *std::get<callable_ptr>(data_); }
  /// Identity of a shared container or callable (for `is sameas` and cycle checks); nullptr for scalars.
  const void* identity() const noexcept;

  /// Mutable access to a list, dict or namespace. Only containers created by the render running on this thread
  /// (or any, outside a render) may change: the caller's inputs stay read-only, as in HF's sandbox. Throws
  /// value_error otherwise.
  list_data& mutable_list() const;
  dict_data& mutable_dict() const;

  /// The message an operation on this Undefined reports.
  const std::string& undefined_hint() const;

  /// Python truthiness.
  bool truthy() const;
  /// Python type name for messages: 'str', 'int', 'list', 'dict', 'NoneType', ...
  std::string_view type_name() const noexcept;

 private:
  struct undefined_tag {
    std::shared_ptr<const std::string> hint;
  };
  struct none_tag {};
  using list_ptr = std::shared_ptr<list_data>;
  using dict_ptr = std::shared_ptr<dict_data>;
  struct namespace_ptr {
    std::shared_ptr<dict_data> data;
  };
  using callable_ptr = std::shared_ptr<const callable>;
  // Alternative order matches value_kind.
  std::variant<undefined_tag, none_tag, bool, int64_t, double, std::string, list_ptr, dict_ptr, namespace_ptr,
               callable_ptr>
      data_;
};

/// The items of a list or tuple.
struct list_data {
  std::vector<value> items;
  bool is_tuple = false;

  list_data() = default;
  list_data(const list_data&) = delete;
  list_data& operator=(const list_data&) = delete;
  /// Destroys deeply nested contents iteratively, so that a chain of a million nested lists cannot overflow the
  /// stack.
  ~list_data();

 private:
  friend class value;
  friend class render_scope;
  uint64_t owner_ = 0;
  bool tracked_ = false;
};

/// The entries of a dict, in insertion order. Keys are None, bool, int, float or str, compared as Python does
/// (1 == 1.0 == True).
struct dict_data {
  dict_data() = default;
  dict_data(const dict_data&) = delete;
  dict_data& operator=(const dict_data&) = delete;
  ~dict_data();

  const std::vector<std::pair<value, value>>& entries() const noexcept { return entries_; }
  size_t size() const noexcept { return entries_.size(); }
  /// The value for `key`, or nullptr.
  const value* find(const value& key) const;
  const value* find(std::string_view key) const;
  const value* find(const char* key) const { return find(std::string_view(key)); }
  /// Inserts or overwrites; throws value_error for an unhashable key (list, dict, ...).
  void set(value key, value v);
  /// Removes `key`; false if absent.
  bool erase(const value& key);
  void clear();

 private:
  friend class value;
  friend class render_scope;
  size_t position(const value& key) const;  // entries_.size() when absent
  void rebuild_index();
  std::vector<std::pair<value, value>> entries_;
  // Built once the dict passes a few entries; maps a canonical key string to its position.
  std::unordered_map<std::string, size_t> index_;
  uint64_t owner_ = 0;
  bool tracked_ = false;
};

/// One render's claim on the containers created on its thread while it runs (RAII; renders may nest). It makes
/// the caller's values read-only for the template and, when it ends, empties every container the template
/// mutated: that breaks any reference cycle a template built (`{% set _ = l.append(l) %}`), which reference
/// counting alone would leak.
class render_scope {
 public:
  render_scope();
  ~render_scope();
  render_scope(const render_scope&) = delete;
  render_scope& operator=(const render_scope&) = delete;

  /// Called by value::mutable_list/mutable_dict.
  static void track(const std::shared_ptr<list_data>& list);
  static void track(const std::shared_ptr<dict_data>& dict);
  /// The id stamped on containers created now (0 outside any render).
  static uint64_t current_owner() noexcept;

 private:
  uint64_t id_;
  uint64_t previous_id_;
  render_scope* previous_;
  std::vector<std::shared_ptr<list_data>> lists_;
  std::vector<std::shared_ptr<dict_data>> dicts_;
};

/// Python str(): "None", "True", "1.5", "[1, 'a']", "{'k': 2}"; Undefined gives "".
std::string to_string(const value& v);
/// Appends to_string(v) to out.
void append_string(std::string& out, const value& v);
/// Python repr(): strings quoted.
std::string to_repr(const value& v);

}  // namespace actorllm::text::jinja

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
