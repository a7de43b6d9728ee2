#include "server/reflection_service.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/support/server_callback.h>

#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"

namespace sbp::server {
namespace {

namespace protobuf = google::protobuf;

struct V1Alpha {
  using Service = grpc::reflection::v1alpha::ServerReflection;
  using Request = grpc::reflection::v1alpha::ServerReflectionRequest;
  using Response = grpc::reflection::v1alpha::ServerReflectionResponse;
  static constexpr char kService[] = "grpc.reflection.v1alpha.ServerReflection";
  static constexpr char kMethod[] = "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
};

struct V1 {
  using Service = grpc::reflection::v1::ServerReflection;
  using Request = grpc::reflection::v1::ServerReflectionRequest;
  using Response = grpc::reflection::v1::ServerReflectionResponse;
  static constexpr char kService[] = "grpc.reflection.v1.ServerReflection";
  static constexpr char kMethod[] = "grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
};

template <typename Response>
void SetError(grpc::StatusCode code, const std::string& message, Response* response) {
  response->mutable_error_response()->set_error_code(code);
  response->mutable_error_response()->set_error_message(message);
}

// `file` and what it imports, transitively, each once per response.
template <typename Response>
void AddFile(const protobuf::FileDescriptor* file, Response* response,
             std::unordered_set<std::string>* seen) {
  if (!seen->insert(file->name()).second) return;
  protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(
      response->mutable_file_descriptor_response()->add_file_descriptor_proto());
  for (int i = 0; i < file->dependency_count(); ++i) AddFile(file->dependency(i), response, seen);
}

template <typename Version>
void Answer(const typename Version::Request& request, const std::vector<std::string>& services,
            typename Version::Response* response) {
  using Request = typename Version::Request;
  const protobuf::DescriptorPool* pool = protobuf::DescriptorPool::generated_pool();
  response->Clear();
  response->set_valid_host(request.host());
  *response->mutable_original_request() = request;
  std::unordered_set<std::string> seen;
  switch (request.message_request_case()) {
    case Request::kListServices:
      for (const std::string& name : services) {
        response->mutable_list_services_response()->add_service()->set_name(name);
      }
      return;
    case Request::kFileByFilename: {
      const protobuf::FileDescriptor* file = pool->FindFileByName(request.file_by_filename());
      if (file == nullptr) {
        return SetError(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no file ", request.file_by_filename()), response);
      }
      return AddFile(file, response, &seen);
    }
    case Request::kFileContainingSymbol: {
      const protobuf::FileDescriptor* file =
          pool->FindFileContainingSymbol(request.file_containing_symbol());
      if (file == nullptr) {
        return SetError(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no symbol ", request.file_containing_symbol()), response);
      }
      return AddFile(file, response, &seen);
    }
    case Request::kFileContainingExtension: {
      const auto& want = request.file_containing_extension();
      const protobuf::Descriptor* type = pool->FindMessageTypeByName(want.containing_type());
      const protobuf::FieldDescriptor* extension =
          type == nullptr ? nullptr : pool->FindExtensionByNumber(type, want.extension_number());
      if (extension == nullptr) {
        return SetError(
            grpc::StatusCode::NOT_FOUND,
            absl::StrCat("no extension ", want.extension_number(), " of ", want.containing_type()),
            response);
      }
      return AddFile(extension->file(), response, &seen);
    }
    case Request::kAllExtensionNumbersOfType: {
      const protobuf::Descriptor* type =
          pool->FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (type == nullptr) {
        return SetError(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no type ", request.all_extension_numbers_of_type()),
                        response);
      }
      std::vector<const protobuf::FieldDescriptor*> extensions;
      pool->FindAllExtensions(type, &extensions);
      auto* numbers = response->mutable_all_extension_numbers_response();
      numbers->set_base_type_name(type->full_name());
      for (const protobuf::FieldDescriptor* e : extensions)
        numbers->add_extension_number(e->number());
      return;
    }
    default:
      return SetError(grpc::StatusCode::UNIMPLEMENTED, "no request set", response);
  }
}

// One reflection stream: read a request, write its answer, repeat. At most
// one operation is outstanding, so reactions never overlap.
template <typename Version>
class ReflectionStream final
    : public grpc::ServerBidiReactor<typename Version::Request, typename Version::Response> {
 public:
  ReflectionStream(const RpcGuard* guard, const std::vector<std::string>* services,
                   grpc::CallbackServerContext* context)
      : guard_(guard), services_(services) {
    absl::StatusOr<RpcGuard::StreamSlot> slot =
        guard_->OpenStream(StreamKind::kReflection, *context);
    if (!slot.ok()) {
      End(slot.status());
      return;
    }
    slot_ = *std::move(slot);
    this->StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) return End(absl::OkStatus());  // the client closed its side (or went away)
    Answer<Version>(request_, *services_, &response_);
    this->StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return End(absl::CancelledError("the client went away"));
    this->StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  void End(const absl::Status& status) { this->Finish(guard_->Finish(Version::kMethod, status)); }

  const RpcGuard* const guard_;
  const std::vector<std::string>* const services_;
  RpcGuard::StreamSlot slot_;
  typename Version::Request request_;
  typename Version::Response response_;
};

template <typename Version>
class ReflectionService final : public Version::Service::CallbackService {
 public:
  ReflectionService(const RpcGuard* guard, const std::vector<std::string>* services)
      : guard_(guard), services_(services) {}

  grpc::ServerBidiReactor<typename Version::Request, typename Version::Response>*
  ServerReflectionInfo(grpc::CallbackServerContext* context) override {
    return new ReflectionStream<Version>(guard_, services_, context);
  }

 private:
  const RpcGuard* const guard_;
  const std::vector<std::string>* const services_;
};

}  // namespace

ReflectionServices::ReflectionServices(const RpcGuard* guard,
                                       std::vector<std::string> service_names) {
  service_names.push_back(V1Alpha::kService);
  service_names.push_back(V1::kService);
  names_ = std::move(service_names);
  services_.push_back(std::make_unique<ReflectionService<V1Alpha>>(guard, &names_));
  services_.push_back(std::make_unique<ReflectionService<V1>>(guard, &names_));
}

ReflectionServices::~ReflectionServices() = default;

std::vector<grpc::Service*> ReflectionServices::services() {
  std::vector<grpc::Service*> out;
  for (const auto& service : services_) out.push_back(service.get());
  return out;
}

}  // namespace sbp::server
