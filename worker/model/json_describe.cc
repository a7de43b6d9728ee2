#include "worker/model/json_describe.h"

#include "absl/strings/str_cat.h"

namespace sbp {

std::string DescribeJsonValue(const nlohmann::json& value) {
  if (value.is_object() || value.is_array()) return std::string(value.type_name());
  // Invalid UTF-8 in a string is shown replaced rather than thrown on.
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 40) {
    size_t cut = 37;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return absl::StrCat(value.type_name(), " ", text);
}

}  // namespace sbp
