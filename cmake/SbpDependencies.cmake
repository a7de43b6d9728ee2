# Third-party libraries, all from Debian packages installed by scripts/bootstrap.
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(absl REQUIRED)
find_package(Protobuf REQUIRED)
find_package(GTest REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(yaml-cpp REQUIRED)
# `sbp plot` writes its charts as PNG files (libpng-dev).
find_package(PNG REQUIRED)

# OpenBLAS, the OpenMP build, by its own path. Debian installs each variant in
# /usr/lib/<multiarch>/openblas-<variant>/ and points the shared
# /usr/lib/<multiarch>/libopenblas.so.0 at one of them through the alternatives
# system, which prefers the pthread variant (priority 100 against 95) whenever
# libopenblas0-pthread is installed. Its thread pool then fights the kernels'
# OpenMP one and a training step takes twice as long. So the library is found
# in the OpenMP directory only, and every executable that links it carries
# that directory in its RUNPATH (DT_RUNPATH is not transitive: it has to be on
# the object whose NEEDED names libopenblas.so.0, and the project's libraries
# are static), so that the loader takes libopenblas.so.0 from there before
# the alternatives link. LD_LIBRARY_PATH still comes first; the binaries check
# the variant they loaded at start-up (kernels/cpu/blas_info.h).
find_path(SBP_OPENBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas-openmp openblas REQUIRED)
set(_sbp_openblas_openmp_dirs /usr/lib/openblas-openmp)
if(CMAKE_LIBRARY_ARCHITECTURE)
  list(PREPEND _sbp_openblas_openmp_dirs /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp)
endif()
find_library(SBP_OPENBLAS_OPENMP_LIB NAMES openblas PATHS ${_sbp_openblas_openmp_dirs}
             NO_DEFAULT_PATH DOC "libopenblas of the OpenMP build (libopenblas-openmp-dev)")
if(NOT SBP_OPENBLAS_OPENMP_LIB)
  message(FATAL_ERROR "no OpenMP build of OpenBLAS in ${_sbp_openblas_openmp_dirs}: "
                      "install libopenblas-openmp-dev (scripts/bootstrap)")
endif()
get_filename_component(SBP_OPENBLAS_OPENMP_DIR ${SBP_OPENBLAS_OPENMP_LIB} DIRECTORY)
message(STATUS "OpenBLAS (OpenMP build): ${SBP_OPENBLAS_OPENMP_LIB}")
add_library(sbp_openblas INTERFACE)
target_include_directories(sbp_openblas SYSTEM INTERFACE ${SBP_OPENBLAS_INCLUDE})
target_link_libraries(sbp_openblas INTERFACE ${SBP_OPENBLAS_OPENMP_LIB} ${CMAKE_DL_LIBS})
# A linker flag on this target rather than CMake's RPATH properties: it goes
# with the library to exactly the executables that link it, and an install
# step, which replaces CMake's build RPATH, keeps it. --enable-new-dtags makes
# it a DT_RUNPATH, which LD_LIBRARY_PATH still overrides (a DT_RPATH would not).
target_link_options(sbp_openblas INTERFACE
                    "LINKER:--enable-new-dtags"
                    "LINKER:-rpath,${SBP_OPENBLAS_OPENMP_DIR}")

# Coordinator: SQLite state store, Prometheus metrics. (Server reflection is
# the coordinator's own callback service, server/reflection_service.cc: never
# link libgrpc++_reflection beside it, both register the same descriptors.)
find_package(SQLite3 REQUIRED)
find_package(prometheus-cpp REQUIRED)
