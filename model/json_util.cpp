// Helpers over simdjson's DOM.
#include "model/json_util.hpp"

namespace actorllm::model::json {

std::string_view type_name(simdjson::dom::element e) {
  using simdjson::dom::element_type;
  switch (e.type()) {
    case element_type::ARRAY:
      return "an array";
    case element_type::OBJECT:
      return "an object";
    case element_type::INT64:
    case element_type::UINT64:
      return "an integer";
    case element_type::DOUBLE:
      return "a floating-point number";
    case element_type::STRING:
      return "a string";
    case element_type::BOOL:
      return "a boolean";
    case element_type::NULL_VALUE:
      return "null";
  }
  return "an unknown JSON value";
}

simdjson::dom::array as_array(simdjson::dom::element e) {
  simdjson::dom::array a;
  if (e.get_array().get(a) != simdjson::SUCCESS)
    return {};
  return a;
}

simdjson::dom::object as_object(simdjson::dom::element e) {
  simdjson::dom::object o;
  if (e.get_object().get(o) != simdjson::SUCCESS)
    return {};
  return o;
}

}  // namespace actorllm::model::json
