# One image with sbp, sbp-coordinator and sbp-worker, the CUDA backend built
# for sm_80 and sm_90. The Helm chart (helm/streambp) runs it.
#   docker build -t streambp:0.1.0 .
#   docker run --rm streambp:0.1.0 sbp --version
# NVIDIA publishes its CUDA images for Ubuntu, not Debian; Ubuntu 24.04 has the
# library versions the project builds with on Debian 12 (gRPC 1.51, Protobuf
# 3.21, Abseil 20220623) under the same package names, so scripts/bootstrap
# installs the build dependencies here as it does on a developer's machine.
ARG CUDA_VERSION=13.0.0
ARG BASE_OS=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-${BASE_OS} AS build
WORKDIR /src
COPY scripts/bootstrap scripts/bootstrap
RUN scripts/bootstrap && rm -rf /var/lib/apt/lists/*
COPY . .
# SBP_WERROR=OFF: a newer compiler's new warnings must not fail an image build.
RUN cmake -S . -B build -G Ninja -DSBP_CUDA=ON -DSBP_WERROR=OFF -DCMAKE_BUILD_TYPE=Release \
 && cmake --build build --target sbp sbp-coordinator sbp-worker
# The packages that own the shared libraries the binaries load, matched by path
# with or without /usr (the CUDA driver is not among them: the NVIDIA
# container runtime provides it).
RUN ldd build/bin/sbp build/bin/sbp-coordinator build/bin/sbp-worker \
      | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u \
      | xargs realpath | sed 's|^/usr/|/|; s|^|*|' \
      | xargs dpkg -S | cut -d: -f1 | tr ',' '\n' | tr -d ' ' | sort -u > runtime-packages \
 && cat runtime-packages

FROM nvidia/cuda:${CUDA_VERSION}-runtime-${BASE_OS}
ARG CUDA_VERSION
COPY --from=build /src/runtime-packages /tmp/runtime-packages
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      $(cat /tmp/runtime-packages) \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages \
 && useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin streambp \
 && install -d -o 10001 -g 10001 /var/lib/streambp /shared
# cuBLAS is not among the libraries the binaries link: the CUDA backend loads
# it when a GPU job starts (kernels/cuda/cublas_library.h), from the CUDA
# runtime image's own copy; fail the build here rather than the first GPU job.
RUN ldconfig -p | grep -q "libcublas\.so\.${CUDA_VERSION%%.*} " \
 || { echo "libcublas.so.${CUDA_VERSION%%.*} is not in the image" >&2; exit 1; }
COPY --from=build /src/build/bin/sbp /src/build/bin/sbp-coordinator /src/build/bin/sbp-worker \
     /usr/local/bin/
USER 10001:10001
WORKDIR /shared
# 7700 coordinator gRPC, 9400 coordinator metrics, 9401 worker metrics.
EXPOSE 7700 9400 9401
# Checks the coordinator (the default command) over grpc.health.v1. Run worker
# containers with --no-healthcheck; Kubernetes uses the chart's probes instead.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s \
  CMD ["sbp", "health", "--coordinator", "127.0.0.1:7700", "--timeout", "4"]
CMD ["sbp-coordinator", "--listen", "0.0.0.0:7700", "--metrics-listen", "0.0.0.0:9400", \
     "--db", "/var/lib/streambp/sbp.db"]
