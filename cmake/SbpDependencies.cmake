# Third-party libraries, all from Debian packages installed by scripts/bootstrap.
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(absl REQUIRED)
find_package(Protobuf REQUIRED)
find_package(GTest REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(yaml-cpp REQUIRED)

# OpenBLAS (OpenMP build): cblas.h plus libopenblas.
find_path(SBP_OPENBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas-openmp openblas REQUIRED)
find_library(SBP_OPENBLAS_LIB NAMES openblas REQUIRED)
add_library(sbp_openblas INTERFACE)
target_include_directories(sbp_openblas SYSTEM INTERFACE ${SBP_OPENBLAS_INCLUDE})
target_link_libraries(sbp_openblas INTERFACE ${SBP_OPENBLAS_LIB})

# Coordinator: SQLite state store, Prometheus metrics, gRPC server reflection
# (Debian ships libgrpc++_reflection without a pkg-config file).
find_package(SQLite3 REQUIRED)
find_package(prometheus-cpp REQUIRED)
find_library(SBP_GRPCPP_REFLECTION_LIB NAMES grpc++_reflection REQUIRED)
add_library(sbp_grpcpp_reflection INTERFACE)
target_link_libraries(sbp_grpcpp_reflection INTERFACE ${SBP_GRPCPP_REFLECTION_LIB})
