// A JSON value as error messages name it: its type, and for a scalar its
// text cut to about 40 bytes (never inside a UTF-8 character), e.g.
// `number 1.5`, `string "q_proj"`, `object`.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace sbp {

std::string DescribeJsonValue(const nlohmann::json& value);

}  // namespace sbp
