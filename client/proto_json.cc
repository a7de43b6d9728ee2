#include "client/proto_json.h"

#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/timestamp.pb.h"

namespace sbp::cli {
namespace {

using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using Json = nlohmann::json;

// "JobState" -> "JOB_STATE_".
std::string EnumPrefix(const std::string& type_name) {
  std::string prefix;
  for (size_t i = 0; i < type_name.size(); ++i) {
    const char c = type_name[i];
    if (i > 0 && absl::ascii_isupper(static_cast<unsigned char>(c))) prefix.push_back('_');
    prefix.push_back(absl::ascii_toupper(static_cast<unsigned char>(c)));
  }
  return prefix + "_";
}

Json EnumName(const EnumValueDescriptor* value) {
  const std::string prefix = EnumPrefix(value->type()->name());
  const std::string& name = value->name();
  return absl::StartsWith(name, prefix) ? name.substr(prefix.size()) : name;
}

Json Number(double value) { return std::isfinite(value) ? Json(value) : Json(nullptr); }

bool IsTimestamp(const Message& message) {
  return message.GetDescriptor()->full_name() == "google.protobuf.Timestamp";
}

Json TimestampText(const Message& message) {
  const auto& t = static_cast<const google::protobuf::Timestamp&>(message);
  const absl::Time time = absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone());
}

Json Convert(const Message& message);

// One value of a field (the index-th of a repeated one, -1 for singular).
Json FieldValue(const Message& message, const FieldDescriptor* field, int index) {
  const Reflection* r = message.GetReflection();
  const bool rep = index >= 0;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(message, field, index) : r->GetInt32(message, field);
    case FieldDescriptor::CPPTYPE_INT64:
      return rep ? r->GetRepeatedInt64(message, field, index) : r->GetInt64(message, field);
    case FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(message, field, index) : r->GetUInt32(message, field);
    case FieldDescriptor::CPPTYPE_UINT64:
      return rep ? r->GetRepeatedUInt64(message, field, index) : r->GetUInt64(message, field);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return Number(rep ? r->GetRepeatedDouble(message, field, index)
                        : r->GetDouble(message, field));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return Number(rep ? r->GetRepeatedFloat(message, field, index) : r->GetFloat(message, field));
    case FieldDescriptor::CPPTYPE_BOOL:
      return rep ? r->GetRepeatedBool(message, field, index) : r->GetBool(message, field);
    case FieldDescriptor::CPPTYPE_ENUM:
      return EnumName(rep ? r->GetRepeatedEnum(message, field, index) : r->GetEnum(message, field));
    case FieldDescriptor::CPPTYPE_STRING:
      return rep ? r->GetRepeatedString(message, field, index) : r->GetString(message, field);
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      const Message& sub =
          rep ? r->GetRepeatedMessage(message, field, index) : r->GetMessage(message, field);
      return IsTimestamp(sub) ? TimestampText(sub) : Convert(sub);
    }
  }
  return nullptr;
}

// Whether a singular field applies (see the header).
bool Applies(const Message& message, const FieldDescriptor* field) {
  const Reflection* r = message.GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return !r->GetString(message, field).empty();
    case FieldDescriptor::CPPTYPE_ENUM:
      return r->GetEnumValue(message, field) != 0;
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      if (!r->HasField(message, field)) return false;
      const Message& sub = r->GetMessage(message, field);
      if (!IsTimestamp(sub)) return true;
      const auto& t = static_cast<const google::protobuf::Timestamp&>(sub);
      return t.seconds() != 0 || t.nanos() != 0;
    }
    default:
      return true;
  }
}

Json Convert(const Message& message) {
  Json out = Json::object();
  const auto* descriptor = message.GetDescriptor();
  const Reflection* r = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (field->is_map()) {
      const int n = r->FieldSize(message, field);
      if (n == 0) continue;
      Json map = Json::object();
      for (int k = 0; k < n; ++k) {
        const Message& entry = r->GetRepeatedMessage(message, field, k);
        const FieldDescriptor* key = entry.GetDescriptor()->map_key();
        const Json key_json = FieldValue(entry, key, -1);
        map[key_json.is_string() ? key_json.get<std::string>() : key_json.dump()] =
            FieldValue(entry, entry.GetDescriptor()->map_value(), -1);
      }
      out[field->name()] = std::move(map);
    } else if (field->is_repeated()) {
      const int n = r->FieldSize(message, field);
      if (n == 0) continue;
      Json list = Json::array();
      for (int k = 0; k < n; ++k) list.push_back(FieldValue(message, field, k));
      out[field->name()] = std::move(list);
    } else if (Applies(message, field)) {
      out[field->name()] = FieldValue(message, field, -1);
    }
  }
  // A job's progress: no eval loss before the first evaluation.
  if (descriptor->name() == "JobProgress" && out.value("eval_step", int64_t{0}) == 0) {
    out.erase("eval_step");
    out.erase("eval_loss");
  }
  return out;
}

}  // namespace

nlohmann::json ProtoToJson(const google::protobuf::Message& message) { return Convert(message); }

}  // namespace sbp::cli
