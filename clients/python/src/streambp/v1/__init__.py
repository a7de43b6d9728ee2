"""The protobuf and gRPC modules of proto/streambp/v1, generated when the package is built.

jobs_pb2 / jobs_pb2_grpc (JobService), job_output_pb2, common_pb2 and
workers_pb2, written by clients/python/generate.py (which setup.py runs).
"""
