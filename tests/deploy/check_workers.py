#!/usr/bin/env python3
"""Checks the worker pods of rendered StreamBP manifests (the Helm chart's
output, deploy/kubernetes/):

  processes  every sbp-worker the pod runs (one, or one per GPU of a
             whole-node pod started by its sbp-workers launcher) has its own
             --name, --device and --metrics-listen port; each metrics port is
             a named container port (metrics, or metrics-gpu<i>) that the
             workers' Service publishes.
  cuda       the pod requests as many nvidia.com/gpu as it runs workers, whose
             devices are cuda:0 .. cuda:N-1; with --gpus N, N per pod.
  cpu        (--cpu) no nvidia.com/gpu request, no GPU node selector and no
             GPU toleration: the pod schedules on any node.
  shm        /dev/shm is a memory-backed emptyDir that all of the pod's
             workers share (NCCL's shared-memory transport).
  launcher   a whole-node pod runs bash with the chart's sbp-workers from a
             mounted ConfigMap, whose text is helm/streambp/files/sbp-workers.sh.
  --memory   (--memory VALUE) every worker's --memory is VALUE.

  check_workers.py [--cpu] [--gpus N] [--memory VALUE] [--launcher FILE] FILE...

Exit 0 when all pass, 1 otherwise.
"""
import argparse
import re
import sys

# The manifests' documents and a container's sbp-worker command lines, read
# as the security check reads them.
from check_security import load, worker_runs

GPU = "nvidia.com/gpu"


def flag(args, name):
    values = [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]
    return values[-1] if values else None


def check(objects, args, launcher_text):
    errors = []
    services = [o for o in objects if o["kind"] == "Service"]
    config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    pods = 0
    for o in objects:
        if o["kind"] not in ("StatefulSet", "Deployment", "DaemonSet"):
            continue
        spec = o["spec"]["template"]["spec"]
        labels = o["spec"]["template"]["metadata"].get("labels", {})
        for c in spec.get("containers", []):
            runs = worker_runs(c)
            if not runs:
                continue
            pods += 1
            where = f"{o['kind']}/{o['metadata']['name']}"
            names = [flag(r, "--name") for r in runs]
            devices = [flag(r, "--device") for r in runs]
            listens = [flag(r, "--metrics-listen") for r in runs]
            for what, values in (("--name", names), ("--device", devices),
                                 ("--metrics-listen", listens)):
                if None in values:
                    errors.append(f"{where}: a worker without {what}")
                elif len(set(values)) != len(values):
                    errors.append(f"{where}: workers share {what}: {values}")
            if args.memory is not None:
                for r in runs:
                    if flag(r, "--memory") != args.memory:
                        errors.append(f"{where}: --memory={flag(r, '--memory')}, "
                                      f"expected {args.memory}")
            # Metrics ports: declared by the container and published by a Service.
            declared = {p["containerPort"]: p.get("name") for p in c.get("ports", [])}
            published = {p.get("targetPort") for s in services
                         if all(labels.get(k) == v for k, v in
                                (s["spec"].get("selector") or {}).items()) and s["spec"].get("selector")
                         for p in s["spec"].get("ports", [])}
            for listen in filter(None, listens):
                port = int(listen.rsplit(":", 1)[1])
                name = declared.get(port)
                if name is None or not re.fullmatch(r"metrics(-gpu[0-9]+)?", name):
                    errors.append(f"{where}: metrics port {port} is no container port named "
                                  f"metrics or metrics-gpu<i>")
                elif name not in published:
                    errors.append(f"{where}: no Service publishes its port {name}")
            # GPUs.
            resources = c.get("resources") or {}
            gpus = [(resources.get(k) or {}).get(GPU) for k in ("limits", "requests")]
            gpus = int(next((g for g in gpus if g is not None), 0))
            cuda = [d for d in devices if d and d.startswith("cuda")]
            if args.cpu:
                if gpus or cuda:
                    errors.append(f"{where}: cpu workers request {gpus} GPU(s), devices {devices}")
                for key, value in (spec.get("nodeSelector") or {}).items():
                    if "nvidia" in key or "gpu" in key or "accelerator" in key:
                        errors.append(f"{where}: cpu workers keep the GPU nodeSelector {key}={value}")
                for t in spec.get("tolerations") or []:
                    if "nvidia" in str(t.get("key", "")) or "gpu" in str(t.get("key", "")):
                        errors.append(f"{where}: cpu workers keep the GPU toleration {t}")
            else:
                if sorted(cuda) != [f"cuda:{i}" for i in range(len(runs))]:
                    errors.append(f"{where}: devices {devices}, not cuda:0..cuda:{len(runs) - 1}")
                if gpus != len(runs):
                    errors.append(f"{where}: requests {gpus} GPU(s) for {len(runs)} worker(s)")
                if args.gpus is not None and len(runs) != args.gpus:
                    errors.append(f"{where}: {len(runs)} worker(s) per pod, expected {args.gpus}")
            # /dev/shm: a memory emptyDir.
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            shm = [m for m in c.get("volumeMounts", []) if m["mountPath"] == "/dev/shm"]
            if len(shm) != 1 or (volumes.get(shm[0]["name"], {}).get("emptyDir") or {}).get(
                    "medium") != "Memory":
                errors.append(f"{where}: /dev/shm is not a memory-backed emptyDir")
            # The launcher.
            if len(runs) > 1 or c["command"][:1] != ["sbp-worker"]:
                mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
                script = c["command"][-1]
                directory, _, key = script.rpartition("/")
                volume = volumes.get(mounts.get(directory), {})
                config_map = config_maps.get((volume.get("configMap") or {}).get("name"))
                if c["command"][0] != "/bin/bash" or config_map is None:
                    errors.append(f"{where}: the launcher {script} is not a mounted ConfigMap "
                                  f"run by /bin/bash")
                elif launcher_text is not None and config_map["data"].get(key) != launcher_text:
                    errors.append(f"{where}: ConfigMap {config_map['metadata']['name']} key {key} "
                                  f"is not {args.launcher}")
    if pods == 0:
        errors.append("no worker pods")
    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--gpus", type=int)
    parser.add_argument("--memory")
    parser.add_argument("--launcher")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    launcher_text = open(args.launcher).read() if args.launcher else None
    failed = 0
    for path in args.files:
        for e in check(load(path), args, launcher_text):
            print(f"FAIL {path}: {e}")
            failed += 1
    print(f"check_workers: {len(args.files)} file(s), {failed} problem(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
