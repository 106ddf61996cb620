// Small helpers over simdjson's DOM shared by the config, safetensors-header and index parsers (model/ internal).
#pragma once

#include <simdjson.h>

#include <string_view>

namespace actorllm::model::json {

/// "an integer", "a string", ... for "must be X, got Y" messages.
std::string_view type_name(simdjson::dom::element e);

/// The element as an array / object; callers check type() first (an empty one otherwise). Returned by value: the
/// views stay valid as long as the parser, unlike a reference into a temporary simdjson_result.
simdjson::dom::array as_array(simdjson::dom::element e);
simdjson::dom::object as_object(simdjson::dom::element e);

}  // namespace actorllm::model::json
